"""Vector envs for training (issue 31): `gym.make_vec` over every env, sync and async, through
several instance boundaries, with every info field stackable across sub-envs and steps.

Before: Poker's `info["table"]` held an int in one sub-env and None in another, gymnasium could not
stack them, and after the error `AsyncVectorEnv.close()` hung. Sub-envs are made with
`cycle=True` (a training loop outlives one schedule); actions are the action space's random
strings, which most envs treat as invalid actions (instances end through the invalid-action cap
within a few steps), so every sub-env crosses instance boundaries.
"""
from __future__ import annotations

import os
import threading

import gymnasium as gym
import pytest

import clbench  # noqa: F401 - registers the envs
from clbench.registry import clbench_env_ids, env_class

N = 3
STEPS = 40


def _vector_ids() -> list[str]:
    ids = []
    for eid in clbench_env_ids():
        cls = env_class(eid)
        if cls.runtime and os.environ.get("CLBENCH_SLOW") != "1":
            continue  # sandboxed repositories (CodeRepair): a step is a sandbox command; with CLBENCH_SLOW=1
        ids.append(eid)
    return ids


def _close_within(vec, seconds: float = 60) -> None:
    t = threading.Thread(target=vec.close, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the vector env's close() hung"


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("env_id", _vector_ids())
def test_make_vec_steps_every_env_through_instance_boundaries(env_id, mode):
    kwargs = {"vector_kwargs": {"shared_memory": False}} if mode == "async" else {}
    vec = gym.make_vec(env_id, N, vectorization_mode=mode, cycle=True, **kwargs)
    try:
        obs, info = vec.reset(seed=0)
        assert len(obs) == N and all(isinstance(o, str) and o for o in obs)
        seen = [{info["instance_id"][i]} for i in range(N)]
        vec.action_space.seed(0)
        for _ in range(STEPS):
            obs, reward, terminated, truncated, info = vec.step(vec.action_space.sample())
            assert len(obs) == N and reward.shape == (N,)
            for i in range(N):
                if "instance_id" in info and info.get("_instance_id", [True] * N)[i]:
                    seen[i].add(info["instance_id"][i])
        # every sub-env crossed a boundary (most envs several: random text is an invalid action there;
        # in SalesForecast's shell it is a command, so its instances end by the step budget)
        assert all(len(ids) >= 2 for ids in seen), seen
    finally:
        _close_within(vec)
