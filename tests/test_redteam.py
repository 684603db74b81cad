"""The red team (clbench.redteam, `clbench redteam`) on every registered env: no non-learning
adversary (degenerate agents, the env's declared policy families, the train split's answers, a
feedback-only memorizer) may reach r_reference, and every env must declare a policy family.

Real envs, played through the runner. Short grids by default; every family's full grid with
CLBENCH_SLOW=1. CodeRepair runs a sandbox per instance: it is played with CLBENCH_SLOW=1 only.
"""
from __future__ import annotations

import pytest

from clbench import redteam
from clbench.cli import main
from clbench.redteam import FeedbackMemorizer, PolicyFamily, Policy, ReplayAgent, as_family
from clbench.registry import clbench_env_ids, env_class

SLOW_TASKS = {"coderepair"}  # a sandbox per instance
#: holes the red team finds and no fix has closed yet: the test must keep failing on them (strict), so
#: it flags the day a fix lands; each names its issue
OPEN_HOLES: dict[str, str] = {}  # task -> issue text of a hole still open (strict xfail); Poker closed in v3


def with_open_holes(env_id: str, *marks) -> "pytest.param":
    """`env_id` as a test parameter with `marks`, and a strict xfail where its hole is still open."""
    task = env_class(env_id).task
    if task in OPEN_HOLES:
        marks = (*marks, pytest.mark.xfail(reason=OPEN_HOLES[task], strict=True))
    return pytest.param(env_id, marks=marks)


def env_params():
    return [with_open_holes(e, *([pytest.mark.slow] if env_class(e).task in SLOW_TASKS else []))
            for e in clbench_env_ids()]


@pytest.mark.parametrize("env_id", clbench_env_ids())
def test_every_env_declares_a_policy_family(env_id):
    fams = redteam.families(env_class(env_id))
    assert fams, f"{env_id} declares no policy family (policy_families): the red team has nothing to search"
    for name, fam in fams.items():
        assert ":" in fam.cls and fam.points(), f"{env_id} family {name}: no class or an empty grid"


@pytest.mark.parametrize("env_id", env_params())
def test_no_red_team_policy_reaches_r_reference(env_id):
    if env_class(env_id).task in SLOW_TASKS:
        from clbench.sandbox.bwrap import bwrap_works

        ok, why = bwrap_works()
        if not ok:
            pytest.skip(f"bwrap: {why}")
    report = redteam.run(env_id, workers=2)
    assert report["families"], f"{env_id} declares no policy family"
    assert not report["failures"], "\n" + redteam.format_table(report)


def test_family_entries_take_every_form():
    assert as_family(("m:C", {"a": [1, 2]})) == PolicyFamily("m:C", {"a": [1, 2]})
    assert as_family(("m:C", {}, "stateful")).stateful
    fam = as_family(("m:C", {"a": [1]}, {"full_grid": {"a": [1, 2, 3], "b": [0]}}))
    assert fam.points() == [{"a": 1}] and len(fam.points(full=True)) == 3
    assert as_family(("m:C", {"a": [1, 2], "b": ["x", "y"]})).points()[-1] == {"a": 2, "b": "y"}
    with pytest.raises(TypeError):
        as_family("m:C")
    with pytest.raises(ValueError):
        as_family(("m:C", {}, "sometimes"))


def test_the_check_fails_when_a_policy_reaches_r_reference():
    # the oracle played as if it were a memoryless family: it reaches r_reference, and is reported
    env_id = "clbench/SpectrumMonitor-v3"
    report = redteam.run(env_id, policies=[Policy("planted-oracle", "planted", "oracle", {}),
                                           Policy("empty", "degenerate", "empty", {})])
    assert [r["policy"] for r in report["failures"]] == ["planted-oracle"]
    rows = {r["policy"]: r for r in report["rows"]}
    assert rows["planted-oracle"]["verdict"] == "REACHES r_reference" and rows["empty"]["verdict"] == "ok"
    assert rows["planted-oracle"]["mean"] == pytest.approx(report["r_max"])


def test_train_answers_replays_the_train_oracle_on_the_test_twin(tmp_path):
    env_id = "clbench/SpectrumMonitor-v3"
    actions = redteam.train_actions(env_id, {}, 1, tmp_path)
    from clbench.runner import cached_env

    ids = [s.instance_id for s in cached_env(env_id, {}).unwrapped.schedule.order(0)]
    assert set(actions) == set(ids) and all(actions[i] for i in ids)  # keyed by the test twin's id
    agent = ReplayAgent({}, actions={"x": ["a", "b"]})
    agent.begin_instance("", {"instance_id": "x"})
    assert [agent.act("", {}) for _ in range(3)] == ["a", "b", ""]


def test_feedback_memorizer_replays_the_best_sequence_of_the_variant():
    from clbench.agent import AgentCard

    card = AgentCard(env_id="clbench/SpectrumMonitor-v3", tools=[])
    m = FeedbackMemorizer(card)
    n = len(m.candidates)
    assert n >= 2  # the env's fixed answers
    rewards = {}
    for t in range(n):  # explore: every constant once
        info = {"instance_id": f"i{t}", "variant": "v"}
        m.begin_instance("", info)
        seq = m.act("", info)
        rewards[seq] = float(t == 1)  # the second constant pays
        m.end_instance(rewards[seq], info, "feedback")
    best = m.candidates[1][0]
    info = {"instance_id": "new", "variant": "v"}
    m.begin_instance("", info)
    assert m.act("", info) == best
    assert m.seen == ["feedback"] * n
    state = m.state_dict()
    clone = FeedbackMemorizer(card)
    clone.load_state_dict(state)
    clone.begin_instance("", info)
    assert clone.act("", info) == best


def test_cli_exits_non_zero_without_families_or_on_a_failure(capsys):
    env_id = "clbench/MemoryProbe-v2"
    code = main(["redteam", "--env", env_id, "--workers", "1"])
    out = capsys.readouterr().out
    assert "| policy | family | params | mean | r_reference | r_max | verdict |" in out
    assert code == (0 if redteam.families(env_class(env_id)) else 1)
