"""`clbench worlds`: difficulty across worlds, and a system's canonical vs fresh-world results.

`clbench worlds --env ID --seeds 1-20` measures, on the canonical world and on each fresh world
(`world_seed=N`): r_max (oracle mean) and r_reference (stateless reference mean) of that world
(from the cache; else computed by the env's `computed_baselines()` hook where it has one, else
played, and cached: clbench.calibration.ensure_baselines), the reference's normalized gain and each declared drift's
cost (clbench drift-check), and the red team's best non-learning policy (clbench redteam); then
the mean and range over the fresh worlds, and whether each world stays in the stated band of the
canonical world's difficulty (BAND, docs/contract.md "Worlds"), judged on each world's 95% CI: in,
out, or "cannot tell" when the CI reaches across an edge of the band (`band_judgment`; more
rollouts narrow it). Exit 1 unless every world is shown to be in the band.

`clbench worlds --runs RUN_A RUN_B ...` puts a system's results from run directories of different
worlds side by side with 95% CIs (clbench.reporting.worlds): the canonical run and fresh-world runs.
"""
from __future__ import annotations

import json

import numpy as np

#: how far a fresh world's difficulty may be from the canonical world's. gain: the reference's
#: normalized gain within max(abs, rel x |canonical|); headroom: (r_max - r_reference) as a ratio of
#: the canonical world's; drift: the mean drift cost as a share of the headroom within
#: max(abs, rel x |canonical|); red team: no non-learning policy may reach the world's r_reference
BAND = {"gain_abs": 0.15, "gain_rel": 0.5, "headroom_ratio": (0.5, 2.0), "drift_abs": 0.05, "drift_rel": 0.5}


def parse_seeds(text: str) -> list[int]:
    """"1-20", "3", "1,4,9" or "1-3,7" -> a sorted list of world seeds."""
    seeds: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        seeds.update(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    if not seeds or min(seeds) < 0:
        raise ValueError(f"world seeds must be integers >= 0, got {text!r}")
    return sorted(seeds)


def baselines_source(env_id: str, env_kwargs: dict) -> str:
    """Where the world's r_max and r_reference come from: "spec" (default.yaml), "cached", "computed" (the
    env's `computed_baselines()` hook, stored in the cache by clbench.calibration, so drift-check does not
    play them) or "played" (calibrated by drift-check)."""
    from clbench.calibration import use_computed_baselines
    from clbench.runner import make_env

    env = make_env(env_id, **env_kwargs)
    try:
        base = env.unwrapped
        if base.baselines_from_spec:
            return "spec"
        if base.calibrated:
            return "cached"
        return "computed" if use_computed_baselines(base) else "played"
    finally:
        env.close()


def headroom_se(env_id: str, env_kwargs: dict) -> float | None:
    """The standard error of a calibrated fresh world's headroom r_max - r_reference, where the task's oracle
    is noisy (clbench.calibration keeps it beside r_max); None otherwise."""
    from clbench.calibration import cached_baseline
    from clbench.runner import make_env

    env = make_env(env_id, **env_kwargs)
    try:
        base = env.unwrapped
        return None if base.baselines_from_spec or "r_max_se" not in base.spec_data else cached_baseline(
            base, "headroom_se")
    finally:
        env.close()


def world_row(env_id: str, world_seed: int | None, env_kwargs: dict | None = None, rollouts: int | None = None,
              workers: int = 1, redteam: bool = True) -> dict:
    """One world's difficulty: baselines, the reference's gain, drift costs and the red team's best."""
    from clbench import redteam as red
    from clbench.commands.drift_check import run_drift_check

    kwargs = dict(env_kwargs or {})
    if world_seed is not None:
        kwargs["world_seed"] = world_seed
    source = baselines_source(env_id, kwargs)
    rep = run_drift_check(env_id, kwargs, rollouts=rollouts, workers=workers)  # calibrates the world first
    r_max, r_ref = rep["r_max"], rep["r_reference"]
    costs = [d["cost"] for d in rep["drifts"] if d["cost"]["mean"] is not None]
    cost = float(np.mean([c["mean"] for c in costs])) if costs else None
    # one drift: its own paired bootstrap CI; several: the mean of their bounds (a conservative band,
    # since their replicates are not paired with each other)
    cost_ci = [float(np.mean([c["ci"][k] for c in costs])) for k in (0, 1)] if costs else None
    row = {"world_seed": world_seed, "world": rep.get("world", "canonical"), "r_max": r_max, "r_reference": r_ref,
           "baselines": source, "gain": rep["normalized_gain"]["mean"], "gain_ci": rep["normalized_gain"]["ci"], "drift_cost": cost,
           "drift_cost_ci": cost_ci,
           "drift_share": None if cost is None or r_max <= r_ref else cost / (r_max - r_ref),
           "headroom_se": headroom_se(env_id, kwargs),
           "best_policy": None, "best_mean": None, "redteam_failures": []}
    if redteam:
        report = red.run(env_id, kwargs, workers=workers)
        played = [r for r in report["rows"] if r["mean"] is not None]
        if played:
            best = max(played, key=lambda r: r["mean"])
            row.update(best_policy=best["policy"], best_mean=best["mean"])
        row["redteam_failures"] = [r["policy"] for r in report["failures"]]
    return row


#: a world's measure against the band: its 95% CI inside the band, outside it, or reaching across an
#: edge (the measurement cannot tell: more rollouts narrow the CI)
IN, OUT, UNDECIDED = "in", "out", "cannot tell"


def _judge(point: float, ci, lo: float, hi: float) -> str:
    """IN, OUT or UNDECIDED for a measure whose band is [lo, hi]; without a CI the point is judged."""
    a, b = (point, point) if not ci or None in ci else (min(ci), max(ci))
    if lo <= a and b <= hi:
        return IN
    if b < lo or a > hi:
        return OUT
    return UNDECIDED


def _ci_text(ci) -> str:
    return f" [95% CI {ci[0]:.3f}, {ci[1]:.3f}]" if ci and None not in ci else ""


def band_judgment(row: dict, canonical: dict, band: dict = BAND) -> list[tuple[str, str, str]]:
    """(measure, verdict, why) for each measure of `row` (a fresh world) against the band of `canonical`'s
    difficulty: IN when the world's 95% CI lies inside the band, OUT when it lies outside, UNDECIDED when
    it reaches across an edge, so a noisy measurement is never read as a pass or a failure. A measure
    without a CI (the headroom where the oracle's score is exact: `headroom_se` None) is judged by its
    point. The band is centred on the canonical world's point estimates."""
    out = []
    if row["gain"] is not None and canonical["gain"] is not None:
        tol = max(band["gain_abs"], band["gain_rel"] * abs(canonical["gain"]))
        lo, hi = canonical["gain"] - tol, canonical["gain"] + tol
        verdict = _judge(row["gain"], row.get("gain_ci"), lo, hi)
        out.append(("gain", verdict, f"reference's normalized gain {row['gain']:.3f}{_ci_text(row.get('gain_ci'))} "
                                     f"vs canonical {canonical['gain']:.3f} (band {lo:.3f} .. {hi:.3f})"))
    elif (row["gain"] is None) != (canonical["gain"] is None):
        out.append(("gain", OUT, "the reference's normalized gain is undefined in one world only"))
    h, hc = row["r_max"] - row["r_reference"], canonical["r_max"] - canonical["r_reference"]
    lo, hi = band["headroom_ratio"]
    if hc > 0:
        se = row.get("headroom_se")
        ratio_ci = [(h - 1.96 * se) / hc, (h + 1.96 * se) / hc] if se else None
        out.append(("headroom", _judge(h / hc, ratio_ci, lo, hi),
                    f"headroom r_max - r_reference {h:.4g} is {h / hc:.2f}x{_ci_text(ratio_ci)} the canonical "
                    f"{hc:.4g} (band {lo}-{hi}x)"))
    if row["drift_share"] is not None and canonical["drift_share"] is not None:
        tol = max(band["drift_abs"], band["drift_rel"] * abs(canonical["drift_share"]))
        lo, hi = canonical["drift_share"] - tol, canonical["drift_share"] + tol
        ci = row.get("drift_cost_ci")
        share_ci = [c / h for c in ci] if ci and None not in ci and h > 0 else None
        out.append(("drift", _judge(row["drift_share"], share_ci, lo, hi),
                    f"drift cost {row['drift_share']:.3f}{_ci_text(share_ci)} of the headroom vs canonical "
                    f"{canonical['drift_share']:.3f} (band {lo:.3f} .. {hi:.3f})"))
    if row["redteam_failures"]:
        out.append(("red team", OUT, f"red team reaches r_reference: {', '.join(row['redteam_failures'])}"))
    return out


def band_violations(row: dict, canonical: dict, band: dict = BAND) -> list[str]:
    """Why `row` (a fresh world) is not shown to be in the band of `canonical`'s difficulty ([] when every
    measure is): each measure out of it or that cannot tell (`band_judgment`), the verdict first."""
    return [f"{verdict}: {why}" for _, verdict, why in band_judgment(row, canonical, band) if verdict != IN]


def _f(x, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}g}"


def _with_ci(x, ci, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    return f"{x:.{digits}g}" + (f" [{ci[0]:.{digits}g}, {ci[1]:.{digits}g}]" if ci and None not in ci else "")


def pooled(rows: list[dict], key: str, n_boot: int = 2000, seed: int = 0) -> dict | None:
    """The mean of `key` over fresh worlds with a 95% percentile bootstrap CI over worlds (the
    worlds are the sample: how a score would vary on another draw of worlds)."""
    vals = np.array([r[key] for r in rows if r.get(key) is not None], dtype=float)
    if not len(vals):
        return None
    rng = np.random.default_rng(seed)
    means = vals[rng.integers(0, len(vals), size=(n_boot, len(vals)))].mean(axis=1)
    return {"mean": float(vals.mean()), "ci": [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))],
            "min": float(vals.min()), "max": float(vals.max()), "worlds": int(len(vals))}


def format_worlds(env_id: str, canonical: dict, rows: list[dict]) -> str:
    cols = ("r_max", "r_reference", "gain", "drift_cost", "best_mean")
    lines = [f"{env_id}: canonical world and {len(rows)} fresh worlds",
             "| world | r_max | r_reference | reference's normalized gain [95% CI] | drift cost [95% CI] | "
             "best red-team policy | its mean | in band |", "|---|---|---|---|---|---|---|---|"]
    for row in [canonical, *rows]:
        bad = band_violations(row, canonical) if row is not canonical else []
        lines.append(f"| {row['world']} | {_f(row['r_max'])} | {_f(row['r_reference'])} | "
                     f"{_with_ci(row['gain'], row.get('gain_ci'))} | "
                     f"{_with_ci(row['drift_cost'], row.get('drift_cost_ci'))} | "
                     f"{row['best_policy'] or 'n/a'} | {_f(row['best_mean'])} | "
                     f"{'-' if row is canonical else ('yes' if not bad else '; '.join(bad))} |")
    if rows:
        stats = []
        for c in cols:
            vals = [r[c] for r in rows if r[c] is not None]
            stats.append(f"{np.mean(vals):.4g} [{min(vals):.4g}, {max(vals):.4g}]" if vals else "n/a")
        lines.append(f"| fresh worlds: mean [range] | {stats[0]} | {stats[1]} | {stats[2]} | {stats[3]} | | {stats[4]} | |")
        over = [pooled(rows, c) for c in cols]
        lines.append("| fresh worlds: mean [95% CI over worlds] | "
                     + " | ".join(_with_ci(o["mean"], o["ci"], 4) if o else "n/a" for o in over[:4])
                     + f" | | {_with_ci(over[4]['mean'], over[4]['ci'], 4) if over[4] else 'n/a'} | |")
    return "\n".join(lines)


def cmd_worlds(args) -> int:
    from clbench.commands.rollout import env_kwargs_from_args

    if args.runs:
        from clbench.reporting.tables import to_markdown
        from clbench.reporting.worlds import world_comparison

        print(to_markdown(world_comparison(args.runs, n_boot=args.n_boot)))
        return 0
    if not args.env:
        raise ValueError("--env is required (or --runs RUN_DIR ...)")
    kwargs = env_kwargs_from_args(args)
    kwargs.pop("world_seed", None)
    common = {"env_kwargs": kwargs, "rollouts": args.rollouts, "workers": args.workers, "redteam": not args.no_redteam}
    canonical = world_row(args.env, None, **common)
    rows = [world_row(args.env, s, **common) for s in parse_seeds(args.seeds)]
    if args.json:
        over = {c: pooled(rows, c) for c in ("r_max", "r_reference", "gain", "drift_cost", "best_mean")}
        print(json.dumps({"env_id": args.env, "band": BAND, "canonical": canonical, "worlds": rows,
                          "over_worlds": over}, indent=1, default=float))
    else:
        print(format_worlds(args.env, canonical, rows))
    return 1 if any(band_violations(r, canonical) for r in rows) or canonical["redteam_failures"] else 0


def register(sub) -> None:
    from clbench.runner import default_workers

    p = sub.add_parser("worlds", help="difficulty on fresh worlds (--env ID --seeds 1-20) next to the canonical "
                                      "world's, or a system's canonical vs fresh-world runs (--runs DIR ...)")
    p.add_argument("--env", help="env id, e.g. clbench/SpectrumMonitor-v6")
    p.add_argument("--seeds", default="1-20", help="world seeds, e.g. 1-20 or 1,4,9 (default 1-20)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env keyword argument")
    p.add_argument("--rollouts", type=int, default=None,
                   help="stateful rollouts of the reference per world (default 3, or one per deal: Poker 5)")
    p.add_argument("--workers", type=int, default=default_workers(), help="parallel worker processes")
    p.add_argument("--no-redteam", action="store_true", help="skip the red team (faster)")
    p.add_argument("--runs", nargs="+", metavar="RUN_DIR", help="compare these run directories' worlds instead")
    p.add_argument("--n-boot", type=int, default=None, help="bootstrap replicates for --runs")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_worlds)
