"""Accuracy breakdowns of MemoryProbe answers: by depth quartile, explicit vs implicit, and more.

Input: question outcomes as the env reports them in the final step's
`info["details"]["question_outcomes"]` (dicts with qid, key, category, structure, kind, depth,
age_sessions, correct), or the infos / result records that carry them (the runner keeps
`details` in every record).

    from clbench.envs.memoryprobe.breakdown import accuracy_breakdown
    accuracy_breakdown(outcomes)["by_depth_quartile"]

    python -m clbench.envs.memoryprobe.breakdown RUN_DIR   # one line per system and mode

Depth quartiles are equal-count bins of the pooled outcomes' depths (tokens between the oldest
mention an answer needs and the question) unless `edges` (three cut points) are given; pass the
same edges when comparing systems.
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Iterable

import numpy as np

KEY = "question_outcomes"


def flatten(items: Iterable[dict]) -> list[dict]:
    """Outcomes from a mix of outcome dicts and infos/records holding them in details[KEY]."""
    out = []
    for item in items:
        if "correct" in item:
            out.append(item)
        else:
            out.extend((item.get("details") or {}).get(KEY) or [])
    return out


def _acc(rows: list[dict]) -> dict:
    n = len(rows)
    return {"n": n, "accuracy": (sum(bool(r["correct"]) for r in rows) / n) if n else None}


def depth_edges(outcomes: list[dict]) -> list[float]:
    return [float(x) for x in np.quantile([o["depth"] for o in outcomes], [0.25, 0.5, 0.75])]


def accuracy_breakdown(items: Iterable[dict], edges: list[float] | None = None) -> dict:
    rows = flatten(items)
    if not rows:
        return {"overall": _acc([]), "by_kind": {}, "by_depth_quartile": [], "by_category": {}, "by_structure": {}}
    edges = list(edges) if edges is not None else depth_edges(rows)
    if len(edges) != 3:
        raise ValueError("edges must hold three cut points (25th, 50th, 75th percentile)")
    bounds = [float("-inf"), *edges, float("inf")]
    quartiles = []
    for q in range(4):
        lo, hi = bounds[q], bounds[q + 1]
        # the last bin is closed so that every depth falls into exactly one bin
        sel = [r for r in rows if lo < r["depth"] <= hi] if q else [r for r in rows if r["depth"] <= hi]
        quartiles.append({"quartile": q + 1, "depth_min": lo if q else 0.0, "depth_max": hi, **_acc(sel)})
    groups: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        for field in ("kind", "category", "structure"):
            groups[field][r[field]].append(r)
    return {
        "overall": _acc(rows),
        "depth_edges": edges,
        "by_depth_quartile": quartiles,
        "by_kind": {k: _acc(v) for k, v in sorted(groups["kind"].items())},
        "by_category": {k: _acc(v) for k, v in sorted(groups["category"].items())},
        "by_structure": {k: _acc(v) for k, v in sorted(groups["structure"].items())},
    }


def breakdown_text(name: str, result: dict) -> str:
    """One line per system: overall, explicit/implicit and the four depth quartiles."""
    def f(a):
        return "  n/a" if a is None else f"{a:.3f}"
    kinds = " ".join(f"{k} {f(v['accuracy'])}" for k, v in result["by_kind"].items())
    quarts = " ".join(f"Q{q['quartile']} {f(q['accuracy'])}" for q in result["by_depth_quartile"])
    return f"{name:26s} overall {f(result['overall']['accuracy'])} | {kinds} | depth {quarts}"


def run_breakdowns(run_dir: str | Path, task: str = "memoryprobe") -> dict[tuple[str, str], dict]:
    """{(system, mode): breakdown} of a run directory, all with the same depth edges."""
    from clbench.results import load_records

    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for rec in load_records(run_dir):
        if rec.get("task") == task:
            groups[(rec["system"], rec["mode"])].append(rec)
    pooled = flatten(r for recs in groups.values() for r in recs)
    if not pooled:
        return {}
    edges = depth_edges(pooled)
    return {k: accuracy_breakdown(v, edges) for k, v in sorted(groups.items())}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m clbench.envs.memoryprobe.breakdown RUN_DIR", file=sys.stderr)
        return 2
    results = run_breakdowns(args[0])
    if not results:
        print(f"{args[0]}: no MemoryProbe question outcomes", file=sys.stderr)
        return 1
    edges = next(iter(results.values()))["depth_edges"]
    print("depth quartile edges (tokens back): " + ", ".join(f"{e:.0f}" for e in edges))
    for (system, mode), result in results.items():
        print(breakdown_text(f"{system}/{mode}", result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
