"""Honest scores (DESIGN.md), checked on every registered env with the real envs and agents:

- degenerate agents (clbench.agents.degenerate: the first legal action every step, every fixed
  answer the env declares, an immediate submit, the empty reply) never beat the stateless
  reference `r_reference` on the default schedule;
- an instance id names the same problem in every rollout order and in the stateless jump: its
  first observation is the same once the rollout position it states is normalised away.

The sandboxed tasks (CodeRepair, SalesForecast) take seconds per step and up to a minute per
grading, so by default they are checked on a sample of the default schedule: the degenerate
agents on its first instance, the fingerprints on the first instance of every variant.
CLBENCH_SLOW=1 checks their whole default schedule like every other task's.
"""
from __future__ import annotations

import os
import re

import gymnasium as gym
import platformdirs
import pytest

import clbench
from clbench.agents.degenerate import degenerate_agents
from clbench.commands.calibrate import stateless_means
from clbench.sandbox import SandboxUnavailable

ENV_IDS = clbench.clbench_env_ids()
#: tasks whose every step runs in a sandbox
SANDBOXED = {"coderepair", "salesforecast"}
FULL = os.environ.get("CLBENCH_SLOW") == "1"


@pytest.fixture(scope="module")
def made():
    """One env per id for the module (building CodeRepair's checkouts is slow)."""
    envs: dict[str, gym.Env] = {}

    def make(env_id: str) -> gym.Env:
        if env_id not in envs:
            try:
                envs[env_id] = gym.make(env_id)
            except SandboxUnavailable as exc:
                pytest.skip(f"{env_id}: no sandbox backend: {exc}")
        return envs[env_id]

    yield make
    for env in envs.values():
        env.close()


@pytest.fixture(autouse=True)
def _real_download_cache(monkeypatch):
    """CodeRepair's verified sdists come from the user's cache, not a fresh per-test one."""
    monkeypatch.setenv("CLBENCH_CACHE_DIR", os.environ.get("CLBENCH_CACHE_DIR")
                       or platformdirs.user_cache_dir("clbench"))


def checked_instances(env, variants: int | None = None) -> list[str]:
    """Every instance of the default schedule, or for a sandboxed task (unless CLBENCH_SLOW=1)
    the first instance of each of the first `variants` variants (all by default)."""
    base = env.unwrapped
    if base.task in SANDBOXED and not FULL:
        return [v.instances[0].instance_id for v in base.schedule.variants[:variants]]
    return [slot.instance_id for slot in base.schedule.order(0)]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_degenerate_agents_never_beat_the_stateless_reference(env_id, made):
    env = made(env_id)
    base = env.unwrapped
    names = degenerate_agents(env_id)
    assert {"first-legal", "submit", "empty"} <= set(names)
    means = stateless_means(env_id, names, instances=checked_instances(env, variants=1))
    print(f"\n{env_id}: r_reference {base.r_reference:.4g}, r_max {base.r_max:.4g}; "
          + ", ".join(f"{n} {m:.4g}" for n, m in means.items()))
    beaten = {n: m for n, m in means.items() if m > base.r_reference}
    assert not beaten, f"{env_id}: degenerate agents beat r_reference {base.r_reference}: {beaten}"


def test_every_env_has_answers_that_ignore_the_observation():
    """Spectrum's `everything` answer (the whole band) is the one v0 handed ~0.8 for."""
    from clbench.agents.degenerate import fixed_answers

    assert "everything" in fixed_answers("clbench/SpectrumMonitor-v1")
    assert all(fixed_answers(env_id) for env_id in ENV_IDS)


#: text that states where an instance sits in the rollout, not what the problem is
POSITIONAL = [
    (r"\b{p}\b(?=(?: of |/){n}\b)", "#"),  # "Scan 5 of 90", "Issue 5/19"
    (r"(?<=session ){p}\b(?= ===)", "#"),  # MemoryProbe's conversation markers
    # Poker announces an opponent at whichever of its hands comes first in the rollout's order
    (r"(?m)^(?:New opponent: .*|\S+ returns: you played \d+ hands against .*)\n", ""),
]


def fingerprint(observation: str, position: int, n: int) -> str:
    for pattern, replacement in POSITIONAL:
        observation = re.sub(pattern.format(p=position + 1, n=n), replacement, observation)
    return observation


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_an_instance_id_names_the_same_problem_in_every_rollout_and_the_stateless_jump(env_id, made):
    env = made(env_id)
    n = len(env.unwrapped.schedule)
    seen: dict[str, dict[str, str]] = {}
    for seed in (0, 1, 2):
        env.reset(seed=seed)
        for iid in checked_instances(env):
            obs, info = env.reset(options={"instance": iid})
            seen.setdefault(iid, {})[f"rollout {seed}"] = fingerprint(obs, info["position"], n)
            if seed == 1:  # the stateless pass jumps within a permuted order
                obs, info = env.reset(options={"instance": iid, "stateless": True})
                seen[iid]["stateless"] = fingerprint(obs, info["position"], n)
    for iid, views in seen.items():
        first = next(iter(views.values()))
        differ = [k for k, v in views.items() if v != first]
        assert not differ, f"{env_id} {iid}: the first observation differs in {differ}"


def test_the_fingerprint_tells_problems_apart():
    """The normalisation removes the rollout position only: other instances stay distinct."""
    env = gym.make("clbench/SpectrumMonitor-v1")
    env.reset(seed=0)
    a, ia = env.reset(options={"instance": "scan-001"})
    b, ib = env.reset(options={"instance": "scan-002"})
    assert fingerprint(a, ia["position"], 90) != fingerprint(b, ib["position"], 90)
    assert "Scan # of 90" in fingerprint(a, ia["position"], 90)


def test_calibrate_prints_every_degenerate_agents_mean(capsys):
    from clbench.cli import main

    assert main(["calibrate", "--env", "clbench/SpectrumMonitor-v1"]) == 0
    out = capsys.readouterr().out
    printed = dict(re.findall(r"^  (\S+): ([-\d.e]+)", out, re.MULTILINE))
    assert list(printed) == degenerate_agents("clbench/SpectrumMonitor-v1")
    env = gym.make("clbench/SpectrumMonitor-v1").unwrapped
    assert f"r_reference: {env.r_reference!r}" in out and "BEATS" not in out
    assert 0.2 < float(printed["fixed:everything"]) < env.r_reference  # v0 gave it ~0.8


def test_degenerate_agents_by_name():
    from clbench.agent import make_agent

    env = gym.make("clbench/SpectrumMonitor-v1")
    obs, info = env.reset(seed=0)
    assert make_agent("fixed:everything", env).act(obs, info) == env.unwrapped.degenerate_answers["everything"]
    first = '{"tool": "submit_report", "arguments": {"transmitters": []}}'
    assert make_agent("first-legal", env).act(obs, info) == first
    assert make_agent("empty", env).act(obs, info) == ""
    with pytest.raises(ValueError, match="declared: everything, nothing, plan"):
        make_agent("fixed:nope", env)
