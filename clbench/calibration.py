"""Baselines (r_max, r_reference) of worlds and schedules other than the canonical default.

The canonical world's default schedule keeps its baselines in tasks/<task>/default.yaml
(`clbench calibrate --write`). Any other world (`world_seed=N`, the train split) or schedule is
calibrated on its own, never borrowed from the canonical one, and the result is cached here,
keyed by env id, schedule, world and a digest of the code and spec that draw the world and play
its baselines (the env's package, the task spec, the oracle's and the reference's modules): a
change to how worlds are drawn, or to the reference, calibrates anew even without a version bump,
in `$CLBENCH_CACHE` or platformdirs' user cache folder.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import os
from pathlib import Path

import numpy as np

from clbench.env import load_task_spec


def cache_root() -> Path:
    """Where calibrations of non-canonical worlds and schedules are cached."""
    if os.environ.get("CLBENCH_CACHE"):
        return Path(os.environ["CLBENCH_CACHE"]) / "calibration"
    import platformdirs

    return Path(platformdirs.user_cache_dir("clbench")) / "calibration"


@functools.lru_cache(maxsize=None)
def _code_digest(env_cls: type) -> str:
    """A digest of the sources that draw `env_cls`'s worlds and play its baselines."""
    files = sorted(Path(inspect.getfile(env_cls)).parent.glob("*.py"))
    for name in ("oracle", "reference"):
        if name in env_cls.agents:
            files.append(Path(inspect.getfile(importlib.import_module(env_cls.agents[name].partition(":")[0]))))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def world_fingerprint(env) -> str:
    """12 hex digits naming the code and spec `env`'s baselines come from."""
    return class_fingerprint(type(env), env.spec_data)


def class_fingerprint(env_cls: type, spec: dict | None = None) -> str:
    """`world_fingerprint` of an env of `env_cls` with the spec `spec` (None: its task spec, which every env of the
    class reads), without making one."""
    digest = hashlib.sha256(_code_digest(env_cls).encode())
    digest.update(json.dumps(load_task_spec(env_cls.task) if spec is None else spec, sort_keys=True,
                             default=str).encode())
    return digest.hexdigest()[:12]


def cache_path(env) -> Path:
    """The cache file of `env`'s world and schedule (an unwrapped clbench env)."""
    return cache_root() / env.task / (f"{env.env_id.split('/')[-1]}-{env.schedule_name}-{env.deal_key.replace('/', '-')}-"
                                      f"{world_fingerprint(env)}.json")


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
    tmp.write_text(json.dumps({"env_id": env.env_id, "schedule": env.schedule_name, "world": env.deal_key,
                               **values}, indent=1, sort_keys=True))
    os.replace(tmp, path)
    return path


def world_label(env) -> str:
    """How a report names `env`'s world and schedule: "canonical", "world-7", "world-7 (schedule long)"."""
    return env.deal_key + ("" if env.schedule_name == "default" else f" (schedule {env.schedule_name})")


def baseline_values(base, oracle, reference) -> dict[str, float]:
    """r_max and r_reference from the oracle's and the stateless reference's rewards on the same instances;
    where the oracle's score is noisy (the task's default.yaml has `r_max_se`), also this world's own standard
    errors of r_max and of the headroom r_max - r_reference (paired: both played on the same instances)."""
    oracle, reference = np.asarray(oracle, dtype=float), np.asarray(reference, dtype=float)
    values = {"r_max": float(oracle.mean()), "r_reference": float(reference.mean())}
    if "r_max_se" in base.spec_data and oracle.size > 1:
        values["r_max_se"] = float(oracle.std(ddof=1) / np.sqrt(oracle.size))
        values["headroom_se"] = float((oracle - reference).std(ddof=1) / np.sqrt(oracle.size))
    return values


def calibrate_world(env_id: str, env_kwargs: dict | None = None, store: bool = True) -> dict:
    """r_max (the oracle's mean) and r_reference (the stateless reference's mean) of the world and
    schedule `env_kwargs` select, played stateless on every instance; stored in the cache unless
    store=False or it is the canonical default (whose numbers live in default.yaml)."""
    from clbench.commands.calibrate import stateless_rewards
    from clbench.runner import make_env

    played = stateless_rewards(env_id, ["oracle", "reference"], env_kwargs)
    env = make_env(env_id, **(env_kwargs or {}))
    try:
        values = baseline_values(env.unwrapped, played["oracle"], played["reference"])
        if store and not env.unwrapped.baselines_from_spec:
            store_baselines(env.unwrapped, values)
    finally:
        env.close()
    return values


def use_computed_baselines(base) -> bool:
    """Store the env's `computed_baselines()` (its r_max and r_reference worked out, not played: an env whose
    baselines follow from per-instance outcomes that do not depend on the world) in the cache, where it has
    them; False when it has none."""
    hook = getattr(base, "computed_baselines", None)
    values = hook() if hook is not None else None
    if not values:
        return False
    store_baselines(base, values)
    return True


def ensure_baselines(env, env_kwargs: dict | None = None, calibrate: bool = True) -> str | None:
    """Make sure `env` (a gym env made with `env_kwargs`) has r_max and r_reference: the canonical default's come from
    default.yaml, any other world's or schedule's from the cache, else from the env's `computed_baselines()`
    hook, else played now (`calibrate_world`) unless calibrate=False. Returns why normalized metrics stay
    undefined, or None."""
    base = env.unwrapped
    if base.calibrated:
        return None
    if base.baselines_from_spec:
        return (f"{base.env_id} is uncalibrated (no r_max / r_reference in its default.yaml): run "
                f"`clbench calibrate --env {base.env_id} --write`")
    if use_computed_baselines(base) and base.calibrated:
        return None
    if not calibrate:
        return (f"{world_label(base)} of {base.env_id} is not calibrated and --no-calibrate was given: run "
                f"`clbench calibrate --env {base.env_id} --world-seed N` (and the same --env-arg) first")
    spec = getattr(env, "spec", None)  # the id it was made with (a registered variant of the class)
    calibrate_world(spec.id if spec is not None else base.env_id, env_kwargs)
    return None if base.calibrated else f"calibrating {world_label(base)} of {base.env_id} stored no baselines"
