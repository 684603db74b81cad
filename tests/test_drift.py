"""Concept drift: `freeze_at` in the scripted references, `clbench drift-check`, and the drifts
the envs declare (real games, real databases and workspaces; short schedules)."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest

import clbench  # noqa: F401  registers the envs
from clbench.agent import make_agent
from clbench.agents.poker import LAG, STATION, Belief
from clbench.cli import build_parser
from clbench.commands.drift_check import declared_drifts, drift_report, format_report, run_drift_check
from clbench.runner import play_instance
from clbench.registry import env_id_for
from clbench.schedule import Instance, Schedule, Variant

POKER = env_id_for("poker")
DRIFTING = [env_id_for(t) for t in ("dbexplore", "poker", "salesforecast", "cohortstudies", "spectrummonitor",
                                    "memoryprobe")]


def play_states(env, agent, count: int, seed: int = 0) -> tuple[list[float], list[dict]]:
    """Play the first `count` instances of rollout `seed` stateful; rewards and the agent's state after each."""
    rewards, states = [], []
    obs, info = env.reset(seed=seed)
    for pos in range(count):
        if pos:
            obs, info = env.reset()
        out = play_instance(env, agent, obs, info, [])
        assert out["error"] is None, out["error"]
        rewards.append(out["reward"])
        states.append(copy.deepcopy(agent.state_dict()))
    return rewards, states


# ---------------------------------------------------------------- the report's arithmetic
def _records(system: str, rewards: dict[int, list[float]], schedule: Schedule, mode: str = "stateful") -> list[dict]:
    out = []
    for k, row in rewards.items():
        for slot, r in zip(schedule.order(k), row):
            out.append({"task": "toy", "system": system, "mode": mode, "rollout": k, "instance_id": slot.instance_id,
                        "position": slot.position, "variant": slot.variant, "reward": r})
    return out


def test_drift_report_pairs_by_instance_and_counts_recovery():
    schedule = Schedule("toy", [Variant(v, tuple(Instance(f"{v}-{i}", v) for i in range(4))) for v in ("a", "b")])
    unfrozen = {0: [1, 1, 1, 1, 0, 0.5, 1, 1], 1: [1, 1, 1, 1, 0, 1, 1, 1]}
    frozen = {0: [1, 1, 1, 1, 0, 0, 0, 0], 1: [1, 1, 1, 1, 0, 0, 0.5, 0]}
    records = (_records("reference", unfrozen, schedule) + _records("reference@freeze4", frozen, schedule)
               + [dict(r, mode="stateless", rollout=0) for r in _records("reference", {0: [0.5] * 8}, schedule)])
    rep = drift_report(records, "toy", 1.0, 0.5, schedule, [{"variant": "b", "change": "x"}], window=2)
    (d,) = rep["drifts"]
    assert d["position"] == 4 and d["cost"]["n"] == 8
    # pairs: (0, .5, 1, 1) - (0, 0, 0, 0) and (0, 1, 1, 1) - (0, 0, .5, 0)
    assert d["cost"]["mean"] == pytest.approx((2.5 + 2.5) / 8)
    assert d["cost"]["ci"][0] > 0 and d["goal_met"]  # goal: 0.1 x (1.0 - 0.5)
    # level before: 1.0; means after: 0, .75, 1, 1 -> windows of 2 get back to 1.0 after 2 instances
    assert d["reward_before"] == 1.0 and d["recovery_instances"] == 2
    assert rep["normalized_gain"]["mean"] == pytest.approx((np.mean(unfrozen[0] + unfrozen[1]) - 0.5) / 0.5)
    assert "| b | 4 |" in format_report(dict(rep, env_id="toy", rollouts=2))


def test_drift_report_splits_the_cost_by_score_parts():
    """Each part's cost is its share of points after the drift, unfrozen minus frozen, with the
    drift's bootstrap replicates; parts absent after the drift are undefined, with the reason."""
    schedule = Schedule("toy", [Variant(v, tuple(Instance(f"{v}-{i}", v) for i in range(2))) for v in ("a", "b")])

    def with_details(records, tallies):  # tallies per position: {part: (points, out of)}
        return [dict(r, details={"tallies": tallies[r["position"]]}) for r in records]

    def parts(details):
        return {name: tuple(t) for name, t in (details or {}).get("tallies", {}).items()}

    live = [{}, {}, {"old": (2, 2), "new": (1, 1)}, {"old": (1, 2), "new": (1, 1)}]
    stuck = [{}, {}, {"old": (0, 2), "new": (1, 1)}, {"old": (0, 2), "new": (0, 1)}]
    records = (with_details(_records("reference", {0: [1, 1, 1, 0.6]}, schedule), live)
               + with_details(_records("reference@freeze2", {0: [1, 1, 0.3, 0]}, schedule), stuck)
               + [dict(r, mode="stateless", rollout=0) for r in _records("reference", {0: [0.5] * 4}, schedule)])
    rep = drift_report(records, "toy", 1.0, 0.5, schedule, [{"variant": "b"}], parts=parts)
    old, new = rep["drifts"][0]["parts"]["old"], rep["drifts"][0]["parts"]["new"]
    assert old["cost"]["mean"] == pytest.approx(3 / 4 - 0) and old["out_of"] == 4
    assert new["cost"]["mean"] == pytest.approx(1 - 1 / 2) and new["after_frozen"] == pytest.approx(0.5)
    assert old["cost"]["ci"][0] <= old["cost"]["mean"] <= old["cost"]["ci"][1]
    assert "| old | 4 | 0.750 | 0.000 |" in format_report(dict(rep, env_id="toy", rollouts=1))
    absent = drift_report(records, "toy", 1.0, 0.5, schedule, [{"variant": "b"}], parts=lambda d: {"gone": (0, 0)})
    assert absent["drifts"][0]["parts"]["gone"]["cost"]["undefined"]
    # an env whose score has no parts reports none
    plain = drift_report(records, "toy", 1.0, 0.5, schedule, [{"variant": "b"}], parts=lambda d: {})
    assert plain["drifts"][0]["parts"] == {}


def test_drift_check_is_a_command():
    args = build_parser().parse_args(["drift-check", "--env", POKER, "--at", "3-Mara", "--rollouts", "2"])
    assert args.func.__name__ == "cmd_drift_check" and args.at == ["3-Mara"] and args.rollouts == 2


# ---------------------------------------------------------------- declared drifts
@pytest.mark.parametrize("env_id", DRIFTING)
def test_declared_drifts_are_variant_boundaries_described_in_the_card(env_id):
    env = gym.make(env_id)
    drifts = declared_drifts(env)
    starts = env.unwrapped.schedule.variant_starts()
    card = {v["name"]: v["description"] for v in env.unwrapped.spec_card.variants}
    assert drifts and all(starts[d["variant"]] > 0 and d["change"] and card[d["variant"]] for d in drifts)


def test_drift_check_rejects_unknown_or_first_variants():
    with pytest.raises(ValueError, match="unknown variant"):
        run_drift_check(POKER, at=["9-Nobody"])
    with pytest.raises(ValueError, match="first variant"):
        run_drift_check(POKER, at=["1-Mara"])


# ---------------------------------------------------------------- poker

def test_adapted_mara_makes_the_old_exploit_lose():
    """On the default schedule's hands after the drift, the station exploit learned in variant 1 loses to the
    adapted Mara what her new exploit wins: the drift's worth, in expectation. The ten hands of one deal
    cannot show it (one hand's result has a standard deviation of ~20 bb): 400 deals of them, played on the
    betting model (the library's rules; tests/test_poker.py checks they agree), give the gap +1.55 +- 0.31
    bb/hand on Poker-v5."""
    from clbench.agents.poker import PLAYBOOKS
    from clbench.agents.poker_redteam import replay
    from clbench.metrics import estimate

    env = gym.make(POKER)
    base = env.unwrapped
    hands = [s for s in base.schedule.order(0) if s.variant == "3-Mara"]
    assert {s.instance.payload.policy for s in hands} == {"Mara-changed"}
    assert {s.instance.payload.opponent for s in hands} == {"Mara"}
    rewards = {style: [] for style in (STATION, LAG)}
    for deal in range(5, 405):  # re-deals: the same hands and seats, other cards
        for style, out in rewards.items():
            out += [r for iid, r in sorted(replay(base, PLAYBOOKS[style], deal).items()) if iid.startswith("3-Mara-")]
    station, lag = np.asarray(rewards[STATION]), np.asarray(rewards[LAG])
    assert len(station) == 400 * len(hands)
    assert station.mean() < 0 < lag.mean()
    gap = estimate(lag - station)
    assert gap["ci"][0] > 0 and gap["mean"] >= 0.1 * (base.r_max - base.r_reference), gap


def test_poker_freeze_at_keeps_the_station_model_and_unfrozen_starts_over():
    env = gym.make(POKER, schedule="drift_short")
    (drift,) = declared_drifts(env)
    p = env.unwrapped.schedule.variant_starts()[drift["variant"]]
    r_frozen, frozen = play_states(env, make_agent("reference", env, freeze_at=p), 14)
    r_live, live = play_states(env, make_agent("reference", env), 14)
    assert r_frozen[:p] == r_live[:p] and frozen[p - 1] == live[p - 1]  # nothing changes before K
    assert all(s == frozen[p - 1] for s in frozen[p:])
    assert Belief(frozen[-1]["beliefs"]["Mara"]).likeliest() == STATION
    # the adapted Mara's moves moved the live reference's belief off the station
    assert Belief(live[-1]["beliefs"]["Mara"]).likeliest() != STATION


def test_drift_check_runs_the_pipeline_on_the_short_poker_drift(tmp_path, monkeypatch):
    from clbench.calibration import store_baselines
    from clbench.commands.calibrate import stateless_means

    monkeypatch.setenv("CLBENCH_CACHE", str(tmp_path))  # the schedule's own baselines, not the default's
    means = stateless_means(POKER, ["oracle", "reference"], {"schedule": "drift_short"})
    store_baselines(gym.make(POKER, schedule="drift_short").unwrapped,
                    {"r_max": means["oracle"], "r_reference": means["reference"]})
    rep = run_drift_check(POKER, {"schedule": "drift_short"}, rollouts=2)
    (d,) = rep["drifts"]
    assert d["variant"] == "2-Mara" and d["position"] == 8 and d["cost"]["n"] == 2 * 6
    assert rep["normalized_gain"]["mean"] is not None and rep["goal_cost"] == pytest.approx(
        0.1 * (rep["r_max"] - rep["r_reference"]))
    # both references were scored after the change (whether the frozen one loses: test_poker's re-read test)
    assert d["reward_after_frozen"] is not None and d["cost"]["mean"] == pytest.approx(
        d["reward_after_unfrozen"] - d["reward_after_frozen"])


# ---------------------------------------------------------------- freeze_at elsewhere
def test_cohort_recoding_misleads_the_frozen_reference(tmp_path):
    """Short schedule, one region per study: frozen before FORGE, the reference keeps MERIDIAN's
    coding of cog_score and applies it to CADENCE's untagged column; unfrozen it took FORGE's."""
    env = gym.make("clbench/CohortStudies-v4", schedule="short", cache_dir=str(tmp_path))
    try:
        (drift,) = declared_drifts(env)
        p = env.unwrapped.schedule.variant_starts()[drift["variant"]]
        r_frozen, frozen = play_states(env, make_agent("reference", env, freeze_at=p), 5)
        r_live, live = play_states(env, make_agent("reference", env), 5)
    finally:
        env.close()
    assert frozen[p:] == [frozen[p - 1]] * (5 - p) and r_frozen[:p + 1] == r_live[:p + 1]
    assert frozen[-1]["tags"]["cog_score"] == "[standard: cognition = value]"
    assert live[-1]["tags"]["cog_score"] == "[standard: cognition = 50 - value]"
    assert r_live[-1] > r_frozen[-1]  # CADENCE: the old mapping selects the wrong patients


def test_dbexplore_freeze_at_starts_every_question_from_what_it_knew(tmp_path):
    env = gym.make("clbench/DBExplore-v3", scale=0.02, cache_dir=str(tmp_path))
    try:
        _, frozen = play_states(env, make_agent("reference", env, freeze_at=1), 3)
        _, live = play_states(env, make_agent("reference", env), 3)
    finally:
        env.close()
    assert frozen[1]["knowledge"] == frozen[0]["knowledge"] == frozen[2]["knowledge"]
    assert live[2]["knowledge"] != live[0]["knowledge"]  # unfrozen it keeps learning


def test_salesforecast_freeze_at_leaves_the_panel_as_it_was():
    from clbench.envs.salesforecast.workspace import host_python_runtime
    from clbench.sandbox import SandboxUnavailable, choose_backend

    try:
        choose_backend("auto", host_python_runtime())
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox backend: {exc}")
    env = gym.make("clbench/SalesForecast-v6", schedule="short")
    try:
        play_states(env, make_agent("reference", env, freeze_at=1), 3)
        env.reset()
        lines = env.step("wc -l panel.csv")[0]
    finally:
        env.close()
    assert "15 panel.csv" in lines  # header + the 14 rows of the first instance only


def test_memoryprobe_frozen_reference_answers_superseded_values_wrong(tmp_path, monkeypatch):
    """Frozen before the heavy sessions, the reference still holds the light sessions' values:
    every question about a value superseded since is wrong, while unfrozen it answers them;
    drift-check reports that part apart from the facts stated once."""
    from clbench.diagnostics.worlds import calibrate_world

    monkeypatch.setenv("CLBENCH_CACHE", str(tmp_path))
    calibrate_world("clbench/MemoryProbe-v2", {"schedule": "short"})  # the short schedule's own baselines
    rep = run_drift_check("clbench/MemoryProbe-v2", {"schedule": "short"}, rollouts=1)
    (d,) = rep["drifts"]
    chains = d["parts"]["superseded values (version chains)"]
    assert chains["out_of"] > 0 and chains["after_unfrozen"] == 1.0 and chains["after_frozen"] == 0.0
    once = d["parts"]["stated once (plain, confusable)"]
    assert once["cost"]["mean"] < chains["cost"]["mean"]  # missing knowledge costs less than wrong knowledge
    assert "superseded values (version chains)" in format_report(rep)
