"""`clbench drift-check --env ID`: what each concept drift of a task costs its reference agent.

An env declares its drifts in its task YAML, per schedule, by the variant that starts after the
drift, optionally the last variant where its cost shows (`through`, when the old knowledge is
first applied later, e.g. a re-coding documented in one study and relied on in the next) and
what changes:

    drifts:
      default:
        - {variant: 3-Mara, change: "Mara has adapted: ..."}

The drift position is that variant's first position (the same in every rollout's order). The
check plays the task's reference agent stateful and unfrozen (plus the stateless pass, for its
normalized gain), and once more frozen just before every drift (`freeze_at=<position>`: it stops
updating what it learned), on the same rollout seeds. Per drift it reports

- drift cost: unfrozen minus frozen reward over the post-drift variant(s), paired by rollout and
  instance id; mean and percentile-bootstrap 95% CI resampling rollouts and instances (the
  weights of clbench.metrics);
- recovery: instances after the drift until the unfrozen reference's reward (mean over
  rollouts, over `window` consecutive instances) is back at its level over the `window`
  instances before the drift; None when it does not get back within the span measured;
- the goal of issue 15: cost >= 0.1 x (r_max - r_reference) with the CI above 0.
"""
from __future__ import annotations

import json
import tempfile

import numpy as np

from clbench.metrics import _weights, bootstrap_seed, group_records, stateful_rewards, summarize, task_metrics

REFERENCE = "reference"
STATELESS = "reference-stateless"
GOAL_SHARE = 0.1
N_BOOT = 2000


def declared_drifts(env) -> list[dict]:
    """The drifts the env's task YAML declares for its schedule: [{"variant", "change", "through"?}, ...]."""
    base = env.unwrapped
    drifts = (base.spec_data.get("drifts") or {}).get(base.schedule.name, [])
    starts = base.schedule.variant_starts()
    for d in drifts:
        for key in ("variant", "through"):
            if key in d and d[key] not in starts:
                raise ValueError(f"{base.env_id}: declared drift names unknown variant {d[key]!r}")
    return [dict(d) for d in drifts]


def drift_span(schedule, drift: dict) -> tuple[int, int]:
    """(first position, number of instances) over which a drift's cost is measured."""
    starts = schedule.variant_starts()
    sizes = {v.name: len(v.instances) for v in schedule.variants}
    first, last = starts[drift["variant"]], drift.get("through", drift["variant"])
    end = starts[last] + sizes[last]
    if end <= first:
        raise ValueError(f"drift at {drift['variant']!r}: `through` {last!r} comes before it")
    return first, end - first


def _frozen_system(position: int) -> str:
    return f"{REFERENCE}@freeze{position}"


def _part_tallies(tr, rollouts: list[int], ids: list[str], parts) -> dict[str, np.ndarray]:
    """Per score part: (points, out of) as 2 x rollouts x instances over the cells `ids`."""
    col = {iid: j for j, iid in enumerate(ids)}
    out: dict[str, np.ndarray] = {}
    for row, k in enumerate(rollouts):
        for x in tr.stateful[k]:
            j = col.get(x["instance_id"])
            if j is None:
                continue
            for name, tally in parts(x.get("details")).items():
                out.setdefault(name, np.zeros((2, len(rollouts), len(ids))))[:, row, j] = tally
    return out


def _part_costs(unfrozen, frozen, rollouts: list[int], ids: list[str], parts, ck, ci) -> dict:
    """A drift's cost per named part of the score (env.score_parts): the share of points after the
    drift, unfrozen minus frozen, with the drift's own bootstrap weights (same replicates)."""
    def share(pts, of):  # per replicate; a replicate that drew no such points is undefined (nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.einsum("bk,ki,bi->b", ck, pts, ci) / np.einsum("bk,ki,bi->b", ck, of, ci)

    tallies_u, tallies_f = (_part_tallies(tr, rollouts, ids, parts) for tr in (unfrozen, frozen))
    rows = {}
    for name in tallies_u:
        (pts_u, of_u), (pts_f, of_f) = tallies_u[name], tallies_f[name]
        if of_u.sum() == 0 or of_f.sum() == 0:
            rows[name] = {"cost": summarize(None, None, 0, "no such points after the drift"), "out_of": 0}
            continue
        after_u, after_f = pts_u.sum() / of_u.sum(), pts_f.sum() / of_f.sum()
        rows[name] = {"cost": summarize(float(after_u - after_f), share(pts_u, of_u) - share(pts_f, of_f),
                                        int(of_u.sum())),
                      "after_unfrozen": float(after_u), "after_frozen": float(after_f), "out_of": int(of_u.sum())}
    return rows


def drift_report(records: list[dict], task: str, r_max: float, r_reference: float, schedule,
                 drifts: list[dict], window: int = 5, parts=None, deals: int = 1) -> dict:
    """Drift costs, recoveries and the unfrozen reference's normalized gain from run records;
    with `parts` (an env's score_parts), each drift's cost per part of the score as well; `deals`:
    the env's (rollout k and stateless pass k of one deal are resampled together, clbench.metrics)."""
    groups = group_records(records, {task: {"r_max": r_max, "r_reference": r_reference, "deals": deals}})
    unfrozen = groups[(task, REFERENCE)]
    unfrozen_metrics = task_metrics(unfrozen, n_boot=N_BOOT)
    gain = unfrozen_metrics["normalized_gain"]
    mean_curve = np.asarray(unfrozen_metrics["curves"]["stateful"]["mean"])  # per position, mean over rollouts
    goal = GOAL_SHARE * (r_max - r_reference)
    rows = []
    for d in drifts:
        p, size = drift_span(schedule, d)
        frozen = groups[(task, _frozen_system(p))]
        rollouts = sorted(frozen.stateful)
        ids = sorted(x["instance_id"] for x in frozen.stateful[rollouts[0]] if p <= x["position"] < p + size)
        (after_u, played_u), (after_f, played_f) = (stateful_rewards(tr, rollouts, ids) for tr in (unfrozen, frozen))
        if not (played_u.all() and played_f.all()):
            raise ValueError(f"drift at {d['variant']!r}: the frozen and unfrozen rollouts did not play the same "
                             "instances; finish or resume the run")
        diff = after_u - after_f  # rollouts x instances, paired by rollout and instance id
        rng = np.random.default_rng(bootstrap_seed(task, "drift", d["variant"]))
        ck, ci = _weights(rng, N_BOOT, len(rollouts)), _weights(rng, N_BOOT, len(ids))
        draws = np.einsum("bk,ki,bi->b", ck, diff, ci) / (ck.sum(axis=1) * ci.sum(axis=1))
        cost = summarize(float(diff.mean()), draws, int(diff.size))
        by_part = _part_costs(unfrozen, frozen, rollouts, ids, parts, ck, ci) if parts else {}
        w = min(window, p, size)
        pre = float(np.mean(mean_curve[p - w:p])) if w else None
        recovery = None
        if pre is not None:
            for q in range(size - w + 1):
                if np.mean(mean_curve[p + q:p + q + w]) >= pre:
                    recovery = q
                    break
        rows.append({"variant": d["variant"], "through": d.get("through", d["variant"]), "position": p,
                     "instances": size, "change": d.get("change", ""),
                     "cost": cost, "reward_after_unfrozen": float(np.mean(after_u)),
                     "reward_after_frozen": float(np.mean(after_f)), "reward_before": pre,
                     "recovery_instances": recovery, "parts": by_part,
                     "goal_met": bool(cost["mean"] is not None and cost["mean"] >= goal and cost["ci"][0] > 0)})
    return {"task": task, "r_max": r_max, "r_reference": r_reference, "goal_cost": goal,
            "normalized_gain": gain, "drifts": rows}


def default_rollouts(env_id: str) -> int:
    """3, or every deal the env's benchmark plays (an env that deals each rollout seed its own instances)."""
    from clbench.registry import env_class

    return max(3, env_class(env_id).deals)


def run_drift_check(env_id: str, env_kwargs: dict | None = None, rollouts: int | None = None, seed: int = 0,
                    workers: int = 1, at: list[str] | None = None, out: str | None = None,
                    window: int = 5, quiet: bool = True) -> dict:
    """Play the reference unfrozen (both modes) and frozen before each drift; return the report.

    `at` names variants to treat as drifts instead of the declared ones (e.g. to measure an env
    version that declares none); `rollouts` defaults to `default_rollouts`."""
    from clbench.results import load_records
    from clbench.rollout import run_many
    from clbench.runner import RunConfig, make_env

    env_kwargs = dict(env_kwargs or {})
    rollouts = rollouts or default_rollouts(env_id)
    env = make_env(env_id, **env_kwargs)
    try:
        base = env.unwrapped
        drifts = [{"variant": v, "change": "(requested)"} for v in at] if at else declared_drifts(env)
        starts = base.schedule.variant_starts()
        for d in drifts:
            if d["variant"] not in starts:
                raise ValueError(f"{env_id}: unknown variant {d['variant']!r}; known: {list(starts)}")
            if starts[d["variant"]] == 0:
                raise ValueError(f"{env_id}: {d['variant']!r} is the first variant; a drift needs one before it")
        if not drifts:
            raise ValueError(f"{env_id} declares no drift for schedule {base.schedule.name!r} (name one with --at)")
        from clbench.calibration import ensure_baselines

        undefined = ensure_baselines(env, env_kwargs)  # another world or schedule: calibrated (cached) first
        if undefined:
            raise ValueError(undefined)
        task, r_max, r_ref, schedule = base.task, base.r_max, base.r_reference, base.schedule
        parts = base.score_parts  # {} for envs whose score has no parts
        deals = base.deals
        world = base.world_key
    finally:
        env.close()
    with tempfile.TemporaryDirectory(prefix="clbench-drift-") as tmp:
        run_dir = out or tmp
        common = {"env_id": env_id, "agent": REFERENCE, "out": run_dir, "rollouts": rollouts, "seed": seed,
                  "workers": workers, "env_kwargs": env_kwargs}
        # one mode per system, so no run card is due and every job shares the workers
        cfgs = [RunConfig(system=REFERENCE, mode="stateful", **common),
                RunConfig(system=STATELESS, mode="stateless", **common)]
        for p in sorted({starts[d["variant"]] for d in drifts}):
            cfgs.append(RunConfig(system=_frozen_system(p), mode="stateful", agent_kwargs={"freeze_at": p}, **common))
        run_many(cfgs, quiet=quiet)
        records = [dict(r, system=REFERENCE) if r["system"] == STATELESS else r
                   for r in load_records(run_dir) if r["task"] == task]
    report = drift_report(records, task, r_max, r_ref, schedule, drifts, window=window, parts=parts, deals=deals)
    report.update({"env_id": env_id, "rollouts": rollouts, "seed": seed, "world": world})
    return report


def _ci(e: dict, digits: int = 3) -> str:
    if e["mean"] is None:
        return "n/a"
    lo, hi = e["ci"]
    return f"{e['mean']:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def format_report(rep: dict) -> str:
    lines = [f"{rep['env_id']} ({rep.get('world', 'canonical')}): reference, {rep['rollouts']} rollouts; r_max {rep['r_max']:.4g}, "
             f"r_reference {rep['r_reference']:.4g}; goal: drift cost >= {rep['goal_cost']:.4g} with CI above 0",
             f"normalized gain (unfrozen): {_ci(rep['normalized_gain'])}",
             "| drift at | position | reward before | after, unfrozen | after, frozen | drift cost [95% CI] "
             "| instances to recover | goal |",
             "|---|---|---|---|---|---|---|---|"]
    for d in rep["drifts"]:
        before = "n/a" if d["reward_before"] is None else f"{d['reward_before']:.3f}"
        rec = "not within the span" if d["recovery_instances"] is None else str(d["recovery_instances"])
        span = d["variant"] if d["through"] == d["variant"] else f"{d['variant']} .. {d['through']}"
        lines.append(f"| {span} | {d['position']} | {before} | {d['reward_after_unfrozen']:.3f} | "
                     f"{d['reward_after_frozen']:.3f} | {_ci(d['cost'])} | {rec} | "
                     f"{'met' if d['goal_met'] else 'not met'} |")
    for d in rep["drifts"]:
        if d.get("parts"):
            lines += [f"drift at {d['variant']}, by part of the score (share of points after it):",
                      "| part | asked (all rollouts) | after, unfrozen | after, frozen | drift cost [95% CI] |", "|---|---|---|---|---|"]
            lines += [f"| {name} | {p['out_of']} | "
                      + (f"{p['after_unfrozen']:.3f} | {p['after_frozen']:.3f} | " if p["out_of"] else "n/a | n/a | ")
                      + f"{_ci(p['cost'])} |" for name, p in d["parts"].items()]
    for d in rep["drifts"]:
        if d["change"]:
            lines.append(f"{d['variant']}: {d['change']}")
    return "\n".join(lines)


def cmd_drift_check(args) -> int:
    from clbench.commands.rollout import env_kwargs_from_args

    rep = run_drift_check(args.env, env_kwargs_from_args(args), rollouts=args.rollouts, seed=args.seed,
                          workers=args.workers, at=args.at or None, out=args.out or None, window=args.window,
                          quiet=not args.verbose)
    print(json.dumps(rep, indent=1, default=float) if args.json else format_report(rep))
    return 0


def register(sub) -> None:
    p = sub.add_parser("drift-check", help="what each concept drift costs the reference (frozen vs unfrozen)")
    p.add_argument("--env", required=True, help="env id, e.g. clbench/DBExplore-v3")
    p.add_argument("--rollouts", type=int, default=None,
                   help="stateful rollouts per system (default 3, or one per deal of an env that deals each rollout "
                        "its own instances: Poker 5)")
    p.add_argument("--seed", type=int, default=0, help="rollout k uses seed SEED+k")
    p.add_argument("--workers", type=int, default=1, help="parallel worker processes")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env keyword argument")
    p.add_argument("--world-seed", type=int, default=None, metavar="N",
                   help="check a freshly drawn world N (calibrated first when not cached)")
    p.add_argument("--at", action="append", default=[], metavar="VARIANT",
                   help="check the boundary before VARIANT instead of the declared drifts (repeatable)")
    p.add_argument("--window", type=int, default=5, help="instances averaged for the recovery level (default 5)")
    p.add_argument("--out", default="", help="keep the run directory here (default: a temporary one)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--verbose", action="store_true", help="progress output")
    p.set_defaults(func=cmd_drift_check)
