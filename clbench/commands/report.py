"""`clbench report DIR`: the metrics table from saved results."""
from __future__ import annotations

import json


def cmd_report(args) -> int:
    from clbench.runcard import compute
    from clbench.summary import metrics_markdown

    result = compute(args.dir)
    if args.format == "json":
        print(json.dumps({"tasks": result["tasks"], "aggregate": result["aggregate"]}, indent=2, default=float))
    else:
        print(metrics_markdown(result))
    return 0


def register(sub) -> None:
    p = sub.add_parser("report", help="metrics table of a run directory")
    p.add_argument("dir", help="run directory")
    p.add_argument("--format", choices=["md", "json"], default="md")
    p.set_defaults(func=cmd_report)
