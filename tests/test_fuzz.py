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


# ---------------------------------------------------------------------------- every tool, every bad argument
#: values of the wrong type for any argument (whatever its schema asks for)
WRONG_TYPED = [None, True, 0, -1, 1.5, "", [], {}, [None], {"x": None}]
#: a string argument near the action size limit (the JSON call stays inside it)
HUGE = "x" * 60_000


def bad_arguments(tool: dict) -> list[dict]:
    """Missing (no arguments), empty, wrong-typed and huge values of every argument of one tool,
    plus an argument it does not have."""
    props = tool["function"]["parameters"]["properties"]
    cases = [{}, {"no_such_argument": 1}]
    for name in props:
        cases += [{name: v} for v in WRONG_TYPED]
        cases += [{name: HUGE}, {name: [HUGE]}, {name: {"k": HUGE}}, {name: 10 ** 4000}]
    return cases


def bad_texts(tool: dict) -> list[str]:
    """The tool's name as a text action, in both cases, with nothing, an empty or wrong JSON value,
    or a huge text after it (`QUERY_SQL: ` once raised KeyError: 'sql')."""
    name = tool["function"]["name"]
    out = []
    for n in (name, name.upper()):
        out += [n, f"{n}:", f"{n}: ", f"{n}: {{}}", f"{n}: []", f"{n}: null", f"{n}: 0", f'{n}: ""',
                f"{n}: {{", f"{n}: " + HUGE, f"{n}: " + "9" * 5000, f"{n} {n}"]
    return out


def test_every_tool_with_missing_empty_wrong_typed_and_huge_arguments(env):
    """Each tool of each env, as a JSON call and as text, with arguments an attacker or a confused
    model sends: never an exception, always a valid observation (an invalid action or a result)."""
    env.cycle = True
    for tool in env.tools:
        actions = [json.dumps({"tool": tool["function"]["name"], "arguments": a}) for a in bad_arguments(tool)]
        actions += bad_texts(tool)
        if short(env.env_id) in SANDBOXED:  # each one runs a shell: the JSON cases and a few texts
            actions = actions[:len(bad_arguments(tool))] + bad_texts(tool)[:6]
        for action in actions:
            if env._done:
                env.reset()
            try:
                obs, reward, terminated, truncated, info = env.step(action)
            except Exception as exc:  # noqa: BLE001 - the failure names the action that raised
                raise AssertionError(f"{env.env_id}: step({action[:80]!r}) raised {type(exc).__name__}: {exc}") from exc
            assert isinstance(obs, str) and env.observation_space.contains(obs), action[:80]
            assert isinstance(reward, float) and reward == reward
            assert INFO_KEYS <= set(info)
