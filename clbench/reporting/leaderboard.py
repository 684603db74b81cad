"""Leaderboards across run directories: rows = systems, columns = tasks and the suite aggregate.

A system may be spread over several directories (one per task); the same (system, task) twice is an
error. Each cell holds normalized reward and normalized gain under one set of conventions; a task
known only from an upstream manifest headline (no per-instance records) enters as that point
estimate, marked, under the upstream conventions, and under clbench's too when clbench scores the
task like upstream did (its external reference is the same under both scorings).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from clbench import upstream
from clbench.reporting import SORT_KEYS
from clbench.reporting.model import cost_summary, display_name, resolve
from clbench.reporting.tables import Table
from clbench.results import load_metadata, load_records
from clbench.runcard import compute

HEADLINE_MARK = "†"


def _same_scoring(params: dict) -> bool:
    up = params.get("upstream") or {}
    return up.get("r_external") is not None and up.get("r_external") == up.get("r_external_clbench")


def _cells(run_dir: Path, meta: dict, conventions: str, n_boot: int | None) -> list[dict]:
    records = load_records(run_dir)
    costs = cost_summary(records)
    up = upstream.compute_from(records, meta) if (conventions == "upstream" or upstream.is_upstream_import(meta)) else None
    summary_only = (meta.get("upstream") or {}).get("summary_only") or {}
    cells = []
    cis: dict = {}
    if conventions == "upstream":
        rows = [(r["task"], r["system"], r["normalized_reward"]["mean"], r["normalized_gain"]["mean"],
                 r["source"] != "records") for r in up["tasks"]]
    else:
        computed = compute(run_dir, n_boot=n_boot)["tasks"]
        cis = {(t["task"], t["system"]): (t["normalized_reward"]["ci"], t["normalized_gain"]["ci"]) for t in computed}
        rows = [(t["task"], t["system"], t["normalized_reward"]["mean"], t["normalized_gain"]["mean"], False)
                for t in computed]
        if up is not None:
            rows += [(r["task"], r["system"], r["normalized_reward"]["mean"], r["normalized_gain"]["mean"], True)
                     for r in up["tasks"] if r["source"] != "records" and _same_scoring(meta["tasks"][r["task"]])]
    for task, system, nr, ng, headline in rows:
        cost = (costs.get((task, system)) or {}).get("per_rollout")
        if headline:
            cost = (summary_only.get(task) or {}).get("cost_per_rollout")
        cells.append({"task": task, "system": system, "label": display_name(meta, system), "cost": cost,
                      "normalized_reward": nr, "normalized_gain": ng, "headline_only": headline,
                      "ci": cis.get((task, system)), "run_dir": str(run_dir)})
    return cells


def collect(dirs: list[str | Path], conventions: str = "auto", sort: str = "normalized_reward",
            n_boot: int | None = None) -> dict:
    if sort not in SORT_KEYS:
        raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}, not {sort!r}")
    dirs = [Path(d) for d in dirs]
    metas = [load_metadata(d) for d in dirs]
    chosen = resolve(conventions, metas)[0]  # one set of conventions per leaderboard
    cells: dict[tuple[str, str], dict] = {}
    for d, meta in zip(dirs, metas):
        for c in _cells(d, meta, chosen, n_boot):
            key = (c["system"], c["task"])
            if key in cells:
                raise ValueError(f"{c['system']} / {c['task']} appears in both {cells[key]['run_dir']} and {d}")
            cells[key] = c
    tasks = sorted({t for _, t in cells})
    systems = []
    for system in sorted({s for s, _ in cells}):
        mine = {t: cells[(system, t)] for t in tasks if (system, t) in cells}
        agg = {m: float(np.mean([c[m] for c in mine.values()])) for m in SORT_KEYS}
        pub = upstream.PUBLISHED_AGGREGATE.get(system) if chosen == "upstream" else None
        systems.append({"system": system, "label": next(iter(mine.values()))["label"], "cells": mine,
                        "aggregate": agg, "tasks_covered": len(mine),
                        "published": {"normalized_reward": round(pub[0] / 100, 4), "normalized_gain": round(pub[1] / 100, 4)} if pub else None})
    systems.sort(key=lambda s: (-s["aggregate"][sort], s["label"]))
    return {"conventions": chosen, "sort": sort, "tasks": tasks, "systems": systems}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def _pct_ci(x: float | None, ci) -> str:
    """A percentage with its bootstrap 95% CI when the cell has one."""
    if not ci or ci[0] is None or ci[1] is None:
        return _pct(x)
    return f"{_pct(x)} [{_pct(ci[0])}, {_pct(ci[1])}]"


def table(board: dict) -> Table:
    tasks = board["tasks"]
    with_pub = any(s["published"] for s in board["systems"])
    headers = ["#", "system", *tasks, "aggregate NR %", "aggregate NG %"] + (["published (paper Table 1)"] if with_pub else [])
    rows = []
    for rank, s in enumerate(board["systems"], 1):
        cells = []
        for t in tasks:
            c = s["cells"].get(t)
            ci_r, ci_g = c.get("ci") or (None, None) if c is not None else (None, None)
            cells.append("—" if c is None else f"{_pct_ci(c['normalized_reward'], ci_r)} / "
                         f"{_pct_ci(c['normalized_gain'], ci_g)}" + (HEADLINE_MARK if c["headline_only"] else ""))
        partial = "*" if s["tasks_covered"] < len(tasks) else ""
        row = [str(rank), s["label"], *cells, _pct(s["aggregate"]["normalized_reward"]) + partial,
               _pct(s["aggregate"]["normalized_gain"]) + partial]
        if with_pub:
            pub = s["published"]
            row.append(f"{_pct(pub['normalized_reward'])} / {_pct(pub['normalized_gain'])}" if pub else "")
        rows.append(row)
    notes = [f"Cells: normalized reward % / normalized gain % [bootstrap 95% CI over rollouts where available]. Sorted by aggregate {board['sort'].replace('_', ' ')}."]
    if board["conventions"] == "upstream":
        notes.append("Upstream conventions: per-rollout sums, r_max as published, external reference = "
                     f"{upstream.REFERENCE_SYSTEM}'s stateless baseline.")
    else:
        notes.append("clbench conventions: gains paired by instance id; cohort scores in signed bits.")
    if any(c["headline_only"] for s in board["systems"] for c in s["cells"].values()):
        notes.append(f"{HEADLINE_MARK} from a manifest headline (no per-instance records).")
    if any(s["tasks_covered"] < len(tasks) for s in board["systems"]):
        notes.append("* mean over the tasks this system has.")
    return Table(f"Leaderboard ({board['conventions']} conventions)", headers, rows, " ".join(notes))


def cost_entries(board: dict) -> list[dict]:
    return [{**c} for s in board["systems"] for c in s["cells"].values()]
