"""`clbench calibrate --env ID`: r_max (oracle) and r_reference (stateless reference) on the
default schedule, computed by playing them, for the task's default.yaml."""
from __future__ import annotations

import numpy as np


def stateless_mean(env_id: str, agent: str, env_kwargs: dict | None = None, seed: int = 0) -> float:
    """Mean reward of `agent` played stateless (fresh agent per instance) on every instance."""
    from clbench.agent import make_agent
    from clbench.runner import make_env, play_instance

    env = make_env(env_id, **(env_kwargs or {}))
    try:
        rewards = []
        for slot in env.unwrapped.schedule.order(0):
            a = make_agent(agent, env, seed=seed)
            obs, info = env.reset(seed=0, options={"instance": slot.instance_id, "stateless": True})
            out = play_instance(env, a, obs, info, [])
            if out["error"]:
                raise RuntimeError(f"{agent} failed on {slot.instance_id}: {out['error']}")
            rewards.append(out["reward"])
        return float(np.mean(rewards))
    finally:
        env.close()


def cmd_calibrate(args) -> int:
    r_max = stateless_mean(args.env, "oracle")
    r_ref = stateless_mean(args.env, "reference")
    print(f"r_max: {r_max!r}\nr_reference: {r_ref!r}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="compute r_max and r_reference of an env on its default schedule")
    p.add_argument("--env", required=True)
    p.set_defaults(func=cmd_calibrate)
