"""Honest scores (docs/contract.md): the degenerate agents themselves and `clbench calibrate`'s report of
them. The checks that hold for every env (degenerate agents never beat the stateless reference; an
instance id names the same problem in every rollout and in the stateless jump) are in
tests/test_contract.py; each env's own attacks on its grading are in its test module.
"""
from __future__ import annotations

import re

import gymnasium as gym
import pytest

import clbench
from clbench.agents.degenerate import degenerate_agents


def test_every_env_has_answers_that_ignore_the_observation():
    """Spectrum's `everything` answer (the whole band) is the one v0 handed ~0.8 for."""
    from clbench.agents.degenerate import fixed_answers

    assert "everything" in fixed_answers("clbench/SpectrumMonitor-v6")
    assert all(fixed_answers(env_id) for env_id in clbench.clbench_env_ids())


def test_calibrate_prints_every_degenerate_agents_mean(capsys):
    from clbench.cli import main

    assert main(["calibrate", "--env", "clbench/SpectrumMonitor-v6"]) == 0
    out = capsys.readouterr().out
    printed = dict(re.findall(r"^  (\S+): ([-\d.e]+)", out, re.MULTILINE))
    assert list(printed) == degenerate_agents("clbench/SpectrumMonitor-v6")
    env = gym.make("clbench/SpectrumMonitor-v6").unwrapped
    assert f"r_reference: {env.r_reference!r}" in out and "BEATS" not in out
    assert 0.2 < float(printed["fixed:everything"]) < env.r_reference  # v0 gave it ~0.8


def test_degenerate_agents_by_name():
    from clbench.agent import make_agent

    env = gym.make("clbench/SpectrumMonitor-v6")
    obs, info = env.reset(seed=0)
    assert make_agent("fixed:everything", env).act(obs, info) == env.unwrapped.degenerate_answers["everything"]
    first = '{"tool": "submit_report", "arguments": {"transmitters": []}}'
    assert make_agent("first-legal", env).act(obs, info) == first
    assert make_agent("empty", env).act(obs, info) == ""
    with pytest.raises(ValueError, match="declared: everything, nothing, plan"):
        make_agent("fixed:nope", env)
