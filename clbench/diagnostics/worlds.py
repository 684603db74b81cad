"""Difficulty across worlds: per world seed, r_max, r_reference, the reference's normalized gain,
the drift cost and the best memoryless red-team family, next to the canonical world's.

    from clbench.diagnostics.worlds import calibrate_world, world_row
    world_row("clbench/MemoryProbe-v2", world_seed=3)

`calibrate_world` computes a world's (or schedule's) r_max (oracle) and r_reference (stateless
reference) and caches them (clbench.calibration), so runs on that world never borrow the
canonical numbers.
"""
from __future__ import annotations

import numpy as np


def calibrate_world(env_id: str, env_kwargs: dict | None = None) -> dict[str, float]:
    """r_max and r_reference of the world/schedule `env_kwargs` names, computed and cached."""
    from clbench.calibration import store_baselines
    from clbench.commands.calibrate import stateless_means
    from clbench.runner import make_env

    means = stateless_means(env_id, ["oracle", "reference"], env_kwargs)
    values = {"r_max": means["oracle"], "r_reference": means["reference"]}
    env = make_env(env_id, **(env_kwargs or {}))
    try:
        if not env.unwrapped.baselines_from_spec:
            store_baselines(env.unwrapped, values)
    finally:
        env.close()
    return values


def best_family(env_id: str, env_kwargs: dict | None = None) -> tuple[str, float]:
    """The env's best memoryless policy-family point (stateless mean), by name."""
    from clbench.agent import load_object
    from clbench.registry import env_class

    cls = env_class(env_id)
    means = load_object(f"clbench.agents.{cls.task}_redteam:family_means")(env_id, env_kwargs)
    name = max(means, key=means.get)
    return name, means[name]


def world_row(env_id: str, world_seed: int | None = None, rollouts: int = 2) -> dict:
    """One world's numbers: r_max, r_reference, normalized gain and drift cost of the reference
    (clbench drift-check), best red-team family."""
    from clbench.commands.drift_check import run_drift_check

    kwargs = {} if world_seed is None else {"world_seed": int(world_seed)}
    base = calibrate_world(env_id, kwargs)
    rep = run_drift_check(env_id, kwargs, rollouts=rollouts)
    family, family_mean = best_family(env_id, kwargs)
    costs = [d["cost"]["mean"] for d in rep["drifts"] if d["cost"]["mean"] is not None]
    return {"world": "canonical" if world_seed is None else f"world-{world_seed}", **base,
            "normalized_gain": rep["normalized_gain"]["mean"], "drift_cost": float(np.mean(costs)) if costs else None,
            "best_family": family, "best_family_mean": family_mean}


def summarize(rows: list[dict], fields=("r_max", "r_reference", "normalized_gain", "drift_cost",
                                        "best_family_mean")) -> dict[str, dict[str, float]]:
    """Mean, min and max of each field over `rows`."""
    out = {}
    for f in fields:
        vals = np.array([r[f] for r in rows if r.get(f) is not None], dtype=float)
        out[f] = {"mean": float(vals.mean()), "min": float(vals.min()), "max": float(vals.max())}
    return out
