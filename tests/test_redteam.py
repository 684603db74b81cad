"""The red team (clbench.redteam, `clbench redteam`) on every registered env: no non-learning
adversary (degenerate agents, the env's declared policy families, the train split's answers, the
reference trained on the train split and frozen, a feedback-only memorizer) may reach r_reference, and every env must declare a policy family. A
redealable env's family points are chosen on re-deals of its world and only the chosen point of
each family is scored on the benchmark (selection on the scored instances measures luck).

Real envs, played through the runner. Short grids by default; every family's full grid with
CLBENCH_SLOW=1. CodeRepair runs a sandbox per instance: it is played with CLBENCH_SLOW=1 only.
SalesForecast's family points run a sandboxed command per instance each, and its red-team module scores
every one of them in process (canonical_point_means, checked against the sandbox in tests/test_salesforecast.py):
by default each family's best point there is played here (IN_PROCESS_GRIDS), every point with CLBENCH_SLOW=1.
"""
from __future__ import annotations

import pytest

from clbench import redteam
from clbench.agent import load_object
from clbench.cli import main
from clbench.redteam import FeedbackMemorizer, PolicyFamily, Policy, ReplayAgent, as_family
from clbench.registry import clbench_env_ids, env_class

SLOW_TASKS = {"coderepair"}  # a sandbox per instance
#: tasks whose family points each run a sandboxed command per instance (seconds each) and whose red-team module scores
#: every point of the grid in process, on the real data (the function named): the default run plays, per family,
#: the point scored best there through the runner; the whole grid with CLBENCH_SLOW=1
IN_PROCESS_GRIDS = {"salesforecast": "clbench.agents.salesforecast_redteam:canonical_point_means"}
#: holes the red team finds and no fix has closed yet: the test must keep failing on them (strict), so
#: it flags the day a fix lands; each names its issue
OPEN_HOLES: dict[str, str] = {}  # task -> issue text of a hole still open (strict xfail); none today
POKER = "clbench/Poker-v9"
#: the luck test's probes: Poker's likelihood reader at a threshold off its family's grid (its own family, so the
#: plan's likelihood_reader points are chosen among themselves as in a run without it) and the reference's own play
POKER_PROBES = {"probe-likelihood_reader(confident=0.75)": ("luck-probe", "clbench.agents.poker_redteam:LikelihoodReaderAgent",
                                                            {"confident": 0.75}),
                "planted-reference": ("planted", "reference", {})}


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
def test_no_red_team_policy_reaches_r_reference(env_id, red_team_reports):
    if env_class(env_id).task in SLOW_TASKS:
        from clbench.sandbox.bwrap import bwrap_works

        ok, why = bwrap_works()
        if not ok:
            pytest.skip(f"bwrap: {why}")
    report = red_team_reports(env_id)["report"]
    failures = [r for r in report["failures"] if r["policy"] not in POKER_PROBES]  # the luck test's rows
    assert report["families"], f"{env_id} declares no policy family"
    assert not failures, "\n" + redteam.format_table(report)


@pytest.fixture(scope="module")
def red_team_reports(tmp_path_factory):
    """The generic red team's run on an env, once for every test that reads it ({"report", "out"}, by env id).
    On Poker it plays POKER_PROBES beside the plan, for the luck test, on the same re-deals: each policy is its own
    runner system with its own seeds, so a row is what a run of its policy alone gives, and the stateless reference
    on the confirming re-deals is played once for both tests."""
    reports = {}

    def report(env_id: str) -> dict:
        if env_id not in reports:
            task, out = env_class(env_id).task, tmp_path_factory.mktemp("redteam")
            policies = None if task not in IN_PROCESS_GRIDS or redteam.slow() else \
                strongest_points(env_id, load_object(IN_PROCESS_GRIDS[task])())
            if env_id == POKER:
                policies = [*redteam.plan(POKER), *(Policy(name, family, agent, dict(params))
                                                    for name, (family, agent, params) in POKER_PROBES.items())]
            reports[env_id] = {"report": redteam.run(env_id, workers=2, policies=policies, out=str(out)), "out": out}
        return reports[env_id]

    return report


def strongest_points(env_id: str, scores: dict[tuple[str, str], float]) -> list[Policy]:
    """The red team's plan with each family's grid cut to its point of best `scores` ((family, "family {params}")
    -> stateless mean, every point of the grid)."""
    best: dict[str, str] = {}
    for (fam, label), mean in scores.items():
        if fam not in best or mean > scores[(fam, best[fam])]:
            best[fam] = label
    plan = redteam.plan(env_id)
    points = [p for p in plan if p.family in best]
    assert {(p.family, f"{p.family} {p.params}") for p in points} == set(scores), "the scores miss a point of the grid"
    return [p for p in plan if p.family not in best or best[p.family] == f"{p.family} {p.params}"]


def test_train_learned_applies_what_the_train_split_taught(red_team_reports):
    """train-learned is not the stateless line in disguise: on DBExplore, whose train split has conventions of the
    same kind and other values, the frozen reference applies its train-split lessons, which are wrong on the test
    split, so it earns less than r_reference; were its state ignored it would tie r_reference exactly. Its row of
    the generic red team's run on DBExplore (the plan plays it as it would alone)."""
    report = red_team_reports("clbench/DBExplore-v3")["report"]
    (row,) = [r for r in report["rows"] if r["policy"] == redteam.TRAIN_LEARNED]
    assert row["tie_passes"] and row["mean"] < report["r_reference"] - 0.05, row


def test_a_tie_fails_a_policy_unless_it_is_the_reference_carrying_nothing():
    assert redteam.reaches(0.5, 0.5) and not redteam.reaches(0.5, 0.5, tie_passes=True)
    assert redteam.reaches(0.51, 0.5, tie_passes=True) and not redteam.reaches(0.49, 0.5)


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
    env_id = "clbench/SpectrumMonitor-v6"
    report = redteam.run(env_id, policies=[Policy("planted-oracle", "planted", "oracle", {}),
                                           Policy("empty", "degenerate", "empty", {})])
    assert [r["policy"] for r in report["failures"]] == ["planted-oracle"]
    rows = {r["policy"]: r for r in report["rows"]}
    assert rows["planted-oracle"]["verdict"] == "REACHES r_reference" and rows["empty"]["verdict"] == "ok"
    assert rows["planted-oracle"]["mean"] == pytest.approx(report["r_max"])


def test_a_redealable_env_chooses_each_familys_point_on_re_deals_never_on_the_benchmark(tmp_path):
    """Selection data come from re-deals 1..K only; each family's chosen point is its best mean over them
    (whatever it scores on the benchmark), and only chosen points are played on the benchmark."""
    env_id = "clbench/SpectrumMonitor-v6"
    assert env_class(env_id).redealable
    fam = "echo"
    points = [Policy(f"{fam}(min_width={w})", fam, "clbench.agents.spectrummonitor_redteam:EchoThreshold",
                     {"min_width": w}) for w in (0.0, 2.0, 30.0)]
    report = redteam.run(env_id, {"schedule": "short"}, policies=[*points, Policy("empty", "degenerate", "empty", {})],
                         k=2, out=str(tmp_path))
    assert report["redeals"] == 2 and "re-deals 1, 2" in report["rule"]
    assert {s["redeal"] for s in report["selection"]} == {1, 2}  # never redeal 0, the benchmark's own scans
    assert {s["policy"] for s in report["selection"]} == {p.name for p in points}  # not the degenerate agent
    rows = {r["policy"]: r for r in report["rows"]}
    chosen = [n for n in rows if rows[n]["chosen"]]
    assert chosen == [max((p.name for p in points), key=lambda n: rows[n]["selection_mean"])]
    assert rows[chosen[0]]["mean"] is not None and rows["empty"]["mean"] is not None
    assert all(rows[p.name]["mean"] is None and rows[p.name]["verdict"] == "not chosen on the re-deals"
               for p in points if p.name not in chosen)
    assert rows["empty"]["chosen"] is None and rows["empty"]["selection_mean"] is None
    # the re-deals keep the world (the same plan) and deal other scans
    from clbench.runner import cached_env

    envs = [cached_env(env_id, {"schedule": "short", "redeal": d}).unwrapped for d in (0, 1, 2)]
    assert all(e.channels == envs[0].channels for e in envs)
    peaks = [[i.payload.peaks for v in e.schedule.variants for i in v.instances] for e in envs]
    assert peaks[0] != peaks[1] != peaks[2] != peaks[0]
    assert (tmp_path / "select" / "redeal-1").is_dir() and not (tmp_path / "select" / "redeal-0").exists()
    assert "| policy | family | params | selection mean (re-deals) | benchmark mean |" in redteam.format_table(report)


def test_an_env_without_re_deals_plays_every_point_on_the_benchmark():
    quick = ["clbench/MemoryProbe-v2", *clbench_env_ids()]  # a quick one first
    env_id = next(e for e in quick if not env_class(e).redealable and env_class(e).task not in SLOW_TASKS)
    with pytest.raises((TypeError, ValueError)):  # no `redeal` argument, or "cannot re-deal"
        __import__("gymnasium").make(env_id, redeal=1)
    fam = "planted"
    report = redteam.run(env_id, policies=[Policy(f"{fam}-a", fam, "empty", {}), Policy(f"{fam}-b", fam, "oracle", {})])
    assert report["redeals"] == 0 and report["selection"] == [] and report["rule"] == "every point played on the benchmark"
    assert all(r["mean"] is not None and r["chosen"] is None for r in report["rows"])
    assert [r["policy"] for r in report["failures"]] == [f"{fam}-b"]


def test_selection_deals_skip_the_deal_under_test():
    assert redteam.selection_deals({}, 3) == [1, 2, 3]
    assert redteam.selection_deals({"redeal": 2}, 3) == [1, 3, 4]
    assert redteam.redeals() >= 1 and redteam.redeals(full=True) > redteam.redeals()
    assert redteam.confirm_deals({}, 2, 3) == [3, 4, 5]  # never one a point was chosen on
    assert redteam.confirm_deals({"redeal": 4}, 2, 3) == [3, 5, 6]


def test_a_point_that_reaches_the_reference_by_the_benchmarks_luck_is_confirmed_on_other_re_deals(red_team_reports):
    """Poker's likelihood reader at another threshold than the reference's plays as the stateless reference but
    where one hand's betting reads otherwise (a few hands in a hundred): it reaches r_reference on the benchmark's
    cards (v8: 4.266 vs 4.154 bb/hand) and falls below the reference on other re-deals (-0.10 on re-deals 1-8 by
    the betting model), so the table
    names it the benchmark's luck and the env passes. The reference's own play, planted as a family point, ties
    r_reference on the benchmark and on the other re-deals alike: a tie is never luck, and fails."""
    report, out = red_team_reports(POKER)["report"], red_team_reports(POKER)["out"]
    lucky, planted = POKER_PROBES
    rows = {r["policy"]: r for r in report["rows"]}
    assert rows[lucky]["chosen"] and rows[lucky]["mean"] >= report["r_reference"]
    assert rows[lucky]["luck"] and rows[lucky]["held_out_lead"] < 0
    assert "the benchmark's luck" in rows[lucky]["verdict"]
    assert rows[planted]["held_out_lead"] == pytest.approx(0, abs=1e-9) and not rows[planted]["luck"]
    assert [r["policy"] for r in report["failures"] if r["policy"] in POKER_PROBES] == [planted]
    assert sorted(p.name for p in (out / "confirm").iterdir()) == sorted(
        f"redeal-{d}" for d in redteam.confirm_deals({}, report["redeals"], redteam.confirm_count()))


def test_train_answers_replays_the_train_oracle_on_the_test_twin(tmp_path):
    env_id = "clbench/SpectrumMonitor-v6"
    actions = redteam.train_actions(env_id, {}, 1, tmp_path)
    from clbench.runner import cached_env

    ids = [s.instance_id for s in cached_env(env_id, {}).unwrapped.schedule.order(0)]
    assert set(actions) == set(ids) and all(actions[i] for i in ids)  # keyed by the test twin's id
    agent = ReplayAgent({}, actions={"x": ["a", "b"]})
    agent.begin_instance("", {"instance_id": "x"})
    assert [agent.act("", {}) for _ in range(3)] == ["a", "b", ""]


def test_feedback_memorizer_replays_the_best_sequence_of_the_variant():
    from clbench.agent import AgentCard

    card = AgentCard(env_id="clbench/SpectrumMonitor-v6", tools=[])
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
    assert "| policy | family | params | selection mean (re-deals) | benchmark mean | r_reference | r_max | verdict |" in out
    assert code == (0 if redteam.families(env_class(env_id)) else 1)


# ---------------------------------------------------------------- fresh worlds (issue 29)
SPECTRUM = "clbench/SpectrumMonitor-v6"


def test_a_fresh_world_holds_points_chosen_on_it_to_the_envs_band_and_the_rest_to_r_reference():
    """On a fresh world a family point chosen on the world's own re-deals is held to the env's band
    (FreshWorldJudge.world_band), not to r_reference: the stateless reference played as a family ties r_reference
    (a failure on the canonical world) and lies within the band; a planted oracle lies far above it and fails."""
    from clbench.agents.spectrummonitor_redteam import FRESH_WORLD_JUDGE

    assert redteam.world_band(SPECTRUM, {}) is None and redteam.world_band("clbench/DBExplore-v3", {"world_seed": 3}) \
        is None
    assert redteam.world_band(SPECTRUM, {"world_seed": 12}) == FRESH_WORLD_JUDGE.world_band > 0
    report = redteam.run(SPECTRUM, {"world_seed": 12}, policies=[Policy("planted-oracle", "planted", "oracle", {}),
                                                                  Policy("planted-reference", "echo", "reference", {})])
    rows = {r["policy"]: r for r in report["rows"]}
    assert rows["planted-reference"]["mean"] == pytest.approx(report["r_reference"])
    assert rows["planted-reference"]["within_band"] and not rows["planted-oracle"]["within_band"], rows
    assert rows["planted-reference"]["verdict"].startswith("within the fresh world's band"), rows
    assert rows["planted-oracle"]["verdict"].startswith("ABOVE the fresh world's band"), rows
    assert [r["policy"] for r in report["failures"]] == ["planted-oracle"]
    assert "a fresh world" in report["rule"]


def test_cli_pooled_verdict_prints_each_familys_train_chosen_point_and_pooled_lead(capsys):
    """`clbench redteam --pooled-worlds`: each family's point chosen on the train split, its pooled lead over the
    fresh worlds and a verdict; SpectrumMonitor's reference holds (exit 0), as tests/test_spectrummonitor.py's pooled
    test finds over more worlds."""
    code = main(["redteam", "--env", SPECTRUM, "--pooled-worlds", "1-2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{SPECTRUM}, fresh worlds 1-2: each family's point chosen on the train split's worlds" in out
    assert "| family | train-chosen point | pooled lead (mean +- se, worlds leading) | verdict |" in out
    chosen = redteam.train_choice(redteam.fresh_world_judge(SPECTRUM))
    for fam, params in chosen.items():
        line = next(ln for ln in out.splitlines() if ln.startswith(f"| {fam} |"))
        assert ", ".join(f"{k}={v}" for k, v in params.items()) in line and line.endswith("| ok |") \
            and "of 2)" in line, line
    assert "FAIL" not in out


def test_cli_pooled_verdict_fails_a_family_that_leads(monkeypatch, capsys):
    """The pooled verdict can fail: a leaky memoryless family (the oracle, which reads the world's latent plan) leads
    the stateless reference in every fresh world, and `clbench redteam --pooled-worlds` names it and exits 1."""
    from clbench.agents.spectrummonitor_redteam import SpectrumFreshWorlds

    class Leaky(SpectrumFreshWorlds):
        def families(self, full=False):
            leaky = redteam.as_family(("clbench.agents.spectrummonitor:SpectrumOracle", {}))
            return {**super().families(full), "leaky": leaky}

    monkeypatch.setattr(redteam, "fresh_world_judge", lambda env_id: Leaky())
    code = main(["redteam", "--env", SPECTRUM, "--pooled-worlds", "1,2"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "| leaky | - |" in out and "(leads in 2 of 2) | LEADS the stateless reference pooled |" in out
    assert [ln for ln in out.splitlines() if ln.startswith("FAIL")] == \
        [next(ln for ln in out.splitlines() if ln.startswith("FAIL: leaky"))]


def test_parse_worlds():
    assert redteam.parse_worlds("1-3,7") == [1, 2, 3, 7] and redteam.parse_worlds("5") == [5]
    for bad in ("", "0-2", "x"):
        with pytest.raises(ValueError):
            redteam.parse_worlds(bad)
