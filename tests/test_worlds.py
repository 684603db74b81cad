"""Worlds (issue 29): `world_seed` plumbing, per-world calibration, the canonical vs fresh-world
report, and difficulty across worlds.

The plumbing tests use a SpectrumMonitor subclass that is told its world seed (its draws are the
canonical ones; what is checked is that the runner, the calibration cache, the run card and the
report treat it as another world). The difficulty test plays every env that takes `world_seed`
on a few fresh worlds (all 20 with CLBENCH_SLOW=1) and checks each stays in the band
(clbench.commands.worlds.BAND) of the canonical world's difficulty.
"""
from __future__ import annotations

import inspect
import os

import gymnasium as gym
import pytest

import clbench  # noqa: F401  registers the envs
from clbench.commands.worlds import BAND, band_violations, parse_seeds, world_row
from clbench.envs.spectrummonitor.spectrummonitor_env import SpectrumMonitorEnv
from clbench.registry import clbench_env_ids, env_class
from clbench.rollout import run
from clbench.runner import RunConfig

TEST_ID = "clbenchtest/WorldSpectrum-v0"


class WorldSpectrum(SpectrumMonitorEnv):
    """SpectrumMonitor told a world seed (passed on when the env itself takes one)."""

    def __init__(self, world_seed=None, **kwargs):
        if "world_seed" in inspect.signature(SpectrumMonitorEnv.__init__).parameters:
            kwargs["world_seed"] = world_seed
        super().__init__(**kwargs)
        self.world_seed = world_seed


if TEST_ID not in gym.registry:
    gym.register(TEST_ID, entry_point=WorldSpectrum)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CLBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def play(out, world_seed=None, calibrate=True):
    kwargs = {"schedule": "short", **({} if world_seed is None else {"world_seed": world_seed})}
    return run(RunConfig(env_id=TEST_ID, agent="reference", out=str(out), rollouts=2, workers=1, env_kwargs=kwargs,
                         calibrate=calibrate), say=lambda m: None, quiet=True)


def test_a_fresh_world_is_calibrated_on_the_fly_and_recorded(tmp_path, cache):
    card = play(tmp_path / "w7", world_seed=7)
    [t] = card["tasks"].values()
    params = t["params"]
    assert params["world_seed"] == 7 and params["world"] == "world-7" and params["baselines"] == "calibration cache"
    cached = list(cache.rglob("*-world-7-*.json"))  # keyed also by the code's fingerprint
    assert len(cached) == 1  # r_max and r_reference of that world and schedule, never the canonical ones
    env = gym.make(TEST_ID, schedule="short", world_seed=7).unwrapped
    assert params["r_max"] == env.r_max and params["r_reference"] == env.r_reference
    assert gym.make(TEST_ID, schedule="short", world_seed=8).unwrapped.r_max is None  # another world: its own
    assert t["normalized_gain"]["mean"] is not None


def test_no_calibrate_leaves_normalized_metrics_undefined_with_the_reason(tmp_path, cache):
    card = play(tmp_path / "w8", world_seed=8, calibrate=False)
    [t] = card["tasks"].values()
    assert t["params"]["r_max"] is None and "--no-calibrate" in t["params"]["baselines_undefined"]
    for name in ("normalized_gain", "normalized_reward", "stability"):
        assert t[name]["mean"] is None and "--no-calibrate" in t[name]["undefined"]
    assert t["mean_reward"]["mean"] is not None


def test_world_comparison_puts_canonical_and_fresh_runs_side_by_side(tmp_path, cache):
    from clbench.reporting.worlds import world_comparison

    play(tmp_path / "canon")
    play(tmp_path / "w7", world_seed=7)
    table = world_comparison([tmp_path / "canon", tmp_path / "w7"], n_boot=200)
    rows = {r[2]: r for r in table.rows}
    assert set(rows) == {"canonical", "world-7"}
    assert rows["canonical"][-1] == "-" and "[" in rows["world-7"][-1]  # the gap with its interval


def test_parse_seeds():
    assert parse_seeds("1-3,7") == [1, 2, 3, 7] and parse_seeds("5") == [5]
    with pytest.raises(ValueError):
        parse_seeds("")


def test_band_flags_worlds_of_another_difficulty():
    canon = {"world": "canonical", "r_max": 1.0, "r_reference": 0.4, "gain": 0.5, "drift_share": 0.2,
             "redteam_failures": []}
    assert band_violations(dict(canon, world="world-1", gain=0.6, r_reference=0.5), canon) == []
    bad = band_violations(dict(canon, world="world-2", gain=0.1, r_reference=0.9, drift_share=0.0,
                               redteam_failures=["fixed:x"]), canon)
    assert len(bad) == 4 and any("red team" in b for b in bad)
    assert BAND["headroom_ratio"][0] < 1 < BAND["headroom_ratio"][1]


def test_band_is_judged_on_each_worlds_ci():
    """A world is in the band only when its CI is: a CI reaching across an edge cannot tell (not a pass, not a
    failure), a CI wholly outside is out; the table and the exit code say which."""
    from clbench.commands.worlds import IN, OUT, UNDECIDED, band_judgment, format_worlds

    canon = {"world": "canonical", "r_max": 1.0, "r_reference": 0.4, "gain": 0.5, "gain_ci": [0.4, 0.6],
             "drift_cost": 0.12, "drift_cost_ci": [0.1, 0.14], "drift_share": 0.2, "best_policy": None,
             "best_mean": None, "redteam_failures": []}  # bands: gain 0.25 .. 0.75, drift share 0.1 .. 0.3

    def verdicts(**changes):
        return {m: v for m, v, _ in band_judgment(dict(canon, world="world-1", **changes), canon)}

    assert verdicts() == {"gain": IN, "headroom": IN, "drift": IN}
    assert verdicts(gain=0.6, gain_ci=[0.3, 0.9])["gain"] == UNDECIDED  # the point is in, the CI is not
    assert verdicts(gain=0.9, gain_ci=[0.7, 1.1])["gain"] == UNDECIDED  # the point is out, the CI is not
    assert verdicts(gain=0.9, gain_ci=[0.8, 1.0])["gain"] == OUT
    assert verdicts(gain=0.9, gain_ci=None)["gain"] == OUT  # no CI: the point decides
    # the drift cost's CI as a share of this world's headroom (0.6): [0.03, 0.09] / 0.6 = [0.05, 0.15]
    assert verdicts(drift_share=0.1, drift_cost=0.06, drift_cost_ci=[0.03, 0.09])["drift"] == UNDECIDED
    assert verdicts(drift_share=0.5, drift_cost=0.3, drift_cost_ci=[0.24, 0.36])["drift"] == OUT
    # a noisy oracle's headroom (0.6, the canonical's too) with a standard error: (0.6 -+ 1.96 x 0.3) / 0.6
    assert verdicts(headroom_se=0.3)["headroom"] == UNDECIDED
    assert verdicts(headroom_se=0.05)["headroom"] == IN
    assert verdicts(r_reference=0.9, headroom_se=0.01, drift_share=None)["headroom"] == OUT  # 0.1 / 0.6
    wide = dict(canon, world="world-2", gain=0.6, gain_ci=[0.3, 0.9])
    assert band_violations(wide, canon) == [
        "cannot tell: reference's normalized gain 0.600 [95% CI 0.300, 0.900] vs canonical 0.500 (band 0.250 .. 0.750)"]
    text = format_worlds("x", canon, [dict(canon, world="world-1"), wide])
    assert "| world-1 |" in text and "| yes |" in text and "cannot tell: reference's" in text


def test_a_noisy_oracle_keeps_each_worlds_own_standard_error(tmp_path, cache, monkeypatch):
    """Poker's oracle score is noisy (its default.yaml has r_max_se): calibrating a fresh world keeps that
    world's own r_max_se and the paired headroom_se beside r_max, never the canonical world's, and the run
    card reports the world's; an env with an exact oracle keeps none."""
    import numpy as np

    from clbench.calibration import cached_baseline, calibrate_world
    from clbench.commands import calibrate
    from clbench.commands.worlds import headroom_se
    from clbench.registry import env_id_for
    from clbench.runcard import task_params

    seen = []  # the rewards the calibration played, instance by instance (played once: the oracle is slow)
    play = calibrate.stateless_rewards
    monkeypatch.setattr(calibrate, "stateless_rewards", lambda *a, **k: seen.append(play(*a, **k)) or seen[-1])
    poker, kwargs = env_id_for("poker"), {"schedule": "drift_short", "world_seed": 3}
    values = calibrate_world(poker, kwargs)
    [played] = seen
    oracle, diff = np.asarray(played["oracle"]), np.subtract(played["oracle"], played["reference"])
    assert oracle.size == 5 * 14 and values["r_max"] == pytest.approx(oracle.mean())  # five deals of 14 hands
    assert values["r_max_se"] == pytest.approx(oracle.std(ddof=1) / np.sqrt(oracle.size))
    assert values["headroom_se"] == pytest.approx(diff.std(ddof=1) / np.sqrt(diff.size))
    env = gym.make(poker, **kwargs).unwrapped
    canonical_se = gym.make(poker).unwrapped.r_max_se
    assert env.r_max_se == values["r_max_se"] != canonical_se and canonical_se == env.spec_data["r_max_se"]
    assert task_params(env)["r_max_se"] == values["r_max_se"]
    assert headroom_se(poker, kwargs) == values["headroom_se"] and cached_baseline(env, "headroom_se")
    spectrum = gym.make(TEST_ID, schedule="short", world_seed=7).unwrapped
    assert spectrum.r_max_se is None and "r_max_se" not in calibrate_world(TEST_ID, {"schedule": "short",
                                                                                     "world_seed": 7})


def test_fresh_worlds_are_summarized_with_a_ci_over_worlds():
    from clbench.commands.worlds import format_worlds, pooled

    rows = [{"world": f"world-{i}", "r_max": 1.0, "r_reference": 0.4, "gain": g, "gain_ci": [g - 0.1, g + 0.1],
             "drift_cost": 0.1 * i, "drift_cost_ci": [0.1 * i - 0.05, 0.1 * i + 0.05], "drift_share": 0.1,
             "best_policy": "p", "best_mean": 0.3, "redteam_failures": []} for i, g in enumerate([0.2, 0.4, 0.6], 1)]
    over = pooled(rows, "gain")
    assert over["mean"] == pytest.approx(0.4) and over["worlds"] == 3 and (over["min"], over["max"]) == (0.2, 0.6)
    assert 0.2 <= over["ci"][0] < 0.4 < over["ci"][1] <= 0.6  # a bootstrap over worlds, inside their range
    assert pooled([dict(r, gain=None) for r in rows], "gain") is None
    text = format_worlds("x", dict(rows[0], world="canonical"), rows)
    assert "0.1 [0.05, 0.15]" in text and "mean [95% CI over worlds]" in text  # per-world drift cost CI shown


def takes_world_seed(env_id: str) -> bool:
    try:
        gym.make(env_id, world_seed=1).close()
    except TypeError:
        return False
    return True


def _world_params():
    # every env's own tests check its worlds on a few seeds by default (tests/test_<task>.py); this
    # generic check plays the red team, the drift check and both modes on each world: CLBENCH_SLOW=1
    from tests.test_redteam import with_open_holes

    return [with_open_holes(e, pytest.mark.slow, *WORLD_HOLES.get(env_class(e).task, ())) for e in clbench_env_ids()]


#: holes open in fresh worlds only (the canonical red team passes): strict, so the day a fix lands shows
WORLD_HOLES = {
    # measured on v5 over worlds 1-20 (docs/poker-variance-levers.md): every world's gain and most drift costs
    # "cannot tell" at the benchmark's 600 hands; the drift cost is bimodal across worlds (a changed player
    # who turns from station to loose-aggressive, as in the canonical world, costs a frozen reference little;
    # the other way round, up to 25 bb/hand), so 4 worlds are out of the canonical world's drift band
    "poker": (pytest.mark.xfail(strict=True, reason="issue 29: Poker's per-world difficulty cannot be told at "
                                                   "the benchmark's size, and its drift cost is bimodal over worlds"),),
}


@pytest.mark.parametrize("env_id", _world_params())
def test_difficulty_holds_across_worlds(env_id):
    if not takes_world_seed(env_id):
        pytest.skip("world_seed not supported yet")
    seeds = range(1, 21) if os.environ.get("CLBENCH_SLOW") == "1" else range(1, 4)
    canonical = world_row(env_id, None, rollouts=2, workers=2)
    assert not canonical["redteam_failures"], canonical
    bad = {}
    for seed in seeds:
        row = world_row(env_id, seed, rollouts=2, workers=2)
        if band_violations(row, canonical):
            bad[row["world"]] = band_violations(row, canonical)
    assert not bad, bad
