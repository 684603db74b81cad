"""`clbench calibrate --env ID`: r_max (oracle) and r_reference (stateless reference) on the
default schedule, computed by playing them, for the task's default.yaml; then the mean of every
degenerate agent (clbench.agents.degenerate), which must not beat r_reference."""
from __future__ import annotations

import numpy as np


def stateless_means(env_id: str, agents: list[str], env_kwargs: dict | None = None, seed: int = 0,
                    instances: list[str] | None = None) -> dict[str, float]:
    """Mean reward of each agent played stateless (a fresh agent per instance) on every instance
    of the schedule, or on `instances` (ids) only; one env serves all agents."""
    from clbench.agent import make_agent
    from clbench.runner import make_env, play_instance

    env = make_env(env_id, **(env_kwargs or {}))
    try:
        ids = instances or [slot.instance_id for slot in env.unwrapped.schedule.order(0)]
        means = {}
        for agent in agents:
            rewards = []
            for iid in ids:
                a = make_agent(agent, env, seed=seed)
                obs, info = env.reset(seed=0, options={"instance": iid, "stateless": True})
                out = play_instance(env, a, obs, info, [])
                if out["error"]:
                    raise RuntimeError(f"{agent} failed on {iid}: {out['error']}")
                rewards.append(out["reward"])
            means[agent] = float(np.mean(rewards))
        return means
    finally:
        env.close()


def stateless_mean(env_id: str, agent: str, env_kwargs: dict | None = None, seed: int = 0) -> float:
    """Mean reward of `agent` played stateless (fresh agent per instance) on every instance."""
    return stateless_means(env_id, [agent], env_kwargs, seed)[agent]


def cmd_calibrate(args) -> int:
    from clbench.agents.degenerate import degenerate_agents

    degenerate = [] if args.no_degenerate else degenerate_agents(args.env)
    means = stateless_means(args.env, ["oracle", "reference", *degenerate])  # one env built for all
    r_max, r_ref = means["oracle"], means["reference"]
    print(f"r_max: {r_max!r}\nr_reference: {r_ref!r}")
    if degenerate:
        print("degenerate agents (must not beat r_reference):")
    for name in degenerate:
        print(f"  {name}: {means[name]:.6g}{'  BEATS r_reference' if means[name] > r_ref else ''}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="compute r_max and r_reference of an env on its default schedule")
    p.add_argument("--env", required=True)
    p.add_argument("--no-degenerate", action="store_true", help="skip the degenerate agents' means")
    p.set_defaults(func=cmd_calibrate)
