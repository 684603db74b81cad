"""`clbench redteam --env ID [--world-seed N] [--full] [--redeals K]`: play the red team (clbench.redteam)
and print each policy's mean next to r_reference and r_max; exit 1 when any reaches r_reference or
the env declares no policy family. For a redealable env each family's point is chosen on K re-deals of
the world (its selection mean) and only that point is played on the benchmark (its benchmark mean); one that
reaches r_reference there fails unless it falls below the stateless reference on other re-deals (the
benchmark's luck: `redteam.confirm`)."""
from __future__ import annotations

import json


def cmd_redteam(args) -> int:
    from clbench import redteam
    from clbench.commands.rollout import env_kwargs_from_args

    if args.full:
        import os

        os.environ["CLBENCH_SLOW"] = "1"  # envs may size their grids by it; spawned workers inherit it
    report = redteam.run(args.env, env_kwargs_from_args(args), full=args.full, workers=args.workers,
                         out=args.out or None, k=args.redeals)
    print(json.dumps(report, indent=1, default=float) if args.json else redteam.format_table(report))
    bad = False
    if not report["families"]:
        print(f"FAIL: {args.env} declares no policy family (policy_families)")
        bad = True
    for r in report["failures"]:
        print(f"FAIL: {r['policy']} reaches r_reference ({r['mean']:.6g} >= {report['r_reference']:.6g})")
        bad = True
    return 1 if bad else 0


def register(sub) -> None:
    from clbench.commands.rollout import add_world_arguments
    from clbench.runner import default_workers

    p = sub.add_parser("redteam", help="play non-learning adversaries (degenerate agents, the env's policy "
                                       "families, train-split answers, a feedback memorizer) against r_reference")
    p.add_argument("--env", required=True, help="env id, e.g. clbench/Poker-v8")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env keyword argument")
    add_world_arguments(p, calibrate=False)
    p.add_argument("--full", action="store_true", help="the full search (as with CLBENCH_SLOW=1): every family's "
                                                       "full grid")
    p.add_argument("--redeals", type=int, default=None, metavar="K",
                   help="re-deals a redealable env's family points are chosen on (default 2, 6 with --full)")
    p.add_argument("--workers", type=int, default=default_workers(), help="parallel worker processes")
    p.add_argument("--out", default="", help="keep the run directories here (default: a temporary one)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_redteam)
