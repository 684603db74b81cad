"""`clbench list`: every env with its instances, variants, r_max and r_reference, and the agents.

An env whose default.yaml has no r_max/r_reference yet shows "uncalibrated" in those columns
(`clbench calibrate --env ID --write` sets them)."""
from __future__ import annotations


def cmd_list(args) -> int:
    import gymnasium as gym

    from clbench.agent import agent_names
    from clbench.registry import clbench_env_ids
    from clbench.reporting.tables import markdown_table

    rows = []
    for env_id in clbench_env_ids():
        try:
            env = gym.make(env_id).unwrapped if args.full else None
        except Exception as exc:  # an env whose data cannot be built still gets listed
            rows.append([env_id, "?", "?", "?", "?", f"unavailable: {exc}"])
            continue
        if env is None:
            cls = gym.registry[env_id].entry_point
            rows.append([env_id, "", "", "", "", str(cls)])
            continue
        variants = ", ".join(f"{v['name']}({v['instances']})" for v in env.schedule.describe())
        rows.append([env_id, str(len(env.schedule)), variants, _number(env.r_max), _number(env.r_reference),
                     ", ".join(agent_names(env))])
        env.close()
    from clbench.registry import BROKEN

    for module, reason in sorted(BROKEN.items()):  # listed with the reason, after the envs that work
        rows.append([module.rsplit(".", 1)[-1], "?", "?", "?", "?", f"not registered: {reason}"])
    print(markdown_table(["env", "instances", "variants", "r_max", "r_reference", "agents"], rows))
    return 0


def _number(value: float | None) -> str:
    return UNCALIBRATED if value is None else f"{value:.4g}"


#: what `clbench list` shows for r_max / r_reference before `clbench calibrate --env ID --write`
UNCALIBRATED = "uncalibrated"


def register(sub) -> None:
    p = sub.add_parser("list", help="list envs (instances, variants, r_max, r_reference) and their agents")
    p.add_argument("--ids-only", dest="full", action="store_false", help="only env ids (no data is built)")
    p.set_defaults(func=cmd_list)
