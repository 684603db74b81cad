"""`clbench suite --agent NAME [--tasks ...]`: every task (or a chosen set) in one run, then the
suite summary with the aggregate over tasks."""
from __future__ import annotations

from clbench.commands.rollout import add_run_arguments, config_from_args, run_and_report


def resolve_tasks(names: list[str] | None) -> list[str]:
    """Env ids for `names` (ids or task names, any case); by default every registered env whose
    class says `suite = True` (diagnostic envs such as MemoryProbe join with --tasks)."""
    from clbench.env import task_name
    from clbench.registry import clbench_env_ids, env_class

    known = clbench_env_ids()
    if not names:
        return [env_id for env_id in known if env_class(env_id).suite]
    by_task = {task_name(k): k for k in known}
    ids = []
    for name in names:
        if name in known:
            ids.append(name)
        elif task_name(name) in by_task:
            ids.append(by_task[task_name(name)])
        else:
            raise ValueError(f"unknown task {name!r}; known: {', '.join(sorted(by_task))}")
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
    p.add_argument("--tasks", nargs="+", help="env ids or task names (default: every env in the suite)")
    p.add_argument("--out", default="", help="run directory (default runs/suite-<agent>)")
    add_run_arguments(p)
    p.set_defaults(func=cmd_suite)
