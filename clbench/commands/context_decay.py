"""`clbench context-decay`: the context-decay protocol (length sweep, explicit and implicit needles,
15% budget, probes at the end) run with the scripted memory strategies, next to the paper's table
(clbench.diagnostics.context_decay, docs/memory-diagnostics.md)."""
from __future__ import annotations

import json


def cmd_context_decay(args) -> int:
    from clbench.diagnostics import context_decay as cd

    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else list(cd.LENGTHS)
    if any(n < 10 for n in lengths) or args.trials < 1 or args.session_turns < 1:
        raise ValueError("--lengths must be >= 10 turns each, --trials and --session-turns >= 1")
    strategies = args.strategies.split(",") if args.strategies else list(cd.STRATEGIES)
    unknown = sorted(set(strategies) - set(cd.STRATEGIES))
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; known: {', '.join(cd.STRATEGIES)}")
    runs = cd.run_sweep(lengths, args.trials, strategies, args.session_turns)
    summary = cd.summarize(runs)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"summary": summary, "runs": runs}, fh, indent=1)
    print(cd.markdown(summary, paper=not args.no_paper))
    return 0


def register(sub) -> None:
    p = sub.add_parser("context-decay", help="length sweep of the scripted memory strategies: retrieval by depth "
                                             "and needle type, compression, density (no model calls)")
    p.add_argument("--lengths", default="", help="comma-separated conversation lengths in turns (default 50..1000)")
    p.add_argument("--trials", type=int, default=5, help="conversations per length (default 5)")
    p.add_argument("--strategies", default="", help="comma-separated subset of the four strategies")
    p.add_argument("--session-turns", type=int, default=10, help="turns the strategies read at a time (default 10)")
    p.add_argument("--json", default="", help="also write the summary and every run to this file")
    p.add_argument("--no-paper", action="store_true", help="leave out the paper's numbers")
    p.set_defaults(func=cmd_context_decay)
