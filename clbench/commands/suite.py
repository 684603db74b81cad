"""`clbench suite --agent NAME [--tasks ...]`: every task (or a chosen set) in one run, then the
suite summary with the aggregate over tasks."""
from __future__ import annotations

from clbench.commands.rollout import add_run_arguments, config_from_args, run_and_report

#: the six benchmark tasks in suite order (diagnostic envs such as MemoryProbe join with --tasks)
SUITE = ["SpectrumMonitor", "DBExplore", "Poker", "SalesForecast", "CodeRepair", "CohortStudies"]


def resolve_tasks(names: list[str] | None) -> list[str]:
    from clbench.registry import clbench_env_ids

    known = clbench_env_ids()
    by_short = {k.split("/")[1].rsplit("-v", 1)[0].lower(): k for k in known}
    wanted = names or [n for n in SUITE if n.lower() in by_short]
    ids = []
    for name in wanted:
        key = name.split("/")[-1].rsplit("-v", 1)[0].lower()
        if name in known:
            ids.append(name)
        elif key in by_short:
            ids.append(by_short[key])
        else:
            raise ValueError(f"unknown task {name!r}; known: {', '.join(sorted(by_short))}")
    return ids


def cmd_suite(args) -> int:
    if args.resume:
        return run_and_report(args, [])
    if not args.agent:
        raise ValueError("--agent is required (or --resume DIR)")
    out = args.out or f"runs/suite-{args.agent}"
    cfgs = [config_from_args(args, env_id, out) for env_id in resolve_tasks(args.tasks)]
    return run_and_report(args, cfgs)


def register(sub) -> None:
    p = sub.add_parser("suite", help="run an agent on every task (or --tasks ...) and print the suite summary")
    p.add_argument("--tasks", nargs="+", help="env ids or short names (default: the six benchmark tasks)")
    p.add_argument("--out", default="", help="run directory (default runs/suite-<agent>)")
    add_run_arguments(p)
    p.set_defaults(func=cmd_suite)
