"""The paper's compute conventions (`compute`): per-rollout sums, standard errors, the external
reference, the unweighted aggregate over tasks, and the published numbers beside them."""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path

from clbench.results import load_metadata, load_records
from clbench.upstream import mappings
from clbench.upstream.artifacts import SOURCE_KIND
from clbench.upstream.paper import PUBLISHED_AGGREGATE


def is_upstream_import(meta: dict) -> bool:
    return (meta.get("source") or {}).get("kind") == SOURCE_KIND


def _se(values: list[float]) -> float | None:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None


def _published_task(task: str, system: str) -> dict | None:
    t = mappings.get(task)
    p = t.published.get(system) if t is not None else None
    return {"cumulative_reward": p[0], "se": p[1], "cumulative_gain": p[2]} if p else None


def _task_row(task: str, system: str, params: dict, sums: list[float] | None, baseline: float,
              n: int, source: str) -> dict:
    ext = (params.get("upstream") or {}).get("r_external")
    if ext is None:  # a native clbench run: its per-instance reference, as a sum
        ext = float(params["r_reference"]) * n
    top = float(params["r_max"]) * n
    mean = statistics.fmean(sums) if sums else None
    se = _se(sums) if sums else None
    row = {"task": task, "system": system, "instances": n, "rollouts": len(sums) if sums else None,
           "source": source, "r_max": float(params["r_max"]), "top": top, "r_external": ext,
           "baseline_sum": baseline, "per_rollout": sums,
           "cumulative_reward": {"mean": mean, "se": se}}
    if mean is None:
        return row
    row["cumulative_gain"] = {"mean": mean - baseline, "se": se}
    row["normalized_gain"] = {"mean": (mean - baseline) / (top - baseline),
                              "se": se / (top - baseline) if se is not None else None}
    row["normalized_reward"] = {"mean": (mean - ext) / (top - ext),
                                "se": se / (top - ext) if se is not None else None}
    row["published"] = _published_task(task, system)
    return row


def _summary_row(task: str, system: str, params: dict, info: dict) -> dict:
    """A task known only from its headline: point estimates, no standard errors."""
    n = int(params["instances"])
    row = _task_row(task, system, params, [info["cumulative_reward"]], float(info["baseline_sum"]), n, info["source"])
    row["rollouts"], row["per_rollout"] = None, None
    return row


def _reward_of(rec: dict) -> float:
    return float(rec["upstream_reward"] if rec.get("upstream_reward") is not None else rec["reward"])


def compute_from(records: list[dict], meta: dict) -> dict:
    """Upstream-convention metrics of one run directory's records (see clbench.upstream's docstring)."""
    groups: dict[tuple[str, str], dict] = defaultdict(lambda: {"sf": defaultdict(float), "sl": {}})
    for rec in records:
        g = groups[(rec["task"], rec["system"])]
        if rec["mode"] == "stateless":
            g["sl"][rec["instance_id"]] = _reward_of(rec)
        else:
            g["sf"][int(rec["rollout"])] += _reward_of(rec)
    rows = []
    for (task, system), g in sorted(groups.items()):
        params = meta["tasks"][task]
        if not g["sf"] or not g["sl"]:
            raise ValueError(f"{task}/{system}: needs stateful and stateless records")
        sums = [g["sf"][k] for k in sorted(g["sf"])]
        rows.append(_task_row(task, system, params, sums, sum(g["sl"].values()), len(g["sl"]), "records"))
    systems = sorted(meta.get("systems") or {s for _, s in groups})
    for task, info in ((meta.get("upstream") or {}).get("summary_only") or {}).items():
        params = meta["tasks"][task]
        for system in systems:
            rows.append(_summary_row(task, system, params, info))
    rows.sort(key=lambda r: (r["system"], r["task"]))
    aggregate = {}
    for system in sorted({r["system"] for r in rows}):
        mine = [r for r in rows if r["system"] == system]
        agg = {"tasks": [r["task"] for r in mine]}
        for name in ("normalized_reward", "normalized_gain"):
            agg[name] = statistics.fmean(r[name]["mean"] for r in mine)
        pub = PUBLISHED_AGGREGATE.get(system)
        agg["published"] = {"normalized_reward": round(pub[0] / 100, 4), "normalized_gain": round(pub[1] / 100, 4)} if pub else None
        aggregate[system] = agg
    return {"conventions": "upstream", "tasks": rows, "aggregate": aggregate}


def compute(run_dir: str | Path) -> dict:
    """Upstream-convention metrics of a run directory (an import, or a native clbench run)."""
    return compute_from(load_records(run_dir), load_metadata(run_dir))


def position_paired_cumulative_gain(records: list[dict], task: str, system: str) -> list[float]:
    """Mean over rollouts of the cumulative gain when rollout position p is paired with the
    baseline's canonical position p, as upstream's gain curves do; with permuted rollouts this
    pairs different instances (the final value, a sum, is unaffected)."""
    sl = {int(r["position"]): float(r["reward"]) for r in records
          if r["task"] == task and r["system"] == system and r["mode"] == "stateless"}
    per: dict[int, dict[int, float]] = defaultdict(dict)
    for r in records:
        if r["task"] == task and r["system"] == system and r["mode"] == "stateful":
            p = int(r["position"])
            per[int(r["rollout"])][p] = float(r["reward"]) - sl[p]
    n = max(len(v) for v in per.values())
    curves = []
    for k in sorted(per):
        total, curve = 0.0, []
        for p in range(n):
            total += per[k].get(p, 0.0)
            curve.append(total)
        curves.append(curve)
    return [statistics.fmean(c[p] for c in curves) for p in range(n)]
