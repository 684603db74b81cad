"""SpectrumMonitor-v6: reward semantics, agents, the band re-plan (drift), feedback that gives no
answers away, the red team's memoryless families, fresh worlds, and the issues' must-show numbers. The env contract (check_env, reset modes, determinism, info keys, spec card, r_max and
r_reference) is checked for every env in tests/test_contract.py."""
from __future__ import annotations

import functools
import json
import os
import re

import gymnasium as gym
import numpy as np
import pytest

import clbench  # noqa: F401
from clbench.agent import make_agent
from clbench.envs.spectrummonitor.generator import iou
from clbench.registry import env_class
from clbench.rollout import run
from clbench.runcard import compute, validate_run_card
from clbench.runner import RunConfig, play_instance
from clbench.agents.spectrummonitor_redteam import stateless_mean
from tests.fit_scripts import fit_script

ENV = "clbench/SpectrumMonitor-v6"


def test_schedule_shape_and_latent_plan():
    env = gym.make(ENV).unwrapped
    card = env.spec_card
    assert card.instances == 90
    assert [v["instances"] for v in card.variants] == [30, 30, 30]
    assert [s.instance_id for s in env.schedule.order(3)] != [s.instance_id for s in env.schedule.order(0)]
    channels = {c["name"]: c for c in env.latent()["channels"]}
    assert sorted(n for n, c in channels.items() if c["kind"] == "wideband" and not n.endswith("r")) == \
        [f"W{i}" for i in range(1, 8)]
    low, high = env.latent()["band"]
    assert all(low <= c["center"] - c["width"] / 2 and c["center"] + c["width"] / 2 <= high for c in channels.values())
    # plan channels never overlap each other (a look-alike false alarm may)
    plan = sorted((c["center"] - c["width"] / 2, c["center"] + c["width"] / 2) for n, c in channels.items()
                  if n[0] in "WN" and not n.endswith("r"))
    assert all(a[1] <= b[0] for a, b in zip(plan, plan[1:]))
    # the re-plan: two re-tuned wideband channels, one retired, one licensee
    shift = env.world["replan"]["retune_shift_mhz"]
    retuned = [n for n in channels if n.endswith("r")]
    assert len(retuned) == 2 and [c["kind"] for c in channels.values()].count("licensee") == 1
    for n in retuned:
        assert shift[0] <= abs(channels[n]["center"] - channels[n[:-1]]["center"]) <= shift[1]
    active = env.latent()["active"]
    before = {c["name"] for i in range(1, 61) for c in active[f"scan-{i:03d}"]}
    after = {c["name"] for i in range(61, 91) for c in active[f"scan-{i:03d}"]}
    assert set(retuned) <= after and not set(retuned) & before and "L1" in after
    assert {n[:-1] for n in retuned} <= before and not {n[:-1] for n in retuned} & after
    retired = {n for n in before if n.startswith("W")} - after - {n[:-1] for n in retuned}
    assert len(retired) == 1
    # the truth is what transmits now: never the whole plan, often less than half of it
    sizes = [len(a) for a in active.values()]
    assert min(sizes) >= 1 and max(sizes) < 10 and np.mean(sizes) < 6


def test_the_agent_card_and_variants_say_nothing_about_the_drift_or_the_plan():
    env = gym.make(ENV).unwrapped
    text = json.dumps(env.agent_card) + json.dumps(env.spec_card.variants)
    assert not re.search(r"re-?plan|re-?tun|retire|licensee|change|drift", json.dumps(env.agent_card), re.I)
    assert [v["name"] for v in env.spec_card.variants] == ["week-1", "week-2", "week-3"]  # names say when, not what
    public = text + (type(env).__doc__ or "") + (__import__(type(env).__module__, fromlist=["x"]).__doc__ or "")
    leaked = [s for s in env.public_secrets() if s in public]
    assert not leaked
    # the secrets are real: every canonical plan centre is among them
    assert all(f"{c['center']:.1f}" in env.public_secrets() for c in env.latent()["channels"])


def test_observation_hides_ground_truth_and_shows_peaks():
    env = gym.make(ENV)
    obs, info = env.reset(seed=0)
    assert "Detected peaks" in obs and "W1" not in obs and "N1" not in obs
    assert set(info) == {"instance_id", "position", "variant", "variant_position", "step", "steps_left"}  # no more


def test_invalid_json_gets_one_more_try_then_scores_zero():
    env = gym.make(ENV)
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("I think there are channels near 400")
    assert "Invalid action" in obs and not term and not trunc and info["steps_left"] == 1
    obs, r, term, trunc, info = env.step('{"transmitters": [{"center_mhz": 9999, "bandwidth_mhz": 5}]}')
    assert trunc or term
    assert r == 0.0 and info["instance_reward"] == 0.0 and info["raw_metric"] == {"name": "iou", "value": 0.0}


def test_reward_is_iou_with_the_spectrum_active_in_this_scan():
    env = gym.make(ENV)
    _, info = env.reset(seed=0)
    truth = [(c["center"] - c["width"] / 2, c["center"] + c["width"] / 2)
             for c in env.unwrapped.latent()["active"][info["instance_id"]]]
    report = {"transmitters": [{"center_mhz": 352.0, "bandwidth_mhz": 15.0}, {"center_mhz": 364.0, "bandwidth_mhz": 5.0},
                               {"center_mhz": 460.0, "bandwidth_mhz": 40.0, "currently_active": False}]}
    obs, r, term, trunc, info = env.step("Here is my report:\n```json\n" + json.dumps(report) + "\n```")
    assert term and not trunc and "2 active transmitters" in obs
    assert r == pytest.approx(iou([(344.5, 359.5), (361.5, 366.5)], truth, 340, 508))  # the inactive one is not scored
    assert 0.0 < r < 1.0


def test_answers_that_ignore_the_scan_score_below_the_reference():
    """v0 scored the whole band ~0.8; against the spectrum active in each scan it cannot win."""
    env = gym.make(ENV)
    u = env.unwrapped
    plan = [{"center_mhz": c["center"], "bandwidth_mhz": c["width"]} for c in u.latent()["channels"]]
    for answer in ([{"center_mhz": 424.0, "bandwidth_mhz": 168.0}], plan):
        rewards = []
        for slot in u.schedule.order(0):
            env.reset(seed=0, options={"instance": slot.instance_id, "stateless": True})
            rewards.append(env.step(json.dumps({"transmitters": answer}))[1])
        # v5: the whole (true) plan 0.376 vs 0.535 (v4: 0.376 vs 0.549; the plan's score does not depend on the
        # width noise v5 raised, the reference's does)
        assert np.mean(rewards) < 0.75 * u.r_reference


def test_iou_geometry():
    assert iou([(0, 10)], [(0, 10)], 0, 100) == pytest.approx(1.0)
    assert iou([(0, 10)], [(5, 15)], 0, 100) == pytest.approx(5 / 15)
    assert iou([(0, 5), (4, 10)], [(0, 10)], 0, 100) == pytest.approx(1.0)  # overlapping reports merge
    assert iou([], [(0, 10)], 0, 100) == 0.0


def test_the_oracle_is_exact_and_the_stateless_reference_has_headroom():
    """IoU 1 is reachable (test_contract: the oracle attains r_max); the stateless reference stays far below."""
    env = gym.make(ENV).unwrapped
    assert env.r_max == 1.0 and env.r_reference < 0.7 * env.r_max


def _stateful(env, seed: int, **agent_kwargs) -> dict[str, tuple[int, float]]:
    """instance_id -> (position, reward) of one stateful reference rollout."""
    agent = make_agent("reference", env, seed=seed, **agent_kwargs)
    obs, info = env.reset(seed=seed)
    out = {}
    for pos in range(len(env.unwrapped.schedule)):
        if pos:
            obs, info = env.reset()
        out[info["instance_id"]] = (pos, play_instance(env, agent, obs, info, [])["reward"])
    return out


def test_band_replan_costs_a_frozen_reference_and_the_unfrozen_one_recovers():
    """issue 15: the reference frozen just before the re-plan (position 60) loses reward after it by at least
    0.1 x (r_max - r_reference), with a paired bootstrap CI above 0; frozen from the start it never learns."""
    env = gym.make(ENV)
    u = env.unwrapped
    diffs = []
    for seed in range(5):
        live, frozen = _stateful(env, seed), _stateful(env, seed, freeze_at=60)
        assert all(frozen[i] == live[i] for i in live if live[i][0] < 60)  # identical until the freeze
        diffs.append([live[i][1] - frozen[i][1] for i in live if live[i][0] >= 60])
    diffs = np.array(diffs)  # rollouts x instances after the drift
    rng = np.random.default_rng(0)
    boot = [diffs[rng.integers(0, 5, 5)][:, rng.integers(0, diffs.shape[1], diffs.shape[1])].mean()
            for _ in range(2000)]
    assert diffs.mean() >= 0.1 * (u.r_max - u.r_reference)
    assert np.percentile(boot, 2.5) > 0
    never = _stateful(env, 0, freeze_at=0)
    sl = _stateless_rewards(env)
    assert all(never[i][1] == pytest.approx(sl[i]) for i in sl)


def _stateless_rewards(env) -> dict[str, float]:
    out = {}
    for slot in env.unwrapped.schedule.order(0):
        agent = make_agent("reference", env)
        obs, info = env.reset(seed=0, options={"instance": slot.instance_id, "stateless": True})
        out[slot.instance_id] = play_instance(env, agent, obs, info, [])["reward"]
    return out


def test_reference_state_round_trips():
    env = gym.make(ENV, schedule="short")
    a = make_agent("reference", env)
    obs, info = env.reset(seed=0)
    for pos in range(4):
        if pos:
            obs, info = env.reset()
        play_instance(env, a, obs, info, [])
    b = make_agent("reference", env)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    obs, info = env.reset()
    assert b.act(obs, info) == a.act(obs, info) and b.state_dict() == a.state_dict()


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
    t = card["tasks"]["spectrummonitor/reference"]
    assert t["normalized_gain"]["mean"] >= 0.2
    assert t["normalized_gain"]["ci"][0] > 0
    assert t["mean_reward_stateless"] < 0.7 * t["r_max"]
    # the learned plan pays in every variant (v6: 0.13, 0.09, 0.12 IoU); the re-plan takes part of it away at first:
    # week 3's gain in its adaptation window is below week 2's (v6: -0.04 vs +0.12), though over the whole week it
    # is not (its re-tuned channels' new widths cost the single-scan rule more than the stale plan costs the learner)
    gains = [v["mean_reward_stateful"] - v["mean_reward_stateless"] for v in t["per_variant"]]
    window = [v["window_gain"] for v in t["per_variant"]]
    assert min(gains) > 0.05 and window[2] < window[1], (gains, window)


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


def test_feedback_reveals_no_edges_only_the_score_the_reported_mhz_and_counts():
    """issue 28: v1's per-transmitter overlap MHz recovered channel edges to 0.01 MHz. The feedback now
    depends on the truth only through the score and two counts: reports that differ in where they
    cross a channel's edge but touch the same channels get the same text apart from the score."""
    env = gym.make(ENV)
    _, info = env.reset(seed=0)
    (ch, *_) = env.unwrapped.latent()["active"][info["instance_id"]]
    texts = []
    for shift in (0.0, 0.37, 1.11):  # one band across the channel's lower edge, moved a little
        env.reset(seed=0, options={"instance": info["instance_id"]})
        edge = ch["center"] - ch["width"] / 2
        obs, r, *_ = env.step(json.dumps({"transmitters": [{"center_mhz": edge + shift, "bandwidth_mhz": 4.0}]}))
        texts.append(obs.replace(f"{r:.4f}", "<score>"))
        assert "overlapped a transmitting channel" in obs and "1 of 1" in obs
        numbers = set(re.findall(r"\d+\.\d+", obs))
        assert numbers <= {f"{r:.4f}", "4.00", "1.0"}, numbers  # the score, the MHz reported, the scale
    assert texts[0] == texts[1] == texts[2]


def family_points(env_id: str, slow: bool = False):
    """(family, class path, params) for every point of every declared policy family's grid (the full grid
    when `slow` or CLBENCH_SLOW=1), as the red team (clbench.redteam) searches them."""
    from clbench import redteam

    return redteam.family_points(env_id, full=slow or os.environ.get("CLBENCH_SLOW") == "1")


def world_numbers(env_id: str, world_seed, rollouts: int = 2, drift_at: int = 60, red_team=None) -> dict:
    """One world's difficulty: r_max (oracle), r_reference (stateless reference), the reference's normalized
    gain (stateful mean over `rollouts` vs stateless), the drift cost (unfrozen minus frozen-at-`drift_at`
    reward after the drift, stateful) and the best red-team point (stateless): `red_team(env)` ->
    (mean, policy), by default every point of every family played."""
    env = gym.make(env_id, world_seed=world_seed)
    try:
        r_max, r_ref = stateless_mean(env, "oracle"), stateless_mean(env, "reference")
        live, frozen = [], []
        for seed in range(rollouts):
            a, b = _stateful(env, seed), _stateful(env, seed, freeze_at=drift_at)
            live += [r for _, r in a.values()]
            frozen += [a[i][1] - b[i][1] for i in a if a[i][0] >= drift_at]
        best = (red_team or play_red_team)(env)
        return {"world": world_seed, "r_max": r_max, "r_reference": r_ref,
                "normalized_gain": (np.mean(live) - r_ref) / (r_max - r_ref), "drift_cost": float(np.mean(frozen)),
                "red_team_best": best[0], "red_team_policy": best[1]}
    finally:
        env.close()


def play_red_team(env) -> tuple[float, str]:
    """The red team's best (benchmark mean, policy) on `env`'s world (clbench.redteam.run: each family's point
    chosen on re-deals of the world, then played on the benchmark's scans)."""
    from clbench import redteam

    u = env.unwrapped
    report = redteam.run(u.env_id, {} if u.world_seed is None else {"world_seed": u.world_seed}, workers=2)
    best = max((r for r in report["rows"] if r["mean"] is not None), key=lambda r: r["mean"])
    return best["mean"], best["policy"]


#: families whose points are small perturbations of the reference's own report: the best of them on the benchmark is
#: a pick of the benchmark's noise (v6: shrunk-reference at width 0.97 and narrow snap 0.5, +0.00002 IoU), so they are
#: judged by the red team's rule (chosen on re-deals: test_redteam's generic test) and pooled over fresh worlds
PERTURBATIONS = {"shrunk-reference"}


def test_no_memoryless_family_reaches_the_reference():
    """issue 28: every point of every declared single-scan family, played stateless, stays below r_reference (but
    PERTURBATIONS, whose point chosen on re-deals must stay below it: tests/test_redteam.py)."""
    env = gym.make(ENV)
    r_ref = env.unwrapped.r_reference
    assert r_ref == pytest.approx(stateless_mean(env, "reference"))
    means = {f"{fam} {kw}": stateless_mean(env, path, **kw) for fam, path, kw in family_points(ENV)
             if fam not in PERTURBATIONS}
    # schedule-echo reads the scan number, plan-echo the geometry, band-grid the slots the band edges pin (rt8);
    # learned-filter is judged across fresh worlds (its docstring)
    assert len({k.split()[0] for k in means}) == 8
    best = max(means, key=means.get)
    assert means[best] < r_ref, (best, means[best], r_ref)


#: every fresh world by default a few (CLBENCH_SLOW=1: 1-20). v4's red team tied the reference in worlds 3 and 12
#: (its single-scan rule was no better than echoing every non-spike peak inside the band); v5's pooled a scan's
#: widths; v6 places false alarms like channels, closing red team rt8's `band-grid`
WORLDS = range(1, 21) if os.environ.get("CLBENCH_SLOW") else (12,)


@pytest.mark.parametrize("world_seed", WORLDS)
def test_fresh_worlds_keep_the_difficulty(world_seed):
    """issue 29: a fresh world draws another plan and re-plan (no channel in common with the canonical one)
    and keeps the canonical world's difficulty within a band: headroom, learnable (normalized gain at least half
    the canonical world's 0.25), the drift costs a frozen reference (v6, worlds 1-20: see WORLD_BANDS)."""
    def plan(env):
        return sorted(c["center"] for c in env.latent()["channels"] if c["name"][0] == "W" and not c["name"].endswith("r"))

    canon, fresh = plan(gym.make(ENV).unwrapped), plan(gym.make(ENV, world_seed=world_seed).unwrapped)
    # another plan, not the canonical one moved: its own gaps (a centre may coincide by chance where the bands overlap)
    assert max(abs(a - b) for a, b in zip(np.diff(canon), np.diff(fresh))) > 1.0
    assert len({round(c) for c in canon} & {round(c) for c in fresh}) <= 2
    n = numbers(world_seed)
    assert n["r_max"] == 1.0 and 0.45 <= n["r_reference"] <= 0.7
    assert n["normalized_gain"] >= 0.12
    assert n["drift_cost"] >= 0.1 * (n["r_max"] - n["r_reference"])


@functools.lru_cache(maxsize=None)
def numbers(world_seed: int) -> dict:
    return world_numbers(ENV, world_seed, rollouts=1)


#: how far a point chosen on a fresh world's own re-deals may come above its stateless reference (IoU)
WORLD_RED_BAND = 0.01


@pytest.mark.parametrize("world_seed", WORLDS)
def test_red_team_points_chosen_on_a_worlds_re_deals_stay_within_a_band_of_the_reference(world_seed):
    """The red team's rule on a fresh world (each family's point chosen on re-deals of the world, played on its
    benchmark) stays within WORLD_RED_BAND of the stateless reference, as on the canonical world (which it may not
    reach at all: test_no_memoryless_family_reaches_the_reference, `clbench redteam`). A point chosen on the world's
    own re-deals has seen that world: which of the plan's slots its channels hold, which no memoryless policy
    meeting it has. So it may come slightly above the reference by that, and the test that no memoryless policy
    beats the reference across worlds is the next one. v5: rt8's `band-grid` led in 20 of 20 worlds by +0.037."""
    n = numbers(world_seed)
    assert n["red_team_best"] - n["r_reference"] < WORLD_RED_BAND, n


#: the fresh worlds the pooled verdict plays (the train worlds each point is chosen on: SpectrumFreshWorlds.choose_on)
POOLED_WORLDS = range(1, 6) if not os.environ.get("CLBENCH_SLOW") else range(1, 21)


def test_no_memoryless_policy_beats_the_reference_across_fresh_worlds():
    """The reference is as strong as any memoryless policy written without the world: each family's point, chosen
    on the train split's worlds (`SpectrumFreshWorlds.choose_on`, never a test world) and then frozen, does not lead
    the stateless reference over the fresh worlds POOLED_WORLDS by two standard errors (across worlds) of its mean
    lead (`clbench.redteam.pooled_verdict`, as `clbench redteam --pooled-worlds`). The learned filter may read where
    each peak lies: position carries nothing that holds from world to world."""
    from clbench import redteam

    report = redteam.pooled_verdict(ENV, POOLED_WORLDS, full=bool(os.environ.get("CLBENCH_SLOW")))
    assert {r["family"] for r in report["rows"]} == {*redteam.families(env_class(ENV)), "learned-filter"}
    assert not report["failures"], redteam.format_pooled(report)


def test_train_and_fresh_worlds_differ_from_the_canonical_one():
    plans = [tuple(sorted(round(c["center"], 1) for c in gym.make(ENV, **kw).unwrapped.latent()["channels"]))
             for kw in ({}, {"split": "train"}, {"world_seed": 1}, {"world_seed": 2}, {"split": "train", "world_seed": 1})]
    assert len(set(plans)) == len(plans)
    again = gym.make(ENV, world_seed=1).unwrapped.latent()
    assert again == gym.make(ENV, world_seed=1).unwrapped.latent()  # a world seed names one world


def test_drawn_worlds_keep_every_channel_inside_the_band_with_a_margin_at_both_ends():
    """v3: a drawn band ends as close to its last channel as it starts to its first (v2 left ~20 MHz empty at the
    top, where a single scan could call every peak a false alarm), and the re-plan keeps channels inside it."""
    for kw in [*({"world_seed": s} for s in range(1, 21)), {"split": "train"}]:
        env = gym.make(ENV, **kw).unwrapped
        edges = sorted(c.interval for c in env.channels)
        assert all(env.low <= a and b <= env.high for a, b in edges), kw
        plan = sorted(c.interval for c in env.channels if c.name[0] in "WN" and not c.name.endswith("r"))
        lo, hi = plan[0][0] - env.low, env.high - plan[-1][1]
        assert 1.0 <= lo <= 8.0 and 1.0 <= hi <= 8.0, (kw, lo, hi)
        # v4: a narrowband channel stays inside its guard gap (v3's jitter made plan channels overlap in
        # some drawn worlds, 1, 7 and 17 among them)
        assert all(a[1] <= b[0] + 1e-3 for a, b in zip(plan, plan[1:])), kw


def test_narrowband_channels_transmit_in_every_week():
    """v3: v2's first week had no narrowband channel, so the scan number alone told a memoryless agent that
    narrow peaks were false alarms; the schedule-echo family checks what is left of that prior."""
    active = gym.make(ENV).unwrapped.latent()["active"]
    for first, last in ((1, 30), (31, 60), (61, 90)):
        kinds = {c["kind"] for i in range(first, last + 1) for c in active[f"scan-{i:03d}"]}
        assert "narrowband" in kinds and "wideband" in kinds


@pytest.mark.parametrize("world", [{}, {"world_seed": 5}, {"split": "train"}])
def test_a_re_deal_keeps_the_world_and_deals_other_scans(world):
    """v4 (redealable): the plan, the channels each week allows and the re-plan come from the plan seed
    (the spec's or world_rng's), the scans alone from draw_seed; a re-deal changes only the scans."""
    from clbench.envs.spectrummonitor.generator import plan

    envs = [gym.make(ENV, redeal=k, **world).unwrapped for k in (0, 1, 2)]
    assert type(envs[0]).redealable and [e.deal_key.split("/")[-1] for e in envs][1:] == ["redeal-1", "redeal-2"]
    plans = [plan(e.world, "default") for e in envs]
    assert plans[0] == plans[1] == plans[2] and envs[0].channels == envs[1].channels == envs[2].channels
    assert all(e.low == envs[0].low and e.high == envs[0].high for e in envs)
    scans = [[i.payload for v in e.schedule.variants for i in v.instances] for e in envs]
    assert len({tuple(s.peaks for s in ss) for ss in scans}) == 3
    assert len({tuple(tuple(c.name for c in s.active) for s in ss) for ss in scans}) == 3  # activity is noise too
    # the scan seed moves nothing latent: the plan depends on plan_seed alone
    assert plan({**envs[0].world, "seed": 99}, "default") == plans[0]
    assert plan({**envs[0].world, "plan_seed": envs[0].world["plan_seed"] + 1}, "default") != plans[0]


def test_false_alarms_per_real_peak_do_not_tell_week_1_from_week_2():
    """v4: v3's fixed false-alarm rate and a first week with half the narrowband channels made narrow peaks
    in week 1 likelier false alarms, a prior the scan number gave a memoryless agent. Look-alikes now come
    per allowed channel of each kind and week 1 has both kinds in the later weeks' proportion. (The re-plan's
    week keeps its new channels on the air, so more of its peaks are real: 0.63 vs 0.50-0.52 of narrow peaks
    here; every peak that is not a spike is worth reporting in any week, so this prior changes no best
    single-scan answer.)"""
    env = gym.make(ENV).unwrapped
    weeks = env.spec_data["schedules"]["default"]
    shares = [v["narrowband_active"] / (v["wideband_active"] + v["narrowband_active"]) for v in weeks]
    assert max(shares) - min(shares) < 0.05
    # over the canonical world and a re-deal of it, the share of narrow peaks on a transmitting channel is
    # about the same in every week (the rest are look-alikes)
    real = {}
    for k in (0, 1, 2):
        e = gym.make(ENV, redeal=k).unwrapped
        for v in e.schedule.variants:
            for inst in v.instances:
                for p in inst.payload.peaks:  # narrow, not a spike: on a transmitting channel of like width?
                    if 2.0 <= p.width < 0.55 * e.world["channels"]["wideband"]["width_mhz"]:
                        real.setdefault(v.name, []).append(any(
                            abs(p.center - c.center) <= 2.2 and 0.55 <= p.width / c.width <= 1.8 for c in inst.payload.active))
    rates = [np.mean(real[v["name"]]) for v in weeks if not v.get("replan")]
    assert len(rates) == 2 and max(rates) - min(rates) < 0.06, rates


def _fit_module():
    return fit_script("spectrummonitor")


def test_the_reference_model_reads_only_the_scan_and_is_fitted_on_train_worlds(monkeypatch):
    """The reference's weights come from train worlds only (the fit builds no test-split env), and its
    features are computed from the observation text alone."""
    from clbench.agents import spectrummonitor as sm

    fit = _fit_module()
    made = []
    real_make = gym.make
    monkeypatch.setattr(fit.gym, "make", lambda env_id, **kw: made.append(kw) or real_make(env_id, **kw))
    fit.scans(3)
    assert made == [{"split": "train", "world_seed": 3}] and None in fit.FIT_WORLDS
    assert len(sm.COEF) == len(sm.FEATURES)
    env = gym.make(ENV)
    obs, info = env.reset(seed=0)
    peaks, probs = sm.peak_probabilities(obs)
    assert peaks and all(0.0 <= p <= 1.0 for p in probs)


@pytest.mark.skipif(not os.environ.get("CLBENCH_SLOW"), reason="refits on 31 train worlds (~1-2 min); CLBENCH_SLOW=1")
def test_the_reference_weights_reproduce_from_the_train_split():
    from clbench.agents import spectrummonitor as sm

    fit = _fit_module()
    train = fit.prepared(fit.FIT_WORLDS)  # as the script does: the widths and the fit read the same scans
    assert fit.widths(sm.COEF, data=train) == (sm.WIDE_SCALE, sm.NARROW_SNAP)
    assert fit.fit(data=train) == pytest.approx(sm.COEF, abs=1e-3)


def test_the_channels_the_replan_changes_transmit_through_the_week_before_it():
    """v5: left to the on/off process, whether a stale plan knew the channels the re-plan changes (and so the
    drift cost) swung between deals of one world's scans (fresh world 18: 0.24-0.67 of the headroom over four)."""
    for kw in ({}, {"world_seed": 18}, {"world_seed": 18, "redeal": 3}):
        env = gym.make(ENV, **kw).unwrapped
        changed = {c.name[:-1] for c in env.channels if c.name.endswith("r")}
        retired = {n for n in {c["name"] for i in range(31, 61) for c in env.latent()["active"][f"scan-{i:03d}"]}
                   if n.startswith("W")} - {c["name"] for i in range(61, 91)
                                             for c in env.latent()["active"][f"scan-{i:03d}"]} - changed
        assert len(changed) == 2 and len(retired) == 1
        week2 = [{c["name"] for c in env.latent()["active"][f"scan-{i:03d}"]} for i in range(31, 61)]
        assert all(changed | retired <= names for names in week2), kw


def test_memory_pays_on_the_short_schedule():
    """v5: v4's reference needed three detections of a channel and lost to its stateless rule over the 8-scan
    `short` schedule (-0.31 in sum); confirming a channel on two detections, it gains in every rollout here
    (canonical: +0.17 to +0.37 in sum over 5 rollouts, stateless 3.89)."""
    env = gym.make(ENV, schedule="short")
    stateless = sum(_stateless_rewards(env).values())
    gains = [sum(r for _, r in _stateful(env, seed).values()) - stateless for seed in range(5)]
    assert min(gains) > 0.1, gains
