"""SpectrumMonitor-v0: env contract, reward semantics, agents and the issue's must-show numbers."""
from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import clbench  # noqa: F401
from clbench.agent import make_agent
from clbench.commands.calibrate import stateless_mean
from clbench.env import ScheduleExhausted
from clbench.envs.spectrum.generator import iou
from clbench.rollout import run
from clbench.runcard import compute, validate_run_card
from clbench.runner import RunConfig

ENV = "clbench/SpectrumMonitor-v0"


def test_check_env_and_three_ways_in():
    check_env(gym.make(ENV).unwrapped)
    assert gym.make("clbench:clbench/SpectrumMonitor-v0").unwrapped.env_id == ENV
    gym.register_envs(clbench)


def test_schedule_shape_and_latent_grid():
    env = gym.make(ENV).unwrapped
    card = env.spec_card
    assert card.instances == 90
    assert [v["instances"] for v in card.variants] == [30, 30, 30]
    channels = env.latent()["channels"]
    assert len(channels) == 13
    assert sum(c["kind"] == "wideband" for c in channels) == 7
    assert all(340 <= c["center"] - c["width"] / 2 and c["center"] + c["width"] / 2 <= 508 for c in channels)


def test_observation_hides_ground_truth_and_shows_peaks():
    env = gym.make(ENV)
    obs, info = env.reset(seed=0)
    assert "Detected peaks" in obs and "W1" not in obs and "N1" not in obs
    assert set(info) == {"instance_id", "position", "variant", "variant_position", "step", "steps_left"}
    assert env.observation_space.contains(obs)


def test_invalid_json_gets_one_more_try_then_scores_zero():
    env = gym.make(ENV)
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("I think there are channels near 352")
    assert "Invalid action" in obs and not term and not trunc and info["steps_left"] == 1
    obs, r, term, trunc, info = env.step('{"transmitters": [{"center_mhz": 9999, "bandwidth_mhz": 5}]}')
    assert trunc or term
    assert r == 0.0 and info["instance_reward"] == 0.0 and info["raw_metric"] == {"name": "iou", "value": 0.0}


def test_reward_is_iou_of_reported_bands():
    env = gym.make(ENV)
    env.reset(seed=0)
    truth = [(c["center"] - c["width"] / 2, c["center"] + c["width"] / 2) for c in env.unwrapped.latent()["channels"]]
    report = {"transmitters": [{"center_mhz": 352.0, "bandwidth_mhz": 15.0}, {"center_mhz": 364.0, "bandwidth_mhz": 5.0}]}
    obs, r, term, trunc, info = env.step("Here is my report:\n```json\n" + json.dumps(report) + "\n```")
    assert term and not trunc
    assert r == pytest.approx(iou([(344.5, 359.5), (361.5, 366.5)], truth, 340, 508))
    assert 0.05 < r < 0.2


def test_iou_geometry():
    assert iou([(0, 10)], [(0, 10)], 0, 100) == pytest.approx(1.0)
    assert iou([(0, 10)], [(5, 15)], 0, 100) == pytest.approx(5 / 15)
    assert iou([(0, 5), (4, 10)], [(0, 10)], 0, 100) == pytest.approx(1.0)  # overlapping reports merge
    assert iou([], [(0, 10)], 0, 100) == 0.0


def test_reset_semantics_and_exhaustion():
    env = gym.make(ENV, schedule="short")
    _, info = env.reset(seed=3)
    order = [info["instance_id"]]
    for _ in range(7):
        order.append(env.reset()[1]["instance_id"])
    assert sorted(order) == sorted(s.instance_id for s in env.unwrapped.schedule.order(0))
    assert order[:4] != [f"scan-{i:03d}" for i in range(1, 5)] or order[4:] != [f"scan-{i:03d}" for i in range(5, 9)]
    assert all(int(o[-3:]) <= 4 for o in order[:4])  # permuted within variants only
    with pytest.raises(ScheduleExhausted, match="cycle=True"):
        env.reset()
    cyc = gym.make(ENV, schedule="short", cycle=True)
    cyc.reset(seed=0)
    ids = [cyc.reset()[1]["instance_id"] for _ in range(8)]
    assert ids[-1] == "scan-001"
    _, info = env.reset(options={"instance": "scan-006", "stateless": True})
    assert info["instance_id"] == "scan-006" and info["variant"] == "full-grid"


def test_oracle_scores_r_max_and_reference_r_reference():
    env = gym.make(ENV).unwrapped
    assert stateless_mean(ENV, "oracle") == pytest.approx(env.r_max, abs=1e-9)
    assert stateless_mean(ENV, "reference") == pytest.approx(env.r_reference, abs=1e-9)
    assert env.r_reference < 0.8 * env.r_max


def test_random_agent_is_a_floor():
    env = gym.make(ENV)
    obs, info = env.reset(seed=0)
    agent = make_agent("random", env, seed=1)
    total = 0.0
    for _ in range(10):
        done = False
        while not done:
            obs, r, term, trunc, info = env.step(agent.act(obs, info))
            done = term or trunc
        total += r
        obs, info = env.reset()
    assert total / 10 < 0.3


def test_must_show_reference_rollout(tmp_path):
    out = tmp_path / "bsm"
    card = run(RunConfig(ENV, "reference", str(out), rollouts=5, workers=2), say=lambda m: None)
    validate_run_card(out / "run_card.json")
    t = card["tasks"]["spectrum/reference"]
    assert t["normalized_gain"]["mean"] >= 0.3
    assert t["normalized_gain"]["ci"][0] > 0
    assert t["mean_reward_stateless"] < 0.8 * t["r_max"]
    assert t["plasticity"]["mean"] + t["stability"]["mean"] == pytest.approx(t["normalized_gain"]["mean"])
    # the stateful reference improves as the grid fills in
    means = [v["mean_reward_stateful"] for v in t["per_variant"]]
    assert means == sorted(means)


def _canonical(run_dir):
    from clbench.results import load_records

    return sorted(json.dumps({k: v for k, v in r.items() if k != "wall_time"}, sort_keys=True)
                  for r in load_records(run_dir))


def test_same_seed_same_results_byte_for_byte(tmp_path):
    for name in ("a", "b"):
        run(RunConfig(ENV, "reference", str(tmp_path / name), rollouts=2, seed=7, workers=2,
                      env_kwargs={"schedule": "short"}), say=lambda m: None)
    assert _canonical(tmp_path / "a") == _canonical(tmp_path / "b")
    trajs = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a" / "trajectories").rglob("*.jsonl"))
    assert trajs and all((tmp_path / "a" / p).read_bytes() == (tmp_path / "b" / p).read_bytes() for p in trajs)
    ra, rb = compute(tmp_path / "a"), compute(tmp_path / "b")
    assert json.dumps(ra["tasks"], sort_keys=True) == json.dumps(rb["tasks"], sort_keys=True)
    # a different seed permutes differently
    run(RunConfig(ENV, "reference", str(tmp_path / "c"), rollouts=2, seed=8, workers=1,
                  env_kwargs={"schedule": "short"}), say=lambda m: None)
    assert _canonical(tmp_path / "a") != _canonical(tmp_path / "c")
