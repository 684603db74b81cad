"""Property-based fuzzing of every registered env's step(): arbitrary text and JSON never raise.

Each env is made once; hypothesis (derandomized, bounded examples) feeds it printable text (the
action space), arbitrary Unicode, and JSON tool calls whose arguments hold hostile values (huge
integers, inf, lone surrogates, deep nesting). Every step must return a valid observation and
info; an ended instance is reset and fuzzing goes on. The sandboxed envs run each fuzzed shell
command for real, so they get fewer examples and skip without bubblewrap.
"""
from __future__ import annotations

import json
import os

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clbench  # noqa: F401
from clbench.env import CHARSET
from clbench.registry import clbench_env_ids
from clbench.sandbox.bwrap import bwrap_works
from tests.test_contract import INFO_KEYS, REAL_CACHE, env_kwargs

#: fuzzed shell commands may wait on nothing for long: a short limit keeps the fuzzing quick
FUZZ_KWARGS = {"SalesForecast": {"command_timeout": 5}}
SANDBOXED = {"SalesForecast", "CodeRepair"}


def short(env_id: str) -> str:
    return env_id.split("/")[1].rsplit("-v", 1)[0]


@pytest.fixture(scope="module", params=clbench_env_ids(), ids=short)
def env(request, tmp_path_factory):
    name = short(request.param)
    if name in SANDBOXED and not bwrap_works()[0]:
        pytest.skip(f"{name} runs shell commands in bubblewrap: {bwrap_works()[1]}")
    kwargs = {**env_kwargs(request.param), **FUZZ_KWARGS.get(name, {})}  # the contract test's table
    if name == "DBExplore":
        kwargs["cache_dir"] = str(tmp_path_factory.mktemp("fuzz-db"))
    saved = os.environ.get("CLBENCH_CACHE_DIR")
    if name == "CodeRepair":  # the verified sdists and test venvs live in the user's real cache
        os.environ["CLBENCH_CACHE_DIR"] = REAL_CACHE
    e = gym.make(request.param, **kwargs).unwrapped
    e.reset(seed=0)
    yield e
    e.close()
    if saved is None:
        os.environ.pop("CLBENCH_CACHE_DIR", None)
    else:
        os.environ["CLBENCH_CACHE_DIR"] = saved


json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40), st.sampled_from(["\ud800", "x\udfff", "\x00", "1" * 5000, "RAISE 10", "fold"]),
)
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)


def tool_calls(env) -> st.SearchStrategy:
    names = [t["function"]["name"] for t in env.tools] + ["nope"]
    props = sorted({p for t in env.tools for p in t["function"]["parameters"]["properties"]}) or ["x"]
    args = st.dictionaries(st.sampled_from(props), json_value, max_size=3)
    return st.builds(lambda n, a: {"tool": n, "arguments": a}, st.sampled_from(names), args)


def actions(env) -> st.SearchStrategy:
    as_json = st.one_of(tool_calls(env), json_value).map(json.dumps)  # ASCII: inside the action space
    huge_int = st.builds(lambda n, k: json.dumps({"tool": n, "arguments": {"x": 1}}).replace("1", "9" * k),
                         st.sampled_from([t["function"]["name"] for t in env.tools] or ["x"]),
                         st.integers(4301, 6000))
    return st.one_of(st.text(alphabet=CHARSET, max_size=300), st.text(max_size=100), as_json, huge_int,
                     st.integers(1, 3000).map(lambda n: "[" * n + "{" * n))


def test_step_never_raises_on_arbitrary_text_and_json(env):
    n = 25 if short(env.env_id) in SANDBOXED else 150

    @settings(max_examples=n, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(actions(env))
    def check(action):
        if env._done:
            env.reset()
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and env.observation_space.contains(obs)
        assert isinstance(reward, float) and reward == reward  # never NaN
        assert INFO_KEYS <= set(info)
        if terminated or truncated:
            assert "instance_reward" in info

    env.cycle = True  # fuzzing may run past the last instance
    check()
