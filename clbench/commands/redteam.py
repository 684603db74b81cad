"""`clbench redteam --env ID [--world-seed N] [--full] [--redeals K] [--pooled-worlds 1-20]`: play the red team
(clbench.redteam) and print each policy's mean next to r_reference and r_max; exit 1 when any reaches r_reference or
the env declares no policy family.

One world (the canonical one, or `--world-seed N`): for a redealable env each family's point is chosen on K re-deals of
the world (its selection mean) and only that point is played on the benchmark (its benchmark mean); one that reaches
r_reference there fails unless it falls below the stateless reference on other re-deals (the benchmark's luck:
`redteam.confirm`). An env without re-deals has every point played on the benchmark.

On a fresh world (`--world-seed N`) that choice is made on the world's own re-deals or scored years: it learned the
world from more of it than a stateful agent gets, so it is no memoryless policy of that world, and holding it to
r_reference would fail worlds that are fine. There a family point is held to the env's band instead
(`FreshWorldJudge.world_band`: how far above r_reference such a point may come, the band the env's tests hold each
fresh world to); the output says so, and a point above the band fails. Degenerate agents, train-answers,
train-learned and the feedback memorizer are not chosen on the world and stay held to r_reference. An env without a
fresh-world judge keeps the strict rule on every world.

The memoryless verdict for fresh worlds is `--pooled-worlds 1-20` (issue 29): each family's point chosen on the train
split's worlds and frozen (`redteam.train_choice`, cached), played on every listed world; per family it prints the
train-chosen point, its lead over the stateless reference pooled over the worlds (mean +- standard error, worlds where
it leads: `redteam.PooledLead`) and a verdict; exit 1 when any family's mean lead is above 0 by two standard errors.
"""
from __future__ import annotations

import json


def cmd_redteam(args) -> int:
    from clbench import redteam
    from clbench.commands.rollout import env_kwargs_from_args

    if args.full:
        import os

        os.environ["CLBENCH_SLOW"] = "1"  # envs may size their grids by it; spawned workers inherit it
    if args.pooled_worlds:
        if args.world_seed is not None:
            print("FAIL: --pooled-worlds judges many fresh worlds; drop --world-seed")
            return 2
        return pooled(args)
    report = redteam.run(args.env, env_kwargs_from_args(args), full=args.full, workers=args.workers,
                         out=args.out or None, k=args.redeals)
    print(json.dumps(report, indent=1, default=float) if args.json else redteam.format_table(report))
    if report["world_band"] is not None:
        print(f"note: a fresh world's family points are chosen on its own data, so each is held to the env's band "
              f"(at most {report['world_band']:+.4g} above r_reference), not to r_reference; the memoryless verdict "
              f"for fresh worlds is --pooled-worlds")
    bad = False
    if not report["families"]:
        print(f"FAIL: {args.env} declares no policy family (policy_families)")
        bad = True
    for r in report["failures"]:
        print(f"FAIL: {r['policy']} reaches r_reference ({r['mean']:.6g} >= {report['r_reference']:.6g})"
              + (f" and lies above the fresh world's band ({report['world_band']:+.4g})"
                 if report["world_band"] is not None and r["family"] not in redteam.NOT_FAMILIES else ""))
        bad = True
    return 1 if bad else 0


def pooled(args) -> int:
    """The pooled verdict over `--pooled-worlds`; exit 1 when any family leads."""
    from dataclasses import asdict

    from clbench import redteam

    try:
        worlds = redteam.parse_worlds(args.pooled_worlds)
        report = redteam.pooled_verdict(args.env, worlds, full=args.full)
    except ValueError as exc:
        print(f"FAIL: {exc}")
        return 2
    if args.json:
        rows = [{**r, "pooled": asdict(r["pooled"])} for r in report["rows"]]
        print(json.dumps({**report, "rows": rows, "failures": [r["family"] for r in report["failures"]]}, indent=1))
    else:
        print(redteam.format_pooled(report))
    for r in report["failures"]:
        print(f"FAIL: {r['family']} ({', '.join(f'{k}={v}' for k, v in r['params'].items())}) leads the stateless "
              f"reference pooled over the worlds: {r['pooled']}")
    return 1 if report["failures"] else 0


def register(sub) -> None:
    from clbench.commands.rollout import add_world_arguments
    from clbench.runner import default_workers

    p = sub.add_parser("redteam", help="play non-learning adversaries (degenerate agents, the env's policy "
                                       "families, train-split answers, a feedback memorizer) against r_reference")
    p.add_argument("--env", required=True, help="env id, e.g. clbench/Poker-v9")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env keyword argument")
    add_world_arguments(p, calibrate=False)
    p.add_argument("--full", action="store_true", help="the full search (as with CLBENCH_SLOW=1): every family's "
                                                       "full grid")
    p.add_argument("--redeals", type=int, default=None, metavar="K",
                   help="re-deals a redealable env's family points are chosen on (default 2, 6 with --full)")
    p.add_argument("--pooled-worlds", default="", metavar="WORLDS",
                   help="the fresh-world verdict over these world seeds (1-20, 1,2,5): each family's point chosen on "
                        "the train split, frozen, its lead over the stateless reference pooled over the worlds")
    p.add_argument("--workers", type=int, default=default_workers(), help="parallel worker processes")
    p.add_argument("--out", default="", help="keep the run directories here (default: a temporary one)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_redteam)
