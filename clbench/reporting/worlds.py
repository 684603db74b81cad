"""A system's results on the canonical world next to its results on fresh worlds (issue 29).

A system that scores well only on the canonical world has learned the repository, not the task:
`world_comparison(run_dirs)` puts, per task and system, every run directory's headline metrics
side by side with their 95% CIs, the world each was played on (from metadata: world_seed, world
key) and the gap to the canonical run with its own interval. The runs are independent samples,
so the gap's replicate b is canonical replicate b minus fresh replicate b (the same bootstrap size).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from clbench.metrics import summarize
from clbench.reporting.tables import Table, fmt_est

METRICS = ("normalized_gain", "normalized_reward", "stability", "plasticity")


def _world(meta: dict, task: str) -> str:
    params = meta["tasks"].get(task, {})
    return params.get("world") or "canonical"


def world_comparison(run_dirs: list[str | Path], n_boot: int | None = None) -> Table:
    """One row per (task, system, run): the world, mean reward and METRICS with CIs, and each
    metric's gap to the same system's canonical-world run (canonical minus this world)."""
    from clbench.runcard import compute

    results = []
    for d in run_dirs:
        r = compute(d, n_boot=n_boot)
        results.append((str(d), r))
    canonical = {}
    for d, r in results:
        for t in r["tasks"]:
            if _world(r["metadata"], t["task"]) == "canonical":
                canonical.setdefault((t["task"], t["system"]), (t, r["draws"][(t["task"], t["system"])]))
    rows = []
    for d, r in results:
        for t in r["tasks"]:
            key = (t["task"], t["system"])
            world = _world(r["metadata"], t["task"])
            row = [t["task"], t["system"], world, Path(d).name, fmt_est(t["mean_reward"])]
            row += [fmt_est(t[m]) for m in METRICS]
            base = canonical.get(key)
            if base is None or world == "canonical":
                row.append("-")
            else:
                gap = _gap(base[0], base[1], t, r["draws"][key], "normalized_reward")
                row.append(fmt_est(gap))
            rows.append(row)
    return Table("Canonical world vs fresh worlds",
                 ["task", "system", "world", "run", "mean reward [95% CI] (unit)",
                  *(f"{m.replace('_', ' ')} [95% CI] (fraction)" for m in METRICS),
                  "normalized reward gap, canonical - this world [95% CI] (fraction)"], rows,
                 "Each world is normalized by its own r_max and r_reference (never the canonical one's). A "
                 "gap whose interval excludes 0 means the system does better on the canonical world: it "
                 "knows the repository's world, not only the task.")


def _gap(t0: dict, d0: dict, t1: dict, d1: dict, name: str) -> dict:
    if t0[name]["mean"] is None or t1[name]["mean"] is None:
        return {"mean": None, "se": None, "ci": [None, None], "n": 0}
    a, b = np.asarray(d0[name], dtype=float), np.asarray(d1[name], dtype=float)
    draws = a[: min(len(a), len(b))] - b[: min(len(a), len(b))]
    return summarize(t0[name]["mean"] - t1[name]["mean"], draws, t1[name]["n"])
