"""Everything a report shows about one run directory, computed once.

Two sets of conventions can be selected:

- ``clbench``: clbench.metrics on the records' ``reward`` (gain paired by instance id, paired
  bootstrap 95% CIs over instances, rollouts and stateless passes, stability/plasticity split, curves);
- ``upstream``: clbench.upstream.compute (per-rollout sums, standard errors, the external reference
  of the original benchmark), which reproduces the original CL-Bench's published numbers.

``auto`` selects both for directories imported from upstream and clbench's own otherwise.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from clbench import metrics, upstream
from clbench.reporting import CHOICES
from clbench.reporting.tables import display_name  # one name per system in every table and plot
from clbench.results import load_metadata, load_records


def resolve(choice: str, metas: list[dict]) -> tuple[str, ...]:
    """The conventions a choice stands for, given the metadata of the directories shown."""
    if choice not in CHOICES:
        raise ValueError(f"conventions must be one of {', '.join(CHOICES)}, not {choice!r}")
    if choice == "both":
        return ("upstream", "clbench")
    if choice != "auto":
        return (choice,)
    return ("upstream", "clbench") if metas and all(upstream.is_upstream_import(m) for m in metas) else ("clbench",)


@dataclass
class RunReport:
    run_dir: Path
    conventions: tuple[str, ...]
    metadata: dict
    records: list[dict]
    clbench: dict  # {"tasks": [...], "aggregate": {...}, ...} from clbench.metrics.compute
    upstream: dict | None = None  # clbench.upstream.compute_from, when selected
    costs: dict = field(default_factory=dict)  # (task, system) -> cost summary, when costs exist
    position_paired: dict = field(default_factory=dict)  # (task, system) -> upstream-style cumulative gain

    def display_name(self, system: str) -> str:
        return display_name(self.metadata, system)

    def task_results(self) -> list[dict]:
        return self.clbench["tasks"]


def cost_summary(records: list[dict]) -> dict[tuple[str, str], dict]:
    """Per (task, system): mean stateful cost and tokens per rollout, and the stateless pass's cost."""
    acc: dict[tuple[str, str], dict] = defaultdict(lambda: {"sf": defaultdict(float), "sl": 0.0, "seen": False,
                                                            "tok": defaultdict(lambda: defaultdict(int))})
    for r in records:
        a = acc[(r["task"], r["system"])]
        cost = r.get("cost")
        if cost is not None:
            a["seen"] = True
        if r["mode"] == "stateless":
            a["sl"] += float(cost or 0.0)
        else:
            k = int(r["rollout"])
            a["sf"][k] += float(cost or 0.0)
            for name, v in (r.get("tokens") or {}).items():
                a["tok"][k][name] += int(v or 0)
    out = {}
    for key, a in acc.items():
        if not a["seen"]:
            continue
        tokens = {name: float(np.mean([a["tok"][k].get(name, 0) for k in a["sf"]]))
                  for name in sorted({n for t in a["tok"].values() for n in t})}
        out[key] = {"per_rollout": float(np.mean(list(a["sf"].values()))) if a["sf"] else None,
                    "stateless_pass": a["sl"], "tokens_per_rollout": tokens or None}
    return out


def build(run_dir: str | Path, conventions: str = "auto", n_boot: int | None = None,
          metadata: dict | None = None, records: list[dict] | None = None) -> RunReport:
    """The report of a run directory. Its metadata and records are read once (or passed in, when
    the caller has read them already) and every convention computes from them."""
    run_dir = Path(run_dir)
    meta = load_metadata(run_dir) if metadata is None else metadata
    records = load_records(run_dir) if records is None else records
    chosen = resolve(conventions, [meta])
    report = RunReport(run_dir, chosen, meta, records, metrics.compute(records, meta, n_boot=n_boot),
                       costs=cost_summary(records))
    if "upstream" in chosen:
        report.upstream = upstream.compute_from(records, meta)
        for t in report.clbench["tasks"]:
            report.position_paired[(t["task"], t["system"])] = upstream.position_paired_cumulative_gain(
                records, t["task"], t["system"])
    return report
