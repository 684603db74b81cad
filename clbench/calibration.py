"""Baselines (r_max, r_reference) of worlds and schedules other than the canonical default.

The canonical world's default schedule keeps its baselines in tasks/<task>/default.yaml
(`clbench calibrate --write`). Any other world (`world_seed=N`, the train split) or schedule is
calibrated on its own, never borrowed from the canonical one, and the result is cached here,
keyed by env id, schedule and world, in `$CLBENCH_CACHE` or platformdirs' user cache folder.
"""
from __future__ import annotations

import json
import os
from pathlib import Path


def cache_root() -> Path:
    """Where calibrations of non-canonical worlds and schedules are cached."""
    if os.environ.get("CLBENCH_CACHE"):
        return Path(os.environ["CLBENCH_CACHE"]) / "calibration"
    import platformdirs

    return Path(platformdirs.user_cache_dir("clbench")) / "calibration"


def cache_path(env) -> Path:
    """The cache file of `env`'s world and schedule (an unwrapped clbench env)."""
    return cache_root() / env.task / f"{env.env_id.split('/')[-1]}-{env.schedule_name}-{env.world_key}.json"


def cached_baseline(env, name: str) -> float | None:
    """`name` ("r_max" or "r_reference") of `env`'s world and schedule if calibrated, else None."""
    path = cache_path(env)
    try:
        return json.loads(path.read_text()).get(name)
    except (OSError, ValueError, AttributeError):
        return None


def store_baselines(env, values: dict) -> Path:
    """Cache `values` ({"r_max": ..., "r_reference": ..., ...}) for `env`'s world and schedule (atomic)."""
    path = cache_path(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"env_id": env.env_id, "schedule": env.schedule_name, "world": env.world_key,
                               **values}, indent=1, sort_keys=True))
    os.replace(tmp, path)
    return path
