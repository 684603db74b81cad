"""Metrics of stateful vs stateless play, exactly as DESIGN.md defines them.

For one task and system, with stateful rollouts k = 1..K and one stateless pass:

- gain per instance `g_t = r_sf,t - r_sl,t`, paired by **instance_id** (never by position);
- cumulative reward `sum_t r_sf,t` and cumulative gain `sum_t g_t` per rollout;
- normalized gain `(mean r_sf - mean r_sl) / (r_max - mean r_sl)`;
- normalized reward `(mean r_sf - r_reference) / (r_max - r_reference)`;
- the stability/plasticity split of normalized gain: every variant starts at a boundary (its
  first position in the rollout's order); the gain earned in the *adaptation window* right after
  each boundary (the first `ceil(window * len(variant))` positions, at least one) is the
  plasticity term, the gain earned afterwards the stability term. Both are divided by the same
  denominator as the normalized gain, so plasticity + stability = normalized gain exactly;
- point estimates are means over rollouts; uncertainty is a percentile bootstrap 95% CI over
  rollouts (seeded, so reports are reproducible) plus the standard error stdev/sqrt(K).

Suite aggregate: the unweighted mean over tasks of each task's estimate.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

N_BOOT = 10_000
DEFAULT_WINDOW = 0.25


@dataclass
class TaskRecords:
    """The records of one (task, system), organised for the metrics."""

    task: str
    system: str
    r_max: float
    r_reference: float
    stateful: dict[int, list[dict]] = field(default_factory=dict)  # rollout -> records by position
    stateless: dict[str, dict] = field(default_factory=dict)  # instance_id -> record


def group_records(records: list[dict], params: dict[str, dict]) -> dict[tuple[str, str], TaskRecords]:
    """Split records by (task, system); `params[task]` gives r_max and r_reference."""
    groups: dict[tuple[str, str], TaskRecords] = {}
    for rec in records:
        task, system = rec["task"], rec["system"]
        if task not in params:
            raise KeyError(f"no r_max/r_reference known for task {task!r}")
        tr = groups.get((task, system))
        if tr is None:
            p = params[task]
            tr = groups[(task, system)] = TaskRecords(task, system, float(p["r_max"]), float(p["r_reference"]))
        if rec["mode"] == "stateless":
            tr.stateless[rec["instance_id"]] = rec
        else:
            tr.stateful.setdefault(int(rec["rollout"]), []).append(rec)
    for tr in groups.values():
        for k in tr.stateful:
            tr.stateful[k].sort(key=lambda r: r["position"])
    return groups


def estimate(values, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """Mean over rollouts with standard error and percentile-bootstrap 95% CI."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"mean": None, "se": None, "ci": [None, None], "n": 0}
    mean = float(v.mean())
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
    if v.size == 1:
        return {"mean": mean, "se": se, "ci": [mean, mean], "n": 1}
    rng = np.random.default_rng(seed)
    boots = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"mean": mean, "se": se, "ci": [float(lo), float(hi)], "n": int(v.size)}


def _window_positions(recs: list[dict], window: float) -> set[int]:
    """Positions inside the adaptation window after each variant boundary of one rollout."""
    by_variant: dict[str, list[int]] = defaultdict(list)
    for r in recs:
        by_variant[r["variant"]].append(r["position"])
    inside: set[int] = set()
    for positions in by_variant.values():
        positions.sort()
        width = max(1, math.ceil(window * len(positions)))
        inside.update(positions[:width])
    return inside


def task_metrics(tr: TaskRecords, window: float = DEFAULT_WINDOW, n_boot: int = N_BOOT) -> dict:
    """Headline metrics, per-variant means and per-position curves for one task and system."""
    if not tr.stateful:
        raise ValueError(f"{tr.task}/{tr.system}: no stateful records")
    if not tr.stateless:
        raise ValueError(f"{tr.task}/{tr.system}: no stateless records (run --mode both)")
    sl = {iid: float(rec["reward"]) for iid, rec in tr.stateless.items()}
    ids = {r["instance_id"] for recs in tr.stateful.values() for r in recs}
    missing = sorted(ids - set(sl))
    if missing:
        raise ValueError(f"{tr.task}/{tr.system}: stateless results missing for {len(missing)} instances, "
                         f"e.g. {missing[:3]}; finish or resume the run")
    mean_sl = float(np.mean([sl[i] for i in sorted(ids)]))
    denom_g = tr.r_max - mean_sl
    denom_r = tr.r_max - tr.r_reference

    per = defaultdict(list)
    windows = {k: _window_positions(recs, window) for k, recs in tr.stateful.items()}
    for k in sorted(tr.stateful):
        recs = tr.stateful[k]
        r = np.array([float(x["reward"]) for x in recs])
        g = np.array([float(x["reward"]) - sl[x["instance_id"]] for x in recs])
        n = len(recs)
        per["mean_reward"].append(r.mean())
        per["cumulative_reward"].append(r.sum())
        per["cumulative_gain"].append(g.sum())
        per["normalized_gain"].append((r.mean() - mean_sl) / denom_g if denom_g > 0 else math.nan)
        per["normalized_reward"].append((r.mean() - tr.r_reference) / denom_r if denom_r > 0 else math.nan)
        g_in = sum(gi for gi, x in zip(g, recs) if x["position"] in windows[k])
        g_out = g.sum() - g_in
        per["plasticity"].append(g_in / (n * denom_g) if denom_g > 0 else math.nan)
        per["stability"].append(g_out / (n * denom_g) if denom_g > 0 else math.nan)

    out = {
        "task": tr.task,
        "system": tr.system,
        "r_max": tr.r_max,
        "r_reference": tr.r_reference,
        "rollouts": len(tr.stateful),
        "instances": len(ids),
        "mean_reward_stateless": mean_sl,
        "cumulative_reward_stateless": float(sum(sl[i] for i in ids)),
        "split_window": window,
    }
    for name, values in per.items():
        out[name] = estimate(values, n_boot=n_boot)
    out["per_variant"] = _per_variant(tr, sl, windows)
    out["shocks"] = shock_effects(tr)
    out["curves"] = _curves(tr, sl)
    out["usage"] = _usage(tr)
    return out


def shock_effects(tr: TaskRecords, before: int = 5) -> list[dict]:
    """Reward just before and after each lifecycle shock, and how fast it recovers.

    recovery = instances from the shock until the mean-over-rollouts stateful reward first gets
    back to the pre-shock level (mean of the `before` instances preceding it); None if never.
    """
    positions = sorted({x["position"] for recs in tr.stateful.values() for x in recs if x.get("shocks")})
    if not positions:
        return []
    n = max(len(v) for v in tr.stateful.values())
    curve = np.full((len(tr.stateful), n), np.nan)
    for row, k in enumerate(sorted(tr.stateful)):
        for x in tr.stateful[k]:
            curve[row, x["position"]] = float(x["reward"])
    mean = np.nanmean(curve, axis=0)
    effects = []
    for p in positions:
        pre = float(np.mean(mean[max(0, p - before):p])) if p else None
        recovery = None
        if pre is not None:
            for q in range(p, n):
                if mean[q] >= pre:
                    recovery = q - p
                    break
        events = sorted({e for recs in tr.stateful.values() for x in recs if x["position"] == p
                         for e in x.get("shocks", [])})
        effects.append({"position": p, "events": events, "reward_before": pre, "reward_after": float(mean[p]),
                        "recovery_instances": recovery})
    return effects


def _per_variant(tr: TaskRecords, sl: dict[str, float], windows: dict[int, set[int]]) -> list[dict]:
    """Per variant: stateful and stateless means, gain, and the gain inside the adaptation window
    (how fast the agent adapts after the boundary; shows faster recovery on returning conditions)."""
    rows: dict[str, dict] = {}
    for k, recs in tr.stateful.items():
        inside = windows[k]
        for x in recs:
            row = rows.setdefault(x["variant"], {"variant": x["variant"], "start": x["position"], "sf": [], "ids": set(),
                                                 "early": []})
            row["start"] = min(row["start"], x["position"])
            row["sf"].append(float(x["reward"]))
            row["ids"].add(x["instance_id"])
            if x["position"] in inside:
                row["early"].append(float(x["reward"]) - sl[x["instance_id"]])
    result = []
    for row in sorted(rows.values(), key=lambda r: r["start"]):
        mean_sf = float(np.mean(row["sf"]))
        mean_sl = float(np.mean([sl[i] for i in row["ids"]]))
        result.append({"variant": row["variant"], "start": row["start"], "instances": len(row["ids"]),
                       "mean_reward_stateful": mean_sf, "mean_reward_stateless": mean_sl,
                       "mean_gain": mean_sf - mean_sl, "window_gain": float(np.mean(row["early"]))})
    return result


def _curves(tr: TaskRecords, sl: dict[str, float]) -> dict:
    """Per-position curves over rollouts; stateless paired to each rollout by instance id."""
    n = max(len(v) for v in tr.stateful.values())
    sf = np.full((len(tr.stateful), n), np.nan)
    slp = np.full_like(sf, np.nan)
    variants = [None] * n
    for row, k in enumerate(sorted(tr.stateful)):
        for x in tr.stateful[k]:
            p = x["position"]
            if p < n:
                sf[row, p] = float(x["reward"])
                slp[row, p] = sl[x["instance_id"]]
                variants[p] = x["variant"]
    gain = sf - slp
    cum_gain = np.nancumsum(gain, axis=1)

    def stat(a):
        return {"mean": np.nanmean(a, axis=0).tolist(), "min": np.nanmin(a, axis=0).tolist(),
                "max": np.nanmax(a, axis=0).tolist()}

    boundaries = [p for p in range(n) if variants[p] is not None and (p == 0 or variants[p] != variants[p - 1])]
    return {"positions": list(range(n)), "variants": variants, "boundaries": boundaries,
            "stateful": stat(sf), "stateless": stat(slp), "gain": stat(gain), "cumulative_gain": stat(cum_gain)}


def _usage(tr: TaskRecords) -> dict:
    total = {"calls": 0, "prompt": 0, "completion": 0, "cached": 0, "reasoning": 0}
    cost, have_cost, have_tokens = 0.0, False, False
    for rec in [*tr.stateless.values(), *(x for v in tr.stateful.values() for x in v)]:
        tokens = rec.get("tokens")
        if tokens:
            have_tokens = True
            for k in total:
                total[k] += int((rec.get("calls") if k == "calls" else tokens.get(k, 0)) or 0)
        if rec.get("cost") is not None:
            cost += float(rec["cost"])
            have_cost = True
    return {"tokens": total if have_tokens else None, "cost": cost if have_cost else None}


def aggregate(task_results: list[dict]) -> dict:
    """Unweighted mean over tasks of each headline metric (one system)."""
    out = {"tasks": sorted(t["task"] for t in task_results)}
    for name in ("normalized_gain", "normalized_reward", "plasticity", "stability"):
        vals = [t[name]["mean"] for t in task_results if t[name]["mean"] is not None]
        out[name] = float(np.mean(vals)) if len(vals) == len(task_results) and vals else None
    return out
