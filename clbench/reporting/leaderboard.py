"""Leaderboards across run directories: rows = systems, columns = tasks and the suite aggregate.

A system may be spread over several directories (one per task); the same (system, task) twice is an
error. Each cell holds normalized reward and normalized gain under one set of conventions; a task
known only from an upstream manifest headline (no per-instance records) enters as that point
estimate, marked, under the upstream conventions, and is shown (not aggregated, having no interval)
under clbench's when clbench scores the task like upstream did.

Ranking uses clbench.metrics.aggregate, the one aggregate definition of run cards and reports,
restricted to the tasks every compared system has; the other tasks are named and left out, and
with no shared task there is no ranking.
"""
from __future__ import annotations

from pathlib import Path

from clbench import upstream
from clbench.metrics import HEADLINE, aggregate, compute
from clbench.reporting import SORT_KEYS
from clbench.reporting.model import cost_summary, resolve
from clbench.reporting.tables import Table, display_name
from clbench.results import load_metadata, load_records

HEADLINE_MARK = "†"


def _same_scoring(params: dict) -> bool:
    up = params.get("upstream") or {}
    return up.get("r_external") is not None and up.get("r_external") == up.get("r_external_clbench")


def _cells(run_dir: Path, meta: dict, conventions: str, n_boot: int | None) -> list[dict]:
    """One cell per (task, system): the task's estimates (`result`, aggregable with `draws`); the
    directory's records are read once (its metadata comes read)."""
    records = load_records(run_dir)
    costs = cost_summary(records)
    up = upstream.compute_from(records, meta) if (conventions == "upstream" or upstream.is_upstream_import(meta)) else None
    summary_only = (meta.get("upstream") or {}).get("summary_only") or {}
    rows = []  # (task result, draws or None, headline only)
    if conventions == "upstream":
        rows = [(r, None, r["source"] != "records") for r in up["tasks"]]
    else:
        computed = compute(records, meta, n_boot=n_boot)
        rows = [(t, computed["draws"][(t["task"], t["system"])], False) for t in computed["tasks"]]
        if up is not None:
            rows += [(r, None, True) for r in up["tasks"]
                     if r["source"] != "records" and _same_scoring(meta["tasks"][r["task"]])]
    cells = []
    for result, draws, headline in rows:
        task, system = result["task"], result["system"]
        cost = (costs.get((task, system)) or {}).get("per_rollout")
        if headline:
            cost = (summary_only.get(task) or {}).get("cost_per_rollout")
        cells.append({"task": task, "system": system, "label": display_name(meta, system), "cost": cost,
                      **{m: result[m]["mean"] for m in SORT_KEYS},
                      "ci": {m: result[m].get("ci") for m in SORT_KEYS} if draws is not None else None,
                      "headline_only": headline, "run_dir": str(run_dir), "result": result, "draws": draws})
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
    names = sorted({s for s, _ in cells})
    # under clbench conventions a headline-only cell has no interval: shown, never aggregated
    counted = {s: {t for (s2, t), c in cells.items() if s2 == s and (chosen == "upstream" or not c["headline_only"])}
               for s in names}
    shared = sorted(set.intersection(*counted.values())) if counted else []
    if not shared:
        raise ValueError("no task is shared by all compared systems ("
                         + "; ".join(f"{s}: {', '.join(sorted(counted[s])) or 'none'}" for s in names)
                         + "): nothing to rank them on")
    systems = []
    for system in names:
        mine = {t: cells[(system, t)] for t in tasks if (system, t) in cells}
        used = [mine[t] for t in shared]
        draws = [c["draws"] for c in used] if chosen == "clbench" else None
        agg = aggregate([c["result"] for c in used], draws, names=HEADLINE)
        pub = upstream.PUBLISHED_AGGREGATE.get(system) if chosen == "upstream" else None
        systems.append({"system": system, "label": next(iter(mine.values()))["label"], "cells": mine,
                        "aggregate": agg, "tasks_covered": len(mine),
                        "published": {"normalized_reward": round(pub[0] / 100, 4), "normalized_gain": round(pub[1] / 100, 4)} if pub else None})
    systems.sort(key=lambda s: (s["aggregate"][sort]["mean"] is None, -(s["aggregate"][sort]["mean"] or 0.0), s["label"]))
    for s in systems:  # the bootstrap replicates served the aggregate; keep the board JSON-sized
        for c in s["cells"].values():
            c.pop("draws", None)
            c.pop("result", None)
    return {"conventions": chosen, "sort": sort, "tasks": tasks, "shared_tasks": shared,
            "left_out": sorted(set(tasks) - set(shared)), "systems": systems}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def _pct_ci(x: float | None, ci) -> str:
    """A percentage with its bootstrap 95% CI when the cell has one."""
    if not ci or ci[0] is None or ci[1] is None:
        return _pct(x)
    return f"{_pct(x)} [{_pct(ci[0])}, {_pct(ci[1])}]"


def _agg_cell(e: dict) -> str:
    return "undefined" if e.get("mean") is None and e.get("undefined") else _pct_ci(e["mean"], e.get("ci"))


def table(board: dict) -> Table:
    tasks = board["tasks"]
    with_pub = any(s["published"] for s in board["systems"])
    headers = ["#", "system", *(f"{t} (NR % / NG %)" for t in tasks), "aggregate NR %", "aggregate NG %"] \
        + (["published (paper Table 1, NR % / NG %)"] if with_pub else [])
    rows = []
    for rank, s in enumerate(board["systems"], 1):
        cells = []
        for t in tasks:
            c = s["cells"].get(t)
            ci = (c.get("ci") or {}) if c is not None else {}
            cells.append("—" if c is None else f"{_pct_ci(c['normalized_reward'], ci.get('normalized_reward'))} / "
                         f"{_pct_ci(c['normalized_gain'], ci.get('normalized_gain'))}"
                         + (HEADLINE_MARK if c["headline_only"] else ""))
        row = [str(rank), s["label"], *cells, _agg_cell(s["aggregate"]["normalized_reward"]),
               _agg_cell(s["aggregate"]["normalized_gain"])]
        if with_pub:
            pub = s["published"]
            row.append(f"{_pct(pub['normalized_reward'])} / {_pct(pub['normalized_gain'])}" if pub else "")
        rows.append(row)
    notes = [f"Cells: normalized reward % / normalized gain % [95% CI where available]. Ranked by aggregate "
             f"{board['sort'].replace('_', ' ')}: the unweighted mean over the {len(board['shared_tasks'])} tasks every "
             f"system has ({', '.join(board['shared_tasks'])})."]
    if board["left_out"]:
        notes.append(f"Left out of the aggregate (not shared by every system): {', '.join(board['left_out'])}.")
    if board["conventions"] == "upstream":
        notes.append("Upstream conventions: per-rollout sums, r_max as published, external reference = "
                     f"{upstream.REFERENCE_SYSTEM}'s stateless baseline.")
    else:
        notes.append("clbench conventions: gains paired by instance id; cohort scores in signed bits; aggregate "
                     "intervals combine the tasks' bootstrap replicates.")
    if any(c["headline_only"] for s in board["systems"] for c in s["cells"].values()):
        notes.append(f"{HEADLINE_MARK} from a manifest headline (no per-instance records).")
    return Table(f"Leaderboard ({board['conventions']} conventions)", headers, rows, " ".join(notes))


def cost_entries(board: dict) -> list[dict]:
    return [{**c} for s in board["systems"] for c in s["cells"].values()]
