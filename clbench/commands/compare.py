"""`clbench compare DIR... [--sort normalized_reward|normalized_gain]`: a leaderboard across systems."""
from __future__ import annotations

import json
from pathlib import Path


def cmd_compare(args) -> int:
    from clbench.reporting import leaderboard
    from clbench.reporting.tables import print_tables

    board = leaderboard.collect(args.dirs, conventions=args.conventions, sort=args.sort, n_boot=args.n_boot)
    if args.format == "json":
        print(json.dumps(board, indent=2, default=float))
    else:
        print_tables([leaderboard.table(board)])
    if args.plots:
        from clbench.reporting import figures, plots

        aggs = {s["label"]: s["aggregate"] for s in board["systems"]}
        written = plots.write(figures.pareto_figures(leaderboard.cost_entries(board), aggs), Path(args.plots))
        for path in written:
            print(f"wrote {path}")
        if not written:
            print("no costs recorded: no Pareto plots")
    return 0


def register(sub) -> None:
    from clbench.reporting import CHOICES, SORT_KEYS

    p = sub.add_parser("compare", help="leaderboard across run directories (rows = systems, columns = tasks)")
    p.add_argument("dirs", nargs="+", help="run directories")
    p.add_argument("--sort", choices=SORT_KEYS, default="normalized_reward", help="rank by this suite aggregate")
    p.add_argument("--conventions", choices=[c for c in CHOICES if c != "both"], default="auto",
                   help="upstream (the original CL-Bench's) or clbench; auto = upstream when every directory "
                        "was made by import-upstream, clbench otherwise")
    p.add_argument("--format", choices=["md", "json"], default="md")
    p.add_argument("--plots", metavar="DIR", help="write reward-vs-cost and gain-vs-cost Pareto views here")
    p.add_argument("--n-boot", type=int, default=None, help="bootstrap resamples (clbench conventions)")
    p.set_defaults(func=cmd_compare)
