"""Core framework: schedules, action parsing, results files, runner and CLI."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest

import clbench
from clbench.actions import ActionError, ToolCall, as_tool_call, extract_json, parse_prefixed, tool_schema, validate_call
from clbench.agent import make_agent
from clbench.cli import main
from clbench.results import append_lines, load_records
from clbench.schedule import Instance, Schedule, Variant


def _schedule():
    return Schedule("s", [Variant("a", tuple(Instance(f"a{i}", "a") for i in range(5))),
                          Variant("b", tuple(Instance(f"b{i}", "b") for i in range(7)))])


def test_seed_zero_is_canonical_and_seeds_permute_within_variants_only():
    s = _schedule()
    assert [x.instance_id for x in s.order(0)] == [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(7)]
    for seed in (1, 2, 3):
        order = s.order(seed)
        assert [x.variant for x in order] == ["a"] * 5 + ["b"] * 7
        assert sorted(x.instance_id for x in order[:5]) == [f"a{i}" for i in range(5)]
        assert [x.variant_position for x in order] == list(range(5)) + list(range(7))
    assert [x.instance_id for x in s.order(1)] != [x.instance_id for x in s.order(2)]
    assert [x.instance_id for x in s.order(4)] == [x.instance_id for x in s.order(4)]
    assert s.variant_starts() == {"a": 0, "b": 5}


def test_schedule_rejects_duplicate_ids():
    with pytest.raises(ValueError, match="repeats instance ids"):
        Schedule("x", [Variant("a", (Instance("i", "a"), Instance("i", "a")))])


TOOLS = [tool_schema("query_sql", "run SQL", {"sql": {"type": "string"}}),
         tool_schema("answer", "answer", {"value": {"type": "string"}})]


def test_tool_calls_parse_in_all_shapes_and_are_validated():
    assert as_tool_call({"tool": "answer", "arguments": {"value": "3"}}) == ToolCall("answer", {"value": "3"})
    assert as_tool_call({"name": "answer", "arguments": '{"value": "3"}'}) == ToolCall("answer", {"value": "3"})
    assert as_tool_call({"type": "function", "function": {"name": "answer", "arguments": "{}"}}) == ToolCall("answer", {})
    with pytest.raises(ActionError, match="not valid JSON"):
        as_tool_call({"name": "answer", "arguments": "{oops"})
    with pytest.raises(ActionError, match="unknown tool 'drop'.*answer, query_sql"):
        validate_call(ToolCall("drop", {}), TOOLS)
    with pytest.raises(ActionError, match="'sql' is a required property"):
        validate_call(ToolCall("query_sql", {}), TOOLS)
    with pytest.raises(ActionError, match="Additional properties"):
        validate_call(ToolCall("query_sql", {"sql": "x", "extra": 1}), TOOLS)


def test_text_grammar_and_json_extraction():
    cmds = {"QUERY": ("query_sql", "sql"), "ANSWER": ("answer", "value")}
    assert parse_prefixed("QUERY: SELECT 1", cmds) == ToolCall("query_sql", {"sql": "SELECT 1"})
    assert parse_prefixed("answer:  42 ", cmds) == ToolCall("answer", {"value": "42"})
    assert parse_prefixed("hello", cmds) is None
    assert extract_json('Sure! ```json\n{"a": 1}\n``` done') == {"a": 1}
    assert extract_json('prefix {"a": {"b": 2}} suffix') == {"a": {"b": 2}}
    assert extract_json("no json here") is None
    assert extract_json("[" * 5000) is None  # deeply nested garbage does not blow up


def test_every_task_goes_by_one_name():
    """Env id, task, env package, data folder and agent modules agree: clbench/DBExplore-v3 is the
    task dbexplore in envs/dbexplore/, tasks/dbexplore/ and agents/dbexplore.py."""
    from clbench.env import load_task_spec
    from clbench.registry import env_class

    ids = clbench.clbench_env_ids()
    assert "clbench/SpectrumMonitor-v6" in ids
    for env_id in ids:
        name, version = env_id.split("/", 1)[1].rsplit("-v", 1)
        cls = env_class(env_id)
        assert version.isdigit() and cls.env_id == env_id and cls.task == name.lower()
        assert cls.__module__ == f"clbench.envs.{cls.task}.{cls.task}_env"
        assert load_task_spec(cls.task)["max_steps"] >= 1
        for path in cls.agents.values():
            assert path.split(":")[0].split(".")[:3] == ["clbench", "agents", cls.task]


def test_step_before_reset_and_after_end_are_clear_errors():
    env = gym.make("clbench/SpectrumMonitor-v6").unwrapped
    with pytest.raises(gym.error.ResetNeeded):
        env.step("{}")
    env.reset(seed=0)
    env.step('{"transmitters": []}')
    with pytest.raises(gym.error.ResetNeeded, match="reset"):
        env.step('{"transmitters": []}')
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"bogus": 1})
    with pytest.raises(ValueError, match="unknown instance id"):
        env.reset(options={"instance": "nope"})


def test_garbage_and_non_ascii_actions_never_raise():
    env = gym.make("clbench/SpectrumMonitor-v6")
    env.reset(seed=0)
    obs, *_ = env.step("\u00e9\u4e2d\u6587 {\"tool\": 5}")
    assert "Invalid action" in obs and env.observation_space.contains(obs)


def test_text_space_contains_as_gym_text_does():
    """TextSpace's one-set-operation `contains` answers as gym's per-character one."""
    from gymnasium.spaces import Text

    from clbench.env import CHARSET, TextSpace

    ours, gyms = (space(min_length=1, max_length=8, charset=CHARSET) for space in (TextSpace, Text))
    for x in ["", "a", "ab\ncd\t", "x" * 8, "x" * 9, "\u00e9", "a\x00", "a\x7f", "\ud800", 5, None, b"ab"]:
        assert ours.contains(x) is gyms.contains(x), repr(x)


def test_unknown_agent_lists_available():
    env = gym.make("clbench/SpectrumMonitor-v6")
    with pytest.raises(ValueError, match="available: .*oracle.*random.*reference"):
        make_agent("nobody", env)


def test_torn_and_corrupt_lines_are_dropped_with_warnings(tmp_path):
    good = {"task": "t", "system": "s", "mode": "stateful", "rollout": 0, "instance_id": "i1",
            "position": 0, "variant": "v", "reward": 1.0}
    append_lines(tmp_path / "results.jsonl", [good])
    with open(tmp_path / "results.jsonl", "ab") as fh:
        fh.write(b'{"task": "t", "sys')  # a writer killed mid-line
    # the next append repairs the torn tail so its record survives
    append_lines(tmp_path / "results.jsonl", [dict(good, instance_id="i2", position=1)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recs = load_records(tmp_path)
    assert [r["instance_id"] for r in recs] == ["i1", "i2"]
    assert any("dropped" in str(w.message) for w in caught)


def test_cli_list_rollout_report(tmp_path, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "clbench/SpectrumMonitor-v6" in out and "reference" in out
    run_dir = tmp_path / "r"
    assert main(["rollout", "--env", "clbench/SpectrumMonitor-v6", "--agent", "reference", "--rollouts", "2",
                 "--workers", "1", "--env-arg", "schedule=short", "--out", str(run_dir)]) == 0
    table = capsys.readouterr().out
    assert "normalized gain" in table and "| spectrummonitor | reference | IoU | 2 |" in table
    assert main(["report", str(run_dir)]) == 0
    assert capsys.readouterr().out.splitlines()[2] == table.splitlines()[2]
    assert main(["report", str(tmp_path / "missing")]) == 1
    assert "missing" in capsys.readouterr().err
    assert main(["rollout", "--env", "clbench/Nope-v0", "--agent", "x", "--out", str(tmp_path / "n")]) == 1


def test_agent_errors_score_zero_and_the_run_goes_on(tmp_path):
    from clbench.rollout import run
    from clbench.runner import RunConfig

    run(RunConfig("clbench/SpectrumMonitor-v6", "tests.crashing_agent:CrashOnThird", str(tmp_path), rollouts=1,
                  mode="stateful", env_kwargs={"schedule": "short"}), say=lambda m: None)
    recs = sorted(load_records(tmp_path), key=lambda r: r["position"])
    assert len(recs) == 8
    assert recs[2]["reward"] == 0.0 and "boom" in recs[2]["error"]
    assert all(r["error"] is None for r in recs[3:])


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "clbench.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("clbench ")
