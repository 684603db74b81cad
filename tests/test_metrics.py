"""The metrics engine on hand-made records whose numbers are worked out by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

from clbench.metrics import aggregate, estimate, group_records, task_metrics

PARAMS = {"t": {"r_max": 1.0, "r_reference": 0.2}}


def rec(mode, rollout, iid, pos, variant, reward):
    return {"task": "t", "system": "s", "mode": mode, "rollout": rollout, "instance_id": iid,
            "position": pos, "variant": variant, "reward": reward}


def make(stateful_orders, stateless):
    """stateful_orders: per rollout a list of (instance_id, variant, reward) in position order."""
    records = [rec("stateless", 0, iid, i, v, r) for i, (iid, v, r) in enumerate(stateless)]
    for k, order in enumerate(stateful_orders):
        records += [rec("stateful", k, iid, p, v, r) for p, (iid, v, r) in enumerate(order)]
    return group_records(records, PARAMS)[("t", "s")]


SL = [("a", "v1", 0.0), ("b", "v1", 0.5), ("c", "v2", 0.2), ("d", "v2", 0.3)]


def test_gain_is_paired_by_instance_id_not_position():
    # rollout 1 permutes within variants: b before a, d before c
    tr = make([[("a", "v1", 0.4), ("b", "v1", 0.5), ("c", "v2", 0.6), ("d", "v2", 0.3)],
               [("b", "v1", 0.5), ("a", "v1", 0.4), ("d", "v2", 0.3), ("c", "v2", 0.6)]], SL)
    m = task_metrics(tr, n_boot=200)
    # per-instance gains a +0.4, b 0, c +0.4, d 0 in both rollouts
    assert m["cumulative_gain"]["mean"] == pytest.approx(0.8)
    assert m["curves"]["gain"]["mean"] == pytest.approx([0.2, 0.2, 0.2, 0.2])
    assert m["curves"]["gain"]["min"] == pytest.approx([0.0, 0.0, 0.0, 0.0])
    # pairing by position would have made rollout 1's first gain 0.5 - 0.0
    assert m["curves"]["gain"]["max"][0] == pytest.approx(0.4)


def test_normalized_gain_and_reward_formulas():
    tr = make([[("a", "v1", 0.4), ("b", "v1", 0.5), ("c", "v2", 0.6), ("d", "v2", 0.3)],
               [("a", "v1", 0.8), ("b", "v1", 0.9), ("c", "v2", 1.0), ("d", "v2", 0.7)]], SL)
    m = task_metrics(tr, n_boot=200)
    mean_sl = np.mean([0, 0.5, 0.2, 0.3])
    per = [np.mean([0.4, 0.5, 0.6, 0.3]), np.mean([0.8, 0.9, 1.0, 0.7])]
    assert m["mean_reward_stateless"] == pytest.approx(mean_sl)
    assert m["normalized_gain"]["mean"] == pytest.approx(np.mean([(p - mean_sl) / (1 - mean_sl) for p in per]))
    assert m["normalized_reward"]["mean"] == pytest.approx(np.mean([(p - 0.2) / 0.8 for p in per]))
    assert m["cumulative_reward"]["mean"] == pytest.approx(np.mean([1.8, 3.4]))
    assert m["cumulative_reward"]["se"] == pytest.approx(np.std([1.8, 3.4], ddof=1) / math.sqrt(2))


def test_split_sums_to_normalized_gain_per_rollout_and_in_mean():
    rng = np.random.default_rng(5)
    ids = [(f"i{n}", "v1" if n < 8 else "v2") for n in range(20)]
    sl = [(i, v, float(rng.uniform(0, 0.5))) for i, v in ids]
    orders = []
    for k in range(4):
        perm = list(rng.permutation(8)) + list(8 + rng.permutation(12))
        orders.append([(ids[j][0], ids[j][1], float(rng.uniform(0, 1))) for j in perm])
    m = task_metrics(make(orders, sl), n_boot=200)
    assert m["plasticity"]["mean"] + m["stability"]["mean"] == pytest.approx(m["normalized_gain"]["mean"])
    # window = first ceil(0.25 * 8) = 2 positions of v1 and ceil(0.25 * 12) = 3 of v2
    first = orders[0]
    slmap = {i: r for i, _, r in sl}
    g = [r - slmap[i] for i, _, r in first]
    denom = 20 * (1 - np.mean([r for *_, r in sl]))
    inside = sum(g[p] for p in (0, 1, 8, 9, 10))
    m1 = task_metrics(make(orders[:1], sl), n_boot=10)
    assert m1["plasticity"]["mean"] == pytest.approx(inside / denom)
    assert m1["stability"]["mean"] == pytest.approx((sum(g) - inside) / denom)


def test_bootstrap_ci_contains_mean_and_is_reproducible():
    e1 = estimate([0.1, 0.3, 0.2, 0.5, 0.4])
    e2 = estimate([0.1, 0.3, 0.2, 0.5, 0.4])
    assert e1 == e2
    assert e1["ci"][0] < e1["mean"] < e1["ci"][1]
    assert 0.1 <= e1["ci"][0] and e1["ci"][1] <= 0.5
    assert estimate([0.7])["ci"] == [0.7, 0.7]


def test_missing_stateless_results_are_a_clear_error():
    tr = make([[("a", "v1", 0.4), ("b", "v1", 0.5), ("c", "v2", 0.6), ("d", "v2", 0.3)]], SL[:3])
    with pytest.raises(ValueError, match="stateless results missing"):
        task_metrics(tr)


def test_aggregate_is_unweighted_mean_over_tasks():
    a = {"task": "x", "normalized_gain": {"mean": 0.2}, "normalized_reward": {"mean": 0.4},
         "plasticity": {"mean": 0.1}, "stability": {"mean": 0.1}}
    b = {"task": "y", "normalized_gain": {"mean": 0.6}, "normalized_reward": {"mean": 0.0},
         "plasticity": {"mean": 0.3}, "stability": {"mean": 0.3}}
    agg = aggregate([a, b])
    assert agg["normalized_gain"] == pytest.approx(0.4)
    assert agg["normalized_reward"] == pytest.approx(0.2)
