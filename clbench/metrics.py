"""Metrics of stateful vs stateless play, exactly as DESIGN.md defines them (docs/statistics.md).

For one task and system, with stateful rollouts k = 1..K and stateless passes p = 1..P (one per
rollout seed for a stochastic agent, one for a deterministic agent):

- gain per instance `g_t = r_sf,t - r_sl,t`, paired by **instance_id** (never by position), with
  r_sl,t the mean over the stateless passes;
- cumulative reward `sum_t r_sf,t` and cumulative gain `sum_t g_t` per rollout (means over rollouts);
- normalized gain `(mean r_sf - mean r_sl) / (r_max - mean r_sl)`, undefined (with the reason) when
  `mean r_sl >= r_max`;
- normalized reward `(mean r_sf - r_reference) / (r_max - r_reference)`;
- the paper's stability/plasticity split of normalized gain (CL-Bench, Appendix C): B = the first
  instance of each variant in the rollout's order (its boundary: only state carried over from
  earlier variants can help there), W = every other instance (after in-variant feedback);
  stability = f_B (mean r_sf,B - mean r_sl,B) / (r_max - mean r_sl), plasticity = f_W (the same
  over W) / (the same denominator), so stability + plasticity = normalized gain exactly;
- the adaptation window split (clbench's own, not the paper's): the gain earned in the first
  `ceil(window * len(variant))` positions of each variant (at least one) is `early_gain`, the rest
  `late_gain`, over the same denominator, so early_gain + late_gain = normalized gain too;
- uncertainty: a seeded paired bootstrap that resamples instances (the same draw for the stateful
  and the stateless side), rollouts and stateless passes together; 95% percentile CI and the
  bootstrap standard error. When r_max comes with a standard error (Poker's oracle score is
  itself noisy) every replicate also draws r_max, and r_max gets its own interval.

Suite aggregate: the unweighted mean over tasks of each task's estimate; its interval comes from
the mean of the tasks' bootstrap replicates (tasks are independent samples).

`compute(records, meta)` is the one entry point (no I/O): run cards (clbench.runcard.compute reads a
run directory once and calls it), `clbench report` and `clbench compare` all use it.
"""
from __future__ import annotations

import math
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from clbench.error_policy import fault_kind

N_BOOT = 10_000
#: replicates for the per-position curve bands: they are drawn, not read to the third decimal, and
#: the (replicates x rollouts x positions) arrays grow with the schedule
CURVE_BOOT = 1_000
DEFAULT_WINDOW = 0.25
HEADLINE = ("normalized_gain", "normalized_reward")
#: the paper's split (Appendix C): boundary instances (stability) and the others (plasticity)
SPLIT = ("stability", "plasticity")
#: the adaptation window split: the first `window` share of each variant (early) and the rest (late)
WINDOW_SPLIT = ("early_gain", "late_gain")
#: the metrics whose bootstrap replicates a suite aggregate combines
AGGREGATED = (*HEADLINE, *SPLIT, *WINDOW_SPLIT)


def undefined_gain_reason(mean_sl: float, r_max: float) -> str:
    return (f"mean stateless reward {mean_sl:.6g} is at or above r_max {r_max:.6g}: "
            "no headroom to normalize by")


def no_headroom(mean_sl, r_max) -> np.ndarray:
    """r_max - mean_sl is zero or negative, up to rounding (a ratio of rounding errors is no number)."""
    mean_sl, r_max = np.asarray(mean_sl, dtype=float), np.asarray(r_max, dtype=float)
    return r_max - mean_sl <= 1e-9 * np.maximum(1.0, np.abs(r_max))


@dataclass
class TaskRecords:
    """The records of one (task, system), organised for the metrics."""

    task: str
    system: str
    r_max: float
    r_reference: float
    r_max_se: float | None = None  # standard error of r_max when the oracle's score is noisy
    uncalibrated: str | None = None  # why r_max / r_reference are missing (None: the generic reason)
    stateful: dict[int, list[dict]] = field(default_factory=dict)  # rollout -> records by position
    stateless: dict[int, dict[str, dict]] = field(default_factory=dict)  # pass -> instance_id -> record
    #: deals of the env's instances (Poker: rollout seed s plays deal s % deals); > 1 pairs each rollout
    #: with the stateless pass of its seed in the bootstrap (`deal_paired`)
    deals: int = 1


#: why normalized metrics of a task without r_max / r_reference are undefined
UNCALIBRATED = "the task is uncalibrated (no r_max / r_reference): run `clbench calibrate --env ID --write`"


def uncalibrated_reason(params: dict) -> str:
    """Why a task's normalized metrics are undefined for want of r_max / r_reference: on a schedule
    or world other than the canonical default, its own calibration is missing (the default's
    baselines never stand in for it)."""
    schedule, world = params.get("schedule") or "default", params.get("world") or "canonical"
    if schedule == "default" and world == "canonical":
        return UNCALIBRATED
    return (f"undefined: not calibrated for schedule {schedule!r} (world {world}); the default schedule's "
            f"r_max / r_reference do not apply: calibrate it with `clbench calibrate --env ID --env-arg "
            f"schedule={schedule} --write`")


#: error kinds that make a record no measurement of the agent (a failed model call, a dead endpoint)
INFRASTRUCTURE = "infrastructure"


def invalid_reason(tr: TaskRecords) -> str | None:
    """Why no metric of this task may be computed: instances lost to infrastructure errors (a
    failed model call scores nothing about the agent, and an errored stateful instance changes
    what the memory carries forward), so they are never averaged in as zeros."""
    recs = [*(x for v in tr.stateful.values() for x in v), *(x for v in tr.stateless.values() for x in v.values())]
    bad = [x for x in recs if x.get("error_kind") == INFRASTRUCTURE]
    if not bad:
        return None
    return (f"invalid: {len(bad)} of {len(recs)} instances failed on infrastructure errors (model calls), "
            f"e.g. {str(bad[0].get('error'))[:160]}; re-play them with `clbench rollout --resume RUN_DIR`")


def errors_summary(tr: TaskRecords) -> dict:
    """Errored instances per mode (infrastructure and agent errors), for run cards and reports; with
    `model_faults` when any instance was scored on a reply the model did not fully give (a refusal, a reply
    cut off or empty, malformed tool arguments, a failed memory update): {"instances", "total", "kinds"},
    kinds counted by the fault's text up to its details."""
    out: dict = {"infrastructure": 0, "agent": 0, "stateful": 0, "stateless": 0}
    faulted, kinds = 0, {}
    for mode, recs in (("stateful", [x for v in tr.stateful.values() for x in v]),
                       ("stateless", [x for v in tr.stateless.values() for x in v.values()])):
        for x in recs:
            if x.get("error"):
                out[mode] += 1
                out[INFRASTRUCTURE if x.get("error_kind") == INFRASTRUCTURE else "agent"] += 1
            faults = x.get("model_faults") or []
            faulted += bool(faults)
            for fault in faults:
                kind = fault_kind(fault)
                kinds[kind] = kinds.get(kind, 0) + 1
    if faulted:
        out["model_faults"] = {"instances": faulted, "total": sum(kinds.values()),
                               "kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1]))}
    return out


def _calibration(value) -> float:
    """r_max or r_reference as a float; NaN for an uncalibrated task (its normalized metrics are undefined)."""
    return math.nan if value is None else float(value)


def group_records(records: list[dict], params: dict[str, dict]) -> dict[tuple[str, str], TaskRecords]:
    """Split records by (task, system); `params[task]` gives r_max, r_reference (and r_max_se)."""
    groups: dict[tuple[str, str], TaskRecords] = {}
    for rec in records:
        task, system = rec["task"], rec["system"]
        if task not in params:
            raise KeyError(f"no r_max/r_reference known for task {task!r}")
        tr = groups.get((task, system))
        if tr is None:
            p = params[task]
            se = p.get("r_max_se")
            tr = groups[(task, system)] = TaskRecords(task, system, _calibration(p["r_max"]),
                                                      _calibration(p["r_reference"]), float(se) if se else None,
                                                      uncalibrated=p.get("baselines_undefined") or uncalibrated_reason(p),
                                                      deals=int(p.get("deals") or 1))
        if rec["mode"] == "stateless":
            tr.stateless.setdefault(int(rec.get("rollout") or 0), {})[rec["instance_id"]] = rec
        else:
            tr.stateful.setdefault(int(rec["rollout"]), []).append(rec)
    for tr in groups.values():
        for k in tr.stateful:
            tr.stateful[k].sort(key=lambda r: r["position"])
    return groups


def summarize(point: float | None, draws: np.ndarray | None, n: int, reason: str | None = None) -> dict:
    """An estimate: point value, bootstrap SE and 95% percentile CI over the defined replicates."""
    if point is None or not math.isfinite(point):
        out = {"mean": None, "se": None, "ci": [None, None], "n": n}
        return {**out, "undefined": reason} if reason else out
    if draws is None:  # a point estimate without replicates (e.g. upstream headline numbers)
        return {"mean": float(point), "se": None, "ci": [None, None], "n": n}
    d = np.asarray(draws, dtype=float)
    d = d[np.isfinite(d)]
    if d.size < 2:
        return {"mean": float(point), "se": 0.0, "ci": [float(point), float(point)], "n": n}
    lo, hi = np.percentile(d, [2.5, 97.5])
    return {"mean": float(point), "se": float(d.std(ddof=1)), "ci": [float(lo), float(hi)], "n": n}


def summarize_many(items: dict, n: int) -> dict:
    """summarize(point, draws, n, reason) of each name -> (point, draws, reason), the same numbers:
    the replicates of every defined estimate without a non-finite draw go through one percentile
    and one standard deviation along rows (each row reduced as on its own), the others one by one."""
    out, batch = {}, []
    for name, (point, draws, reason) in items.items():
        if point is not None and math.isfinite(point) and draws is not None and np.size(draws) >= 2 \
                and np.isfinite(draws).all():
            batch.append(name)
        else:
            out[name] = summarize(point, draws, n, reason)
    if batch:
        d = np.asarray([items[name][1] for name in batch], dtype=float)
        lo, hi = _percentile_rows(d, [2.5, 97.5])
        se = d.std(axis=1, ddof=1)
        for j, name in enumerate(batch):
            out[name] = {"mean": float(items[name][0]), "se": float(se[j]), "ci": [float(lo[j]), float(hi[j])], "n": n}
    return {name: out[name] for name in items}


def _percentile_rows(a: np.ndarray, q: list[float]) -> np.ndarray:
    """np.percentile(a, q, axis=1) of a 2-D array without NaN, the same numbers: the order
    statistics each percentile reads selected along rows in one np.partition (np.percentile's own
    selection was most of summarizing a task's replicates; sorting every row, twice the partition)
    and interpolated as numpy's linear method does."""
    n = a.shape[1]
    virtual = (n - 1) * (np.asarray(q, dtype=float) / 100)
    ranks = sorted({r for v in virtual for r in (int(np.floor(v)), min(int(np.floor(v)) + 1, n - 1))})
    ranked = np.partition(a, ranks, axis=1)
    out = np.empty((len(q), len(a)))
    for j, v in enumerate(virtual):
        before = int(np.floor(v))
        lo, hi = ranked[:, before], ranked[:, min(before + 1, n - 1)]
        t = v - before
        diff = hi - lo
        out[j] = hi - diff * (1 - t) if t >= 0.5 else lo + diff * t
    return out


def estimate(values, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """Mean of independent values with its percentile-bootstrap 95% CI and standard error stdev/sqrt(n)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"mean": None, "se": None, "ci": [None, None], "n": 0}
    mean = float(v.mean())
    if v.size == 1:
        return {"mean": mean, "se": 0.0, "ci": [mean, mean], "n": 1}
    rng = np.random.default_rng(seed)
    boots = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"mean": mean, "se": float(v.std(ddof=1) / math.sqrt(v.size)), "ci": [float(lo), float(hi)],
            "n": int(v.size)}


def _window_positions(recs: list[dict], window: float | None) -> set[int]:
    """Positions inside the adaptation window after each variant boundary of one rollout; with
    window=None the boundaries alone (the first position of each variant: the paper's set B)."""
    by_variant: dict[str, list[int]] = defaultdict(list)
    for r in recs:
        by_variant[r["variant"]].append(r["position"])
    inside: set[int] = set()
    for positions in by_variant.values():
        positions.sort()
        width = 1 if window is None else max(1, math.ceil(window * len(positions)))
        inside.update(positions[:width])
    return inside


def bootstrap_seed(*parts: str) -> int:
    """A fixed seed per (task, system): reports are reproducible and tasks' replicates independent."""
    return zlib.crc32("/".join(parts).encode())


@dataclass
class Matrices:
    """Rewards as rollouts x instances (stateful, with a presence mask, the adaptation window and
    the variant boundaries) and passes x instances (stateless); columns are instance ids in sorted order."""

    ids: list[str]
    col: dict[str, int]  # instance id -> column
    sf: np.ndarray
    present: np.ndarray
    window: np.ndarray
    sl: np.ndarray
    boundary: np.ndarray  # 1 where the (rollout, instance) cell is its variant's first in that rollout


def matrices(tr: TaskRecords, window: float) -> Matrices:
    if not tr.stateful:
        raise ValueError(f"{tr.task}/{tr.system}: no stateful records")
    if not tr.stateless:
        raise ValueError(f"{tr.task}/{tr.system}: no stateless records: the run played no stateless pass yet "
                         "(it stopped first: finish it with `clbench rollout --resume RUN_DIR`) or none at all "
                         "(--mode stateful: play one with --mode both)")
    ids = sorted({r["instance_id"] for recs in tr.stateful.values() for r in recs})
    col = {iid: j for j, iid in enumerate(ids)}
    for p, recs in sorted(tr.stateless.items()):
        missing = [i for i in ids if i not in recs]
        if missing:
            raise ValueError(f"{tr.task}/{tr.system}: stateless results missing for {len(missing)} instances "
                             f"(pass {p}), e.g. {missing[:3]}; finish or resume the run")
    rollouts, passes = sorted(tr.stateful), sorted(tr.stateless)
    sf, present = stateful_rewards(tr, rollouts, ids)
    win, first = [[0.0] * len(ids) for _ in rollouts], [[0.0] * len(ids) for _ in rollouts]
    for row, k in enumerate(rollouts):
        inside, starts = _window_positions(tr.stateful[k], window), _window_positions(tr.stateful[k], None)
        win_row, first_row = win[row], first[row]
        for x in tr.stateful[k]:
            j = col[x["instance_id"]]
            win_row[j], first_row[j] = float(x["position"] in inside), float(x["position"] in starts)
    win, first = np.array(win, dtype=float).reshape(sf.shape), np.array(first, dtype=float).reshape(sf.shape)
    sl = np.array([[float(tr.stateless[p][i]["reward"]) for i in ids] for p in passes])
    return Matrices(ids, col, sf, present, win, sl, first)


def stateful_rewards(tr: TaskRecords, rollouts: list[int], ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Stateful rewards as rollouts x instances (rows `rollouts`, columns `ids`, paired by instance
    id) and the mask of the cells played; instances outside `ids` are left out."""
    col = {iid: j for j, iid in enumerate(ids)}
    sf, present = [[0.0] * len(ids) for _ in rollouts], [[0.0] * len(ids) for _ in rollouts]
    for row, k in enumerate(rollouts):
        sf_row, present_row = sf[row], present[row]
        for x in tr.stateful[k]:
            j = col.get(x["instance_id"])
            if j is not None:
                sf_row[j], present_row[j] = float(x["reward"]), 1.0
    return np.array(sf, dtype=float).reshape(len(rollouts), len(ids)), \
        np.array(present, dtype=float).reshape(len(rollouts), len(ids))


#: cells (replicate weights x rollouts x positions) of the curves' bootstrap computed at a time
CURVE_CELLS = 1 << 16
#: replicates drawn, and computed, at a time: (replicates x instances) arrays then stay in cache
#: (whole, their allocation and traffic were most of the metrics' time)
BLOCK = 1000


#: draws counted at a time by _counts (a block of about 512 KiB; larger ones were slower to allocate)
COUNT_CELLS = 1 << 16


def _counts(rng: np.random.Generator, n_boot: int, size: int) -> np.ndarray:
    """Bootstrap multiplicities as the smallest integers that hold them, drawn COUNT_CELLS draws at
    a time: the same draws as one call (the generator's stream does not depend on how it is cut)."""
    out = np.empty((n_boot, size), dtype=np.min_scalar_type(size))
    step = max(1, COUNT_CELLS // max(1, size))
    for s in range(0, n_boot, step):
        cells = rng.integers(0, size, size=(min(step, n_boot - s), size))
        rows = len(cells)
        # one bincount over (replicate, unit) cells: the same counts as np.add.at, many times faster
        cells += (np.arange(rows) * size)[:, None]
        out[s:s + rows] = np.bincount(cells.ravel(), minlength=rows * size).reshape(rows, size)
    return out


def _weights(rng: np.random.Generator, n_boot: int, size: int) -> np.ndarray:
    """Bootstrap multiplicities: how often each of `size` units is drawn in each replicate."""
    return _counts(rng, n_boot, size).astype(float)


def headline_stats(m: Matrices, r_max, r_reference: float, ck, ci, cp, design: dict | None = None,
                   work: dict | None = None) -> dict:
    """Every headline statistic from weights on rollouts (ck), instances (ci) and passes (cp).

    Weights of ones give the point estimates; bootstrap multiplicities give replicates (one row
    per replicate). Instances carry one weight for both modes: the pairing by instance id.

    Each statistic is a sum over played (rollout, instance) cells of a set X (all cells, the
    adaptation window, the variant boundaries), weighted ck[k] * ci[i]: sum_k ck[k] sum_i ci[i] f(k, i),
    with f the stateful reward, 1 (the cell's mass) or the stateless reward of instance i averaged
    over the weighted passes (slbar[i] = sum_p cp[p] sl[p, i] / sum_p cp[p], the same for every k).
    The inner sums over instances are matrix products with the schedule as inner dimension:
    ci @ [SF | C] for the stateful sums and the masses, (ci * slbar) @ C for the stateless ones
    (C: the cells of each set and rollout, SF: their rewards); what is left is small (replicates x
    rollouts). A replicate costs a few passes over its instance weights, whatever the numbers of
    rollouts and passes; the numbers are those of summing cell by cell up to floating-point
    rounding (relative 1e-12 and below on every statistic). `design` (_design(m)): the products'
    right-hand sides, built once per task instead of once per block of replicates. `work`: arrays to
    write the products into, reused block after block (_replicates): a fresh (replicates x instances)
    array per product cost more than the product (the memory is handed back and faulted in again)."""
    ck, ci, cp = np.atleast_2d(ck), np.atleast_2d(ci), np.atleast_2d(cp)
    sums = _sums(m, ck, ci, cp, cp.sum(axis=1), design or _design(m), {} if work is None else work)
    return _ratios(sums, ck.sum(axis=1), ci.sum(axis=1), r_max, r_reference)


#: the sums headline_stats' statistics are ratios of (_sums: one row per replicate)
SUMS = ("sf_sum", "sf_in", "sf_b", "sl_sum", "sl_in", "sl_b", "mass", "mass_b", "w_sl_sum")


def _sums(m: Matrices, ck, ci, cp, cp_sum, design: dict, work: dict, out: dict | None = None) -> dict:
    """The sums of headline_stats (SUMS, each an array over the rows of the weights), written into
    `out` (arrays as long as the rows) when given. cp_sum: the rows' sums of cp (a number: every row's)."""
    B, K = len(ci), m.sf.shape[0]
    y = np.matmul(ci, design["G"], out=_buffer(work, "y", B, 6 * K))  # stateful sums, then masses, per (set, rollout)
    sf_mass = np.einsum("bk,bxk->bx", ck, y.reshape(B, 6, K))  # each (row, set) summed over rollouts on its own
    sf_x, mass_x = sf_mass[:, :3], sf_mass[:, 3:]
    w_sl = np.matmul(cp, m.sl, out=_buffer(work, "w", B, len(ci[0])))  # ci[i] * slbar[i], in place
    if np.ndim(cp_sum):
        w_sl /= cp_sum[:, None]
    elif cp_sum != 1:  # one number for every row (a third cheaper than a column of them); x / 1 is x
        w_sl /= cp_sum
    w_sl *= ci
    sl_x = np.einsum("bk,bxk->bx", ck, np.matmul(w_sl, design["C"], out=_buffer(work, "z", B, 3 * K)).reshape(B, 3, K))
    out = {} if out is None else out
    for name, value in zip(SUMS, (*sf_x.T, *sl_x.T, mass_x[:, 0], mass_x[:, 2], w_sl.sum(axis=1))):
        if name in out:
            out[name][:] = value
        else:
            out[name] = value
    return out


def _ratios(s: dict, rollout_n, ci_sum, r_max, r_reference: float) -> dict:
    """headline_stats from its sums (_sums), the rows' sums of ck (rollout_n) and of ci, and r_max
    (a number or one per row); element by element, so any number of rows at once gives the same numbers."""
    mass, sf_sum = s["mass"], s["sf_sum"]
    gain_sum = sf_sum - s["sl_sum"]
    gain_in, gain_b = s["sf_in"] - s["sl_in"], s["sf_b"] - s["sl_b"]
    mean_sl = s["w_sl_sum"] / ci_sum
    mean_sf = sf_sum / mass
    r_max = np.broadcast_to(np.asarray(r_max, dtype=float), mean_sf.shape)
    bad = no_headroom(mean_sl, r_max)
    denom = np.where(bad, np.nan, r_max - mean_sl)
    denom_r = r_max - r_reference
    denom_r = np.where(denom_r > 0, denom_r, np.nan)
    return {
        "mean_reward": mean_sf,
        "mean_reward_stateless": mean_sl,
        "cumulative_reward": sf_sum / rollout_n,
        "cumulative_gain": gain_sum / rollout_n,
        "normalized_gain": (mean_sf - mean_sl) / denom,
        "normalized_reward": (mean_sf - r_reference) / denom_r,
        # f_B (mean g_B) = sum_B g / N: the paper's terms over the normalized gain's denominator
        "stability": gain_b / mass / denom,
        "plasticity": (gain_sum - gain_b) / mass / denom,
        "early_gain": gain_in / mass / denom,
        "late_gain": (gain_sum - gain_in) / mass / denom,
        "boundary_share": s["mass_b"] / mass,
    }


def _buffer(work: dict, name: str, rows: int, cols: int) -> np.ndarray | None:
    """The first `rows` rows of work[name] (allocated for the largest block), or None (a new array)."""
    if "rows" not in work:
        return None
    buf = work.get(name)
    if buf is None or buf.shape[1] != cols:
        buf = work[name] = np.empty((work["rows"], cols))
    return buf[:rows]


def _design(m: Matrices) -> dict:
    """The right-hand sides of headline_stats' products, which depend on the task alone: C (instances
    x (set, rollout)), the played cells of each set, and G = [SF | C], SF their stateful rewards."""
    K, n = m.sf.shape
    cells = np.stack([m.present, m.present * m.window, m.present * m.boundary])  # (X=3, K, n)
    C = cells.reshape(3 * K, n).T
    return {"C": np.ascontiguousarray(C), "G": np.hstack([(m.sf * cells).reshape(3 * K, n).T, C])}


#: cells (replicates x columns of a product) of the headline replicates computed at a time: 4 MiB
#: blocks (a 5-rollout Poker run: 1000 replicates a block; the numpy calls per block, not the
#: products, were most of the time)
HEADLINE_CELLS = 1 << 19


def _replicates(m: Matrices, r_max, r_reference: float, ck, ci, cp) -> dict:
    """headline_stats of every bootstrap replicate from the counts ck, ci, cp (_counts), a block of
    replicates at a time (each replicate is computed on its own: the same numbers as all at once);
    blocks hold at most BLOCK replicates and about HEADLINE_CELLS cells, so memory stays flat in
    the numbers of rollouts and passes. The products and their sums go block by block; the ratios
    (element by element) once over every replicate. Rows of counts sum to the units drawn (K, n, P):
    those sums are known, not summed. Few rollouts and passes give few distinct (ck, cp) rows:
    then the replicates of each go together (_grouped_sums)."""
    (K, n), P = m.sf.shape, m.sl.shape[0]
    paired = cp is ck  # rollout k and pass k drawn together (deal_paired): one weight row for both
    # the multiplicities of K units drawn K times take comb(2K - 1, K) values: the rows are sorted only when
    # that few can be distinct (many rollouts or passes: every replicate's weights differ, as good as)
    possible = math.comb(2 * K - 1, K) * (1 if paired else math.comb(2 * P - 1, P))
    if GROUP_ROWS * possible <= len(ck) and possible * n * len(SUMS) <= HEADLINE_CELLS:
        order, starts = _sorted_runs(ck if paired else np.hstack([ck, cp]))
        first = order[starts]
        sums = _grouped_sums(m, ck[first], cp[first], order, starts, ci)
        return _ratios(sums, float(K), float(n), r_max, r_reference)
    design = _design(m)
    # the block size is part of the numbers: BLAS may round a row differently at another place in a block
    block = int(np.clip(HEADLINE_CELLS // (3 * n + 10 * K + P), 64, BLOCK))  # cells of a replicate row
    total = len(ck)
    sums = {name: np.empty(total) for name in SUMS}
    work = {"rows": block, "ci": np.empty((block, n))}
    for s in range(0, max(total, 1), block):
        rows = slice(s, s + block)
        cif = work["ci"][:len(ci[rows])]
        np.copyto(cif, ci[rows])  # = ci[rows].astype(float), into the same memory every block
        _sums(m, ck[rows].astype(float), cif, cp[rows].astype(float), float(P), design, work,
              out={name: a[rows] for name, a in sums.items()})
    return _ratios(sums, float(ck.shape[1]), float(ci.shape[1]), r_max, r_reference)


#: replicates per possible (rollout, pass) weight row, at least, for them to be computed together (the
#: rows' matrices, one per distinct row, then take at most HEADLINE_CELLS cells)
GROUP_ROWS = 16
#: replicates of one weight row computed at a time (a 5-rollout run's largest run is about 400)
RUN_ROWS = 256


def _grouped_sums(m: Matrices, wk: np.ndarray, wp: np.ndarray, order: np.ndarray, starts: np.ndarray,
                  ci: np.ndarray) -> dict:
    """The sums of _sums for every replicate, the replicates sorted by their rollout and pass weights
    (`order`; run j, from starts[j], has the weights wk[j] and wp[j]). With those fixed, each sum is
    the instance weights times one vector: sum_k ck[k] sum_i ci[i] f(k, i) = ci @ (sum_k ck[k] f(k, .)),
    so each run gets one (SUMS x instances) matrix and its replicates one product with it: 9 columns
    instead of _design's (sets x rollouts) per replicate. The same sums up to floating-point rounding."""
    n, P = ci.shape[1], m.sl.shape[0]
    cells = np.stack([m.present, m.present * m.window, m.present * m.boundary])  # (X=3, K, n)
    wk, wp = wk.astype(float), wp.astype(float)
    sf_x = np.matmul(wk, (m.sf * cells).transpose(1, 0, 2).reshape(len(m.sf), -1)).reshape(len(wk), 3, n)
    mass_x = np.matmul(wk, cells.transpose(1, 0, 2).reshape(len(m.sf), -1)).reshape(len(wk), 3, n)
    slbar = (wp @ m.sl / P)[:, None, :]  # the stateless mean over the weighted passes (rows sum to P)
    vectors = np.concatenate([sf_x, slbar * mass_x, mass_x[:, [0, 2]], slbar], axis=1)  # (runs, SUMS, n)
    # each run's instance weights as floats, RUN_ROWS replicates at a time, and their sums written
    # straight to their columns: no (replicates x instances) copy, which was faulted in anew every run card
    floats = np.empty((min(RUN_ROWS, len(ci)), n))
    out = np.empty((len(SUMS), len(ci)))
    for j, (a, b) in enumerate(zip(starts.tolist(), [*starts[1:].tolist(), len(ci)])):
        for s in range(a, b, RUN_ROWS):
            rows = order[s:min(b, s + RUN_ROWS)]
            np.copyto(floats[:len(rows)], ci[rows])
            out[:, rows] = vectors[j] @ floats[:len(rows)].T
    return dict(zip(SUMS, out))


def deal_paired(tr: TaskRecords) -> bool:
    """Whether rollout k and stateless pass k played the same deal (an env with `deals > 1`, every pass
    seeded like the rollout of its index): then the bootstrap draws them together, as one unit, so the
    deal's luck, shared by both sides of the gain, cancels inside each draw instead of widening the CI."""
    if tr.deals <= 1 or sorted(tr.stateful) != sorted(tr.stateless):
        return False
    return all(recs and tr.stateless[k] and recs[0].get("seed") is not None
               and {r.get("seed") for r in tr.stateless[k].values()} == {recs[0]["seed"]}
               for k, recs in tr.stateful.items())


def task_metrics(tr: TaskRecords, window: float = DEFAULT_WINDOW, n_boot: int = N_BOOT,
                 keep_draws: bool = False) -> dict:
    """Headline metrics with paired-bootstrap CIs, per-variant means and per-position curves."""
    m = matrices(tr, window)
    K, n = m.sf.shape
    P = m.sl.shape[0]
    point = {k: float(v[0]) for k, v in headline_stats(m, tr.r_max, tr.r_reference, np.ones(K), np.ones(n),
                                                      np.ones(P)).items()}
    rng = np.random.default_rng(bootstrap_seed(tr.task, tr.system))
    ck, ci, cp = _counts(rng, n_boot, K), _counts(rng, n_boot, n), _counts(rng, n_boot, P)
    paired = deal_paired(tr)
    if paired:  # rollout k and pass k are one unit (same deal): drawn together
        cp = ck
    r_max_draws = tr.r_max + tr.r_max_se * rng.standard_normal(n_boot) if tr.r_max_se else tr.r_max
    draws = _replicates(m, r_max_draws, tr.r_reference, ck, ci, cp)
    sl_mean = {iid: float(v) for iid, v in zip(m.ids, m.sl.mean(axis=0))}
    calibrated = math.isfinite(tr.r_max) and math.isfinite(tr.r_reference)
    invalid = invalid_reason(tr)
    if invalid:
        reason = reward_reason = invalid
    elif not calibrated:  # normalized gain and reward both need r_max
        reason = reward_reason = tr.uncalibrated or UNCALIBRATED
    else:
        reward_reason = None
        reason = undefined_gain_reason(point["mean_reward_stateless"], tr.r_max) \
            if no_headroom(point["mean_reward_stateless"], tr.r_max) else None

    out = {
        "task": tr.task,
        "system": tr.system,
        "r_max": tr.r_max if calibrated else None,
        "r_reference": tr.r_reference if calibrated else None,
        "rollouts": K,
        "stateless_passes": P,
        "instances": n,
        # no number over errored instances (they count as zeros in the matrices)
        "mean_reward_stateless": None if invalid else point["mean_reward_stateless"],
        "cumulative_reward_stateless": None if invalid else float(m.sl.mean(axis=0).sum()),
        "split_window": window,
        "bootstrap": {"replicates": n_boot, "resampled": ["instances (paired by instance_id)", *(
            ["rollouts with the stateless pass of their deal (paired by seed)"] if paired
            else ["rollouts", "stateless passes"])] + (["r_max"] if tr.r_max_se else [])},
    }
    if tr.r_max_se:
        out["r_max_estimate"] = {"mean": tr.r_max, "se": tr.r_max_se,
                                 "ci": [tr.r_max - 1.96 * tr.r_max_se, tr.r_max + 1.96 * tr.r_max_se], "n": n}
    out["boundary_share"] = point["boundary_share"]  # f_B of the paper's split
    names = ("mean_reward", "cumulative_reward", "cumulative_gain", "normalized_gain", "normalized_reward",
             *SPLIT, *WINDOW_SPLIT)
    undefined = {name: reason if name in ("normalized_gain", *SPLIT, *WINDOW_SPLIT)
                 else reward_reason if name == "normalized_reward" else invalid for name in names}
    out.update(summarize_many({name: (None if undefined[name] else point[name], draws[name], undefined[name])
                               for name in names}, n))
    if reason is None and math.isfinite(point["normalized_gain"]):
        # each split is exact in every replicate too; keep it exact in the reported means
        out["plasticity"]["mean"] = out["normalized_gain"]["mean"] - out["stability"]["mean"]
        out["late_gain"]["mean"] = out["normalized_gain"]["mean"] - out["early_gain"]["mean"]
    out["per_variant"] = _per_variant(tr, sl_mean, m)
    out["shocks"] = shock_effects(tr)
    out["curves"] = _curves(tr, m, rng=np.random.default_rng(bootstrap_seed(tr.task, tr.system, "curves")),
                            n_boot=min(n_boot, CURVE_BOOT), paired=paired)
    out["usage"] = _usage(tr)
    out["errors"] = errors_summary(tr)
    if keep_draws:
        out["draws"] = {name: draws[name] for name in AGGREGATED}
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


def _per_variant(tr: TaskRecords, sl: dict[str, float], m: Matrices) -> list[dict]:
    """Per variant: stateful and stateless means, gain, and the gain inside the adaptation window
    (how fast the agent adapts after the boundary; shows faster recovery on returning conditions)."""
    rows: dict[str, dict] = {}
    window = m.window.tolist()  # plain floats: a numpy scalar per record cost more than the rest of the loop
    for row_k, k in enumerate(sorted(tr.stateful)):  # m's rows are the rollouts in sorted order
        inside = window[row_k]
        for x in tr.stateful[k]:
            row = rows.get(x["variant"])
            if row is None:
                row = rows[x["variant"]] = {"variant": x["variant"], "start": x["position"], "sf": [], "ids": set(),
                                            "early": []}
            row["start"] = min(row["start"], x["position"])
            row["sf"].append(float(x["reward"]))
            row["ids"].add(x["instance_id"])
            if inside[m.col[x["instance_id"]]]:
                row["early"].append(float(x["reward"]) - sl[x["instance_id"]])
    result = []
    for row in sorted(rows.values(), key=lambda r: r["start"]):
        mean_sf = float(np.mean(row["sf"]))
        mean_sl = float(np.mean([sl[i] for i in sorted(row["ids"])]))  # a fixed order: the same digits every run
        result.append({"variant": row["variant"], "start": row["start"], "instances": len(row["ids"]),
                       "mean_reward_stateful": mean_sf, "mean_reward_stateless": mean_sl,
                       "mean_gain": mean_sf - mean_sl, "window_gain": float(np.mean(row["early"]))})
    return result


def _curves(tr: TaskRecords, m: Matrices, rng: np.random.Generator, n_boot: int, paired: bool = False) -> dict:
    """Per-position curves: mean over rollouts, min-max, and a 95% CI of the mean (bootstrap over
    rollouts and stateless passes, drawn together when `paired`: `deal_paired`); the stateless side is
    paired to each rollout by instance id."""
    n = max(len(v) for v in tr.stateful.values())
    K, P = len(tr.stateful), m.sl.shape[0]
    col = m.col
    # filled as lists, then converted: a numpy element set per record cost more than the loop
    sf, cols, has = [[math.nan] * n for _ in range(K)], [[0] * n for _ in range(K)], [[False] * n for _ in range(K)]
    variants = [None] * n
    for row, k in enumerate(sorted(tr.stateful)):
        sf_row, cols_row, has_row = sf[row], cols[row], has[row]
        for x in tr.stateful[k]:
            p = x["position"]
            if p < n:
                sf_row[p], cols_row[p], has_row[p] = float(x["reward"]), col[x["instance_id"]], True
                variants[p] = x["variant"]
    sf, cols, has = np.array(sf, dtype=float), np.array(cols, dtype=int), np.array(has, dtype=bool)

    # every rollout played every position (and every reward is a number): no gap to leave out of a
    # mean, nor a NaN to mask or to skip in a cumulative sum
    full = bool(has.all()) and bool(np.isfinite(sf).all()) and bool(np.isfinite(m.sl).all())

    def paired_sl(pass_weights: np.ndarray) -> np.ndarray:
        """Stateless reward (mean over weighted passes) of the instance each rollout played at each
        position; pass_weights (B, P) gives (B, K, n)."""
        slbar = pass_weights @ m.sl / pass_weights.sum(axis=1, keepdims=True)
        return slbar[:, cols] if full else np.where(has, slbar[:, cols], np.nan)

    slp = paired_sl(np.ones((1, P)))[0]
    gain = sf - slp
    cum_gain = np.cumsum(gain, axis=1) if full else np.where(has, np.nancumsum(gain, axis=1), np.nan)
    ck, cp = _weights(rng, n_boot, K), _weights(rng, n_boot, P)
    if paired:
        cp = ck.copy()
    # a replicate's curves depend only on its (rollout, pass) weights, and few rollouts give few
    # distinct weights (5 rollouts, 1 pass: 126 for 1000 replicates): each is computed once
    weights, replicate = _distinct_rows(np.hstack([ck, cp]))
    ck, cp = weights[:, :K], weights[:, K:]

    def rows_mean(w: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Weighted mean over rollouts per set of rollout weights w (B, K): a is (K, n) or (B, K, n)."""
        a = np.broadcast_to(a, (len(w), K, n))
        if full:  # the masked sums below, without their (weights x rollouts x positions) temporaries
            return np.einsum("bk,bkn->bn", w, a) / w.sum(axis=1)[:, None]
        ok = ~np.isnan(a)
        num, den = np.einsum("bk,bkn->bn", w, np.where(ok, a, 0.0)), np.einsum("bk,bkn->bn", w, ok)
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)

    # the distinct weights a chunk at a time: (weights x rollouts x positions) arrays stay small
    # whatever the number of rollouts (all at once, they were most of a run card's memory)
    names = ("stateful", "stateless", "gain", "cumulative_gain")
    means = np.empty((len(ck), len(names), n))  # per distinct weights, each curve's mean
    step = max(1, CURVE_CELLS // max(1, K * n))
    for s in range(0, len(ck), step):
        rows = slice(s, s + step)
        sl_b = paired_sl(cp[rows])
        g_b = sf[None] - sl_b
        cum_b = np.cumsum(g_b, axis=2) if full else np.where(has[None], np.nancumsum(g_b, axis=2), np.nan)
        for j, a in enumerate((sf, sl_b, g_b, cum_b)):
            means[rows, j] = rows_mean(ck[rows], a)
    # every curve's band in one pass over their columns (each column is read off on its own)
    lo, hi = _nanpercentile_columns(means.reshape(len(ck), -1), [2.5, 97.5], replicate).reshape(2, len(names), n)
    boundaries = [p for p in range(n) if variants[p] is not None and (p == 0 or variants[p] != variants[p - 1])]
    return {"positions": list(range(n)), "variants": variants, "boundaries": boundaries,
            **{name: {"mean": np.nanmean(a, axis=0).tolist(), "min": np.nanmin(a, axis=0).tolist(),
                      "max": np.nanmax(a, axis=0).tolist(), "lo": lo[j].tolist(), "hi": hi[j].tolist()}
               for j, (name, a) in enumerate(zip(names, (sf, slp, gain, cum_gain)))}}


def _distinct_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a matrix of bootstrap multiplicities and each row's index among them
    (np.unique(w, axis=0, return_inverse=True), whose row-sorting was a third of the curves' cost)."""
    order, starts = _sorted_runs(w)
    inverse = np.empty(len(w), dtype=np.intp)
    inverse[order] = np.repeat(np.arange(len(starts)), np.diff([*starts, len(w)]))
    return w[order[starts]], inverse


def _sorted_runs(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, starts): the rows of a matrix of bootstrap multiplicities sorted, equal rows together
    (w[order], a stable sort), and where in `order` each run of equal rows starts. Rows of small
    whole numbers are read as the digits of one integer key each (sorting rows was most of the cost)."""
    base = int(w.max(initial=0)) + 1
    if base ** w.shape[1] >= 2 ** 62:
        order = np.lexsort(w.T[::-1])
        ranked = w[order]
        new = (ranked[1:] != ranked[:-1]).any(axis=1)
    else:
        keys = w.astype(np.int64) @ base ** np.arange(w.shape[1], dtype=np.int64)
        order = np.argsort(keys, kind="stable")
        ranked = keys[order]
        new = ranked[1:] != ranked[:-1]
    return order, np.concatenate([[0], np.flatnonzero(new) + 1]) if len(w) else np.zeros(0, dtype=np.intp)


def _nanpercentile_columns(a: np.ndarray, q: list[float], rows: np.ndarray | None = None) -> np.ndarray:
    """np.nanpercentile(a[rows], q, axis=0), the same numbers (`rows`: each replicate's row of
    `a`, whose rows are the distinct replicates; None: every row once). Columns without NaN are
    read off the sorted distinct rows with their multiplicities (the expanded column is never
    sorted: that was most of the curves' cost) unless most replicates are distinct (rollouts and
    passes drawn apart): then the expanded columns are sorted (_percentile_rows), no dearer than
    sorting the distinct rows. The others go through nanpercentile."""
    out = np.empty((len(q), a.shape[1]))
    clean = ~np.isnan(a).any(axis=0)
    if rows is not None and 2 * len(a) > len(rows):
        out[:, clean] = _percentile_rows(a[:, clean].T[:, rows], q)
    else:
        counts = np.ones(len(a), dtype=np.intp) if rows is None else np.bincount(rows, minlength=len(a))
        out[:, clean] = _percentile_of_counted_rows(a[:, clean], counts, q)
    if not clean.all():
        out[:, ~clean] = np.nanpercentile((a if rows is None else a[rows])[:, ~clean], q, axis=0)
    return out


def _percentile_of_counted_rows(a: np.ndarray, counts: np.ndarray, q: list[float]) -> np.ndarray:
    """np.percentile (linear method) over axis 0 of `a` with row j repeated counts[j] times, bit
    for bit: the same order statistics, interpolated as numpy's own lerp does. Columns are sorted
    as contiguous rows of the transpose (a strided stable sort along axis 0 was most of the curves'
    time); tied values may come in any order, as the value read at a rank is then the same."""
    total = int(counts.sum())
    at = np.ascontiguousarray(a.T)  # (columns, distinct rows)
    order = np.argsort(at, axis=1)
    ranked = np.take_along_axis(at, order, axis=1)
    upto = np.cumsum(counts[order], axis=1)  # per column: how many values are <= each sorted row
    virtual = (total - 1) * (np.asarray(q, dtype=float) / 100)
    out = np.empty((len(q), a.shape[1]))
    columns = np.arange(a.shape[1])
    for j, v in enumerate(virtual):
        before = int(np.floor(v))
        after = min(before + 1, total - 1)
        lo = ranked[columns, (upto <= before).sum(axis=1)]
        hi = ranked[columns, (upto <= after).sum(axis=1)]
        t = v - before
        diff = hi - lo
        out[j] = hi - diff * (1 - t) if t >= 0.5 else lo + diff * t
    return out


def _usage(tr: TaskRecords) -> dict:
    """Tokens and cost summed over the task's records; the cost exactly rounded (math.fsum), so it
    does not depend on the order the records were written in (a pool's jobs interleave by timing)."""
    total = {"calls": 0, "prompt": 0, "completion": 0, "cached": 0, "reasoning": 0}
    #: calls answered from the response cache (not sent: a run compared with another endpoint may have
    #: replayed its replies) and calls whose tokens are estimates (the endpoint reported no usage)
    flags = {"cache_hits": 0, "estimated_calls": 0}
    costs, have_tokens = [], False
    stateless = [x for recs in tr.stateless.values() for x in recs.values()]
    for rec in [*stateless, *(x for v in tr.stateful.values() for x in v)]:
        tokens = rec.get("tokens")
        if tokens:
            have_tokens = True
            for k in total:
                total[k] += int((rec.get("calls") if k == "calls" else tokens.get(k, 0)) or 0)
            for k in flags:
                flags[k] += int(tokens.get(k) or 0)
        if rec.get("cost") is not None:
            costs.append(float(rec["cost"]))
    out = {"tokens": total if have_tokens else None, "cost": math.fsum(costs) if costs else None}
    out.update({k: v for k, v in flags.items() if v})
    return out


def aggregate(task_results: list[dict], draws: list[dict] | None = None, tasks: list[str] | None = None,
              names: tuple[str, ...] = AGGREGATED) -> dict:
    """Suite aggregate of one system: the unweighted mean over tasks of each task's estimate.

    `tasks` restricts it to a shared set (comparisons); `draws` (each task's bootstrap replicates,
    task_metrics(keep_draws=True)) give it a 95% CI and SE: replicate b of the aggregate is the
    mean of the tasks' replicates b. A metric undefined on any task is undefined in the aggregate."""
    chosen = [(t, d) for t, d in zip(task_results, draws or [None] * len(task_results))
              if tasks is None or t["task"] in tasks]
    out: dict = {"tasks": sorted(t["task"] for t, _ in chosen)}
    defined = {}  # name -> (point, replicates, None): summarized together below
    for name in names:
        if chosen and any(name not in t for t, _ in chosen):  # results from before a metric existed
            continue
        points = [t[name]["mean"] for t, _ in chosen]
        if not chosen or any(p is None for p in points):
            missing = [t["task"] for t, _ in chosen if t[name]["mean"] is None]
            out[name] = {"mean": None, "se": None, "ci": [None, None], "n": len(chosen),
                         "undefined": f"undefined on {', '.join(missing)}" if missing else "no tasks"}
            continue
        out[name] = None  # keeps the order of names
        if len(chosen) == 1 and chosen[0][1] is not None and {"se", "ci"} <= chosen[0][0][name].keys():
            # one task: its replicates are the aggregate's (a mean of one), so are its SE and CI
            one = chosen[0][0][name]
            out[name] = {"mean": float(points[0]), "se": one["se"], "ci": list(one["ci"]), "n": 1}
            continue
        reps = np.mean([d[name] for _, d in chosen], axis=0) if all(d is not None for _, d in chosen) else None
        defined[name] = (float(np.mean(points)), reps, None)
    out.update(summarize_many(defined, len(chosen)))
    return out


def suite_aggregates(task_results: list[dict], draws: dict[tuple[str, str], dict] | None = None) -> dict[str, dict]:
    """Per system, the aggregate over the tasks that every system in `task_results` has (the one
    definition used by run cards, reports and comparisons); `left_out` names the other tasks."""
    by_system: dict[str, dict[str, dict]] = defaultdict(dict)
    for t in task_results:
        by_system[t["system"]][t["task"]] = t
    shared = sorted(set.intersection(*(set(v) for v in by_system.values()))) if by_system else []
    out = {}
    for system, mine in sorted(by_system.items()):
        chosen = [mine[task] for task in shared]
        d = [draws[(task, system)] for task in shared] if draws is not None else None
        out[system] = {**aggregate(chosen, d), "left_out": sorted(set(mine) - set(shared))}
    return out


def compute(records: list[dict], meta: dict, window: float | None = None, n_boot: int | None = None) -> dict:
    """Metrics of every (task, system) in a run's records plus the per-system suite aggregates.

    Pure: no file is read. `meta` is the run's metadata (`meta["tasks"][task]` gives r_max,
    r_reference and r_max_se); the result holds `tasks` (task_metrics per (task, system), sorted),
    `aggregate` (suite_aggregates), `metadata` (meta itself) and `draws` (the bootstrap
    replicates behind suite and comparison intervals: kept in memory, never in a run card)."""
    kwargs = {k: v for k, v in (("window", window), ("n_boot", n_boot)) if v is not None}
    groups = group_records(records, meta["tasks"])
    with _blas().limit(limits=1, user_api="blas"):
        per_task = [task_metrics(tr, keep_draws=True, **kwargs) for _, tr in sorted(groups.items())]
    draws = {(t["task"], t["system"]): t.pop("draws") for t in per_task}
    return {"tasks": per_task, "aggregate": suite_aggregates(per_task, draws), "metadata": meta, "draws": draws}


@cache
def _blas():
    """The bootstrap's products are small (a block of replicates x a few hundred columns): BLAS
    threads only contend for the cores, and on a busy machine they made the metrics 7x slower
    (0.7 s instead of 0.1 s on a 5-rollout Poker run). One thread gives the same numbers bit for
    bit (each output cell is summed the same way)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()
