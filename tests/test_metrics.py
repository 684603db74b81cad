"""The metrics engine on hand-made records whose numbers are worked out by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

from clbench.metrics import aggregate, estimate, group_records, task_metrics
from clbench.runcard import run_card_schema

PARAMS = {"t": {"r_max": 1.0, "r_reference": 0.2}}


def rec(mode, rollout, iid, pos, variant, reward):
    return {"task": "t", "system": "s", "mode": mode, "rollout": rollout, "instance_id": iid,
            "position": pos, "variant": variant, "reward": reward}


def make(stateful_orders, stateless, params=PARAMS, passes=None):
    """stateful_orders: per rollout a list of (instance_id, variant, reward) in position order;
    stateless: one pass as (instance_id, variant, reward), or `passes`, a list of such passes."""
    records = []
    for p, one in enumerate(passes or [stateless]):
        records += [rec("stateless", p, iid, i, v, r) for i, (iid, v, r) in enumerate(one)]
    for k, order in enumerate(stateful_orders):
        records += [rec("stateful", k, iid, p, v, r) for p, (iid, v, r) in enumerate(order)]
    return group_records(records, params)[("t", "s")]


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
    # the SE is the bootstrap's (the spread of the replicates that also give the CI)
    assert 0 < m["cumulative_reward"]["se"] and m["cumulative_reward"]["ci"][0] < 1.8 + 1e-9 < 3.4 - 1e-9 < \
        m["cumulative_reward"]["ci"][1] + 2e-9


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
    assert m["early_gain"]["mean"] + m["late_gain"]["mean"] == pytest.approx(m["normalized_gain"]["mean"])
    # window = first ceil(0.25 * 8) = 2 positions of v1 and ceil(0.25 * 12) = 3 of v2
    first = orders[0]
    slmap = {i: r for i, _, r in sl}
    g = [r - slmap[i] for i, _, r in first]
    denom = 20 * (1 - np.mean([r for *_, r in sl]))
    inside = sum(g[p] for p in (0, 1, 8, 9, 10))
    m1 = task_metrics(make(orders[:1], sl), n_boot=10)
    assert m1["early_gain"]["mean"] == pytest.approx(inside / denom)
    assert m1["late_gain"]["mean"] == pytest.approx((sum(g) - inside) / denom)
    # the paper's split (Appendix C): B = positions 0 and 8 (each variant's first instance)
    r_sl = np.mean([r for *_, r in sl])
    sf_b, sl_b = [first[p][2] for p in (0, 8)], [slmap[first[p][0]] for p in (0, 8)]
    sf_w = [r for p, (_, _, r) in enumerate(first) if p not in (0, 8)]
    sl_w = [slmap[i] for p, (i, _, _) in enumerate(first) if p not in (0, 8)]
    f_b = 2 / 20
    assert m1["boundary_share"] == pytest.approx(f_b)
    assert m1["stability"]["mean"] == pytest.approx(f_b * (np.mean(sf_b) - np.mean(sl_b)) / (1 - r_sl))
    assert m1["plasticity"]["mean"] == pytest.approx((1 - f_b) * (np.mean(sf_w) - np.mean(sl_w)) / (1 - r_sl))


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
    assert agg["normalized_gain"]["mean"] == pytest.approx(0.4)
    assert agg["normalized_reward"]["mean"] == pytest.approx(0.2)
    assert aggregate([a, b], tasks=["y"])["normalized_gain"]["mean"] == pytest.approx(0.6)


def hetero(n=40, seed=3, shift=0.1, noise=0.0, rollouts=1, passes=1):
    """Instances of very different difficulty; stateful = stateless + shift (+ noise per rollout)."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.0, 0.6, n)
    ids = [f"i{j:02d}" for j in range(n)]
    sl = [[(i, "v", float(b + noise * rng.standard_normal())) for i, b in zip(ids, base)] for _ in range(passes)]
    orders = [[(ids[j], "v", float(base[j] + shift + noise * rng.standard_normal())) for j in rng.permutation(n)]
              for _ in range(rollouts)]
    return make(orders, None, passes=sl), base


def test_intervals_resample_instances_even_for_one_deterministic_rollout():
    # one rollout, one pass: the old bootstrap over rollouts gave [m, m]
    tr, base = hetero(shift=0.0, n=60)
    m = task_metrics(tr, n_boot=4000)
    lo, hi = m["mean_reward"]["ci"]
    assert lo < m["mean_reward"]["mean"] < hi
    # the bootstrap SE of a mean over n instances: sd / sqrt(n) (plug-in, ddof=0)
    assert m["mean_reward"]["se"] == pytest.approx(np.std(base + 0.0) / math.sqrt(60), rel=0.1)


def test_gain_is_paired_so_instance_difficulty_cancels():
    # a constant gain of 0.1 on every instance: pairing by instance id makes the gain exact,
    # although rewards alone vary a lot between instances
    tr, _ = hetero(shift=0.1, rollouts=3)
    m = task_metrics(tr, n_boot=2000)
    assert m["cumulative_gain"]["mean"] == pytest.approx(4.0)
    assert m["cumulative_gain"]["ci"] == pytest.approx([4.0, 4.0])
    assert m["mean_reward"]["ci"][1] - m["mean_reward"]["ci"][0] > 0.05


def test_rollout_noise_counts_in_the_interval():
    # same instances, no instance heterogeneity in the gain, but rollouts differ by a level
    ids = [(f"i{j}", "v", 0.2) for j in range(10)]
    orders = [[(i, v, 0.2 + level) for i, v, _ in ids] for level in (0.0, 0.1, 0.2, 0.3, 0.4)]
    m = task_metrics(make(orders, ids), n_boot=4000)
    levels = np.array([0.0, 0.1, 0.2, 0.3, 0.4]) * 10
    assert m["cumulative_gain"]["mean"] == pytest.approx(2.0)
    assert m["cumulative_gain"]["se"] == pytest.approx(np.std(levels) / math.sqrt(5), rel=0.1)


def test_stateless_passes_are_averaged_per_instance_and_resampled():
    sl_passes = [[("a", "v", 0.0), ("b", "v", 0.4)], [("a", "v", 0.2), ("b", "v", 0.6)]]
    tr = make([[("a", "v", 0.5), ("b", "v", 0.5)]], None, passes=sl_passes)
    m = task_metrics(tr, n_boot=2000)
    assert m["stateless_passes"] == 2
    assert m["mean_reward_stateless"] == pytest.approx(0.3)
    assert m["cumulative_gain"]["mean"] == pytest.approx(1.0 - 0.6)
    assert m["normalized_gain"]["mean"] == pytest.approx((0.5 - 0.3) / (1 - 0.3))
    # pass-to-pass noise shows: a replicate drawing pass 1 twice has stateless mean 0.4
    assert m["mean_reward"]["ci"] == pytest.approx([0.5, 0.5])
    assert m["cumulative_gain"]["ci"][0] < 0.4 < m["cumulative_gain"]["ci"][1]


def test_rollouts_and_passes_of_the_same_deal_are_resampled_together():
    """An env that deals each rollout seed its own instances (Poker, `deals` in the task's params): rollout k
    and stateless pass k (the same seed) played the same cards, so the bootstrap draws them as one unit and a
    deal's luck, shared by both sides, cancels; without `deals` (or with seeds that do not match) the two
    sides are drawn apart and that luck widens the gain's interval."""
    ids = [f"i{j}" for j in range(12)]
    luck = [0.0, 0.5, -0.3, 0.8, -0.6]  # per deal, on both sides alike; the gain is 0.1 on every instance

    def records(seed_of_pass=lambda k: k):
        out = []
        for k, level in enumerate(luck):
            out += [dict(rec("stateful", k, i, j, "v", 0.3 + level + 0.1), seed=k) for j, i in enumerate(ids)]
            out += [dict(rec("stateless", k, i, j, "v", 0.3 + level), seed=seed_of_pass(k)) for j, i in enumerate(ids)]
        return out

    dealt = {"t": {**PARAMS["t"], "r_max": 5.0, "deals": 5}}
    paired = task_metrics(group_records(records(), dealt)[("t", "s")], n_boot=2000)
    assert paired["cumulative_gain"]["ci"] == pytest.approx([1.2, 1.2])
    assert paired["bootstrap"]["resampled"][1] == "rollouts with the stateless pass of their deal (paired by seed)"
    assert paired["curves"]["gain"]["lo"] == pytest.approx(paired["curves"]["gain"]["hi"])
    for tr in (group_records(records(), PARAMS)[("t", "s")],
               group_records(records(lambda k: (k + 1) % 5), dealt)[("t", "s")]):
        apart = task_metrics(tr, n_boot=2000)
        assert apart["cumulative_gain"]["mean"] == pytest.approx(1.2)
        lo, hi = apart["cumulative_gain"]["ci"]
        assert hi - lo > 3  # the deals' luck (SD 0.5 per instance, 12 instances) on each side apart


@pytest.mark.parametrize("r_max", [0.25, 0.25 + 1e-15, 0.2])
def test_normalized_gain_is_undefined_without_headroom(r_max):
    sl = [("a", "v", 0.2), ("b", "v", 0.3)]  # mean 0.25, the oracle's own score
    params = {"t": {"r_max": r_max, "r_reference": 0.0}}
    m = task_metrics(make([[("a", "v", 0.25), ("b", "v", 0.3)]], sl, params=params), n_boot=200)
    for name in ("normalized_gain", "plasticity", "stability", "early_gain", "late_gain"):
        assert m[name]["mean"] is None and m[name]["ci"] == [None, None]
        assert "at or above r_max" in m[name]["undefined"]
    assert m["normalized_reward"]["mean"] == pytest.approx(0.275 / r_max)
    assert m["cumulative_gain"]["mean"] == pytest.approx(0.05)
    agg = aggregate([m])
    assert agg["normalized_gain"]["mean"] is None and "undefined on t" in agg["normalized_gain"]["undefined"]
    import jsonschema
    jsonschema.validate(m["normalized_gain"], run_card_schema()["$defs"]["estimate"])


def test_split_holds_exactly_with_several_passes_and_rollouts():
    tr, _ = hetero(shift=0.05, noise=0.1, rollouts=4, passes=3, n=24)
    m = task_metrics(tr, n_boot=500)
    assert m["plasticity"]["mean"] + m["stability"]["mean"] == m["normalized_gain"]["mean"]
    assert m["early_gain"]["mean"] + m["late_gain"]["mean"] == m["normalized_gain"]["mean"]
    # early gain from the records by hand: the gain in the first ceil(0.25 * 24) = 6 positions of
    # each rollout (one variant), over all (rollout, instance) pairs and the headroom
    sl = {iid: np.mean([p[iid]["reward"] for p in tr.stateless.values()]) for iid in tr.stateless[0]}
    mean_sl = np.mean(list(sl.values()))
    pairs = [(x["position"], x["reward"] - sl[x["instance_id"]]) for recs in tr.stateful.values() for x in recs]
    early = sum(g for pos, g in pairs if pos < 6)
    assert m["early_gain"]["mean"] == pytest.approx(early / (len(pairs) * (tr.r_max - mean_sl)))
    assert m["late_gain"]["mean"] == pytest.approx(sum(g for pos, g in pairs if pos >= 6)
                                                   / (len(pairs) * (tr.r_max - mean_sl)))
    # stability: position 0 of each rollout (one variant); the rest is plasticity
    assert m["stability"]["mean"] == pytest.approx(sum(g for pos, g in pairs if pos == 0)
                                                   / (len(pairs) * (tr.r_max - mean_sl)))
    assert m["stability"]["ci"][0] <= m["stability"]["mean"] <= m["stability"]["ci"][1]


def test_noisy_r_max_gets_its_own_interval_and_widens_normalized_ones():
    tr, _ = hetero(shift=0.1, noise=0.05, rollouts=3)
    exact = task_metrics(tr, n_boot=3000)
    tr.r_max_se = 0.1
    noisy = task_metrics(tr, n_boot=3000)
    assert noisy["r_max_estimate"]["ci"] == pytest.approx([1 - 0.196, 1 + 0.196])
    assert "r_max" in noisy["bootstrap"]["resampled"] and "r_max_estimate" not in exact
    width = {k: m["normalized_gain"]["ci"][1] - m["normalized_gain"]["ci"][0] for k, m in (("e", exact), ("n", noisy))}
    assert width["n"] > width["e"]
    # unnormalized numbers do not depend on r_max
    assert noisy["cumulative_gain"] == exact["cumulative_gain"]


def test_aggregate_interval_combines_the_tasks_replicates():
    a = task_metrics(hetero(shift=0.1, noise=0.05, rollouts=3, seed=1)[0], n_boot=2000, keep_draws=True)
    b = task_metrics(hetero(shift=0.3, noise=0.05, rollouts=3, seed=2)[0], n_boot=2000, keep_draws=True)
    a["task"], b["task"] = "x", "y"
    agg = aggregate([a, b], [a.pop("draws"), b.pop("draws")])
    ng = agg["normalized_gain"]
    assert ng["mean"] == pytest.approx((a["normalized_gain"]["mean"] + b["normalized_gain"]["mean"]) / 2)
    assert ng["ci"][0] < ng["mean"] < ng["ci"][1]
    # independent tasks: the mean's SE is sqrt(se_a^2 + se_b^2) / 2
    se = math.hypot(a["normalized_gain"]["se"], b["normalized_gain"]["se"]) / 2
    assert ng["se"] == pytest.approx(se, rel=0.1)


def _same(a, b) -> bool:
    """Equal results, bootstrap replicates (numpy arrays) included."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def test_compute_on_records_in_memory_equals_the_run_directorys(tmp_path):
    from clbench import metrics, runcard
    from clbench.results import append_lines, write_json_atomic

    records = []
    for task, shift in (("t", 0.1), ("u", 0.3)):
        for system, bonus in (("s", 0.0), ("s2", 0.2)):
            for p in range(2):
                records += [dict(rec("stateless", p, iid, i, v, r + 0.05 * p), task=task, system=system)
                            for i, (iid, v, r) in enumerate(SL)]
            for k in range(3):
                order = SL if k % 2 == 0 else [SL[1], SL[0], SL[3], SL[2]]
                records += [dict(rec("stateful", k, iid, i, v, min(1.0, r + shift + bonus + 0.01 * k)),
                                 task=task, system=system) for i, (iid, v, r) in enumerate(order)]
    meta = {"format": 1, "tasks": {"t": {"r_max": 1.0, "r_reference": 0.2}, "u": {"r_max": 0.9, "r_reference": 0.1,
                                                                                    "r_max_se": 0.05}},
            "systems": {"s": {"name": "s"}, "s2": {"name": "s2"}}}
    write_json_atomic(tmp_path / "metadata.json", meta)
    append_lines(tmp_path / "results.jsonl", records)

    pure = metrics.compute(records, meta, n_boot=300)
    from_dir = runcard.compute(tmp_path, n_boot=300)
    assert [(t["task"], t["system"]) for t in pure["tasks"]] == [("t", "s"), ("t", "s2"), ("u", "s"), ("u", "s2")]
    assert set(pure) == {"tasks", "aggregate", "metadata", "draws"}
    assert _same(pure, from_dir)
    assert runcard.compute(tmp_path, n_boot=300) is from_dir  # an unchanged directory is not recomputed


def test_run_card_validates_against_the_shipped_schema_and_bad_curves_fail_alike(tmp_path):
    import copy

    import jsonschema

    from clbench.results import append_lines, write_json_atomic
    from clbench.runcard import _validator, build_run_card

    schema = run_card_schema()
    jsonschema.validators.validator_for(schema).check_schema(schema)  # the runner no longer checks it
    records = [rec("stateless", 0, iid, i, v, r) for i, (iid, v, r) in enumerate(SL)]
    records += [rec("stateful", 0, iid, i, v, min(1.0, r + 0.2)) for i, (iid, v, r) in enumerate(SL)]
    params = {"t": {**PARAMS["t"], "env_id": "clbench/T-v1", "instances": len(SL)}}
    write_json_atomic(tmp_path / "metadata.json", {"format": 1, "tasks": params,
                                                   "systems": {"s": {"name": "s", "agent": "a"}}})
    append_lines(tmp_path / "results.jsonl", records)
    card = build_run_card(tmp_path)  # validated
    plain = jsonschema.validators.validator_for(schema)(schema)
    for bad_value in (True, "0.5", [0.5]):
        bad = copy.deepcopy(card)
        bad["tasks"]["t/s"]["curves"]["gain"]["lo"][1] = bad_value
        with pytest.raises(jsonschema.ValidationError) as fast:
            _validator().validate(bad)
        with pytest.raises(jsonschema.ValidationError) as general:
            plain.validate(bad)
        assert (fast.value.message, list(fast.value.absolute_path)) == \
            (general.value.message, list(general.value.absolute_path))


def test_paper_split_by_hand_on_upstream_records(tmp_path):
    """The paper's split (Appendix C) recomputed from raw upstream records of two systems: f_B, the
    boundary means and the headroom, straight from the formulas, against clbench.metrics."""
    from clbench import upstream
    from clbench.results import load_metadata, load_records

    if upstream.default_dir() is None:
        pytest.skip(f"upstream CL-Bench v1.0 results not found (../shared/upstream-clbench-v1 or ${upstream.ENV_VAR})")
    for system in ("icl-gpt-5.4", "claude-code-sonnet-4.6"):
        [run_dir] = upstream.import_upstream(upstream.default_dir() / "runs" / system, tmp_path / system)
        records = [r for r in load_records(run_dir) if r["task"] == "blind_spectrum_monitoring"]
        meta = load_metadata(run_dir)
        r_max = meta["tasks"]["blind_spectrum_monitoring"]["r_max"]
        sl = {r["instance_id"]: r["reward"] for r in records if r["mode"] == "stateless"}
        mean_sl = np.mean(list(sl.values()))
        stab, plas, n = 0.0, 0.0, 0
        for k in sorted({r["rollout"] for r in records if r["mode"] == "stateful"}):
            recs = sorted((r for r in records if r["mode"] == "stateful" and r["rollout"] == k),
                          key=lambda r: r["position"])
            first = {}
            for r in recs:
                first.setdefault(r["variant"], r["position"])
            b = [r for r in recs if first[r["variant"]] == r["position"]]
            w = [r for r in recs if first[r["variant"]] != r["position"]]
            f_b = len(b) / len(recs)
            gain_b = np.mean([r["reward"] - sl[r["instance_id"]] for r in b])
            gain_w = np.mean([r["reward"] - sl[r["instance_id"]] for r in w])
            stab += f_b * gain_b / (r_max - mean_sl)
            plas += (1 - f_b) * gain_w / (r_max - mean_sl)
            n += 1
        [m] = [t for t in task_metrics_of(records, meta)]
        assert m["stability"]["mean"] == pytest.approx(stab / n)
        assert m["plasticity"]["mean"] == pytest.approx(plas / n)
        assert m["boundary_share"] == pytest.approx(3 / 90)


def task_metrics_of(records, meta):
    return [task_metrics(tr, n_boot=100) for tr in group_records(records, meta["tasks"]).values()]


@pytest.mark.parametrize("K,P", [(3, 1), (4, 3), (12, 12)])  # both ways of contracting (12 x 12: many columns)
def test_headline_replicates_equal_the_cell_by_cell_sums(K, P):
    """headline_stats contracts over instances with matrix products; every statistic must equal the
    definition summed cell by cell (weights ck[k] * ci[i], the stateless mean over weighted passes)."""
    from clbench.metrics import Matrices, headline_stats

    rng = np.random.default_rng(K * 100 + P)
    n, B = 17, 6
    sf, sl = rng.random((K, n)), rng.random((P, n))
    present = (rng.random((K, n)) < 0.9).astype(float)
    window, boundary = (rng.random((K, n)) < 0.3).astype(float), (rng.random((K, n)) < 0.1).astype(float)
    m = Matrices([str(i) for i in range(n)], {str(i): i for i in range(n)}, sf, present, window, sl, boundary)
    ck, ci, cp = (rng.integers(0, 3, (B, s)).astype(float) + (np.arange(s) == 0) for s in (K, n, P))
    got = headline_stats(m, 1.2, 0.1, ck, ci, cp)
    for b in range(B):
        slbar = cp[b] @ sl / cp[b].sum()
        w = ck[b][:, None] * ci[b][None, :] * present  # the weight of each played cell
        mass = w.sum()
        gain = lambda mask: (w * mask * (sf - slbar)).sum()  # noqa: E731
        mean_sf, mean_sl = (w * sf).sum() / mass, (ci[b] * slbar).sum() / ci[b].sum()
        want = {"mean_reward": mean_sf, "mean_reward_stateless": mean_sl,
                "cumulative_gain": gain(1.0) / ck[b].sum(), "normalized_gain": (mean_sf - mean_sl) / (1.2 - mean_sl),
                "stability": gain(boundary) / mass / (1.2 - mean_sl), "early_gain": gain(window) / mass / (1.2 - mean_sl),
                "boundary_share": (w * boundary).sum() / mass}
        for name, value in want.items():
            assert got[name][b] == pytest.approx(value, rel=1e-12, abs=1e-13), (name, b)


@pytest.mark.parametrize("K,P,paired", [(3, 1, False), (4, 4, True), (2, 3, False)])
def test_replicates_grouped_by_their_rollout_and_pass_weights_equal_the_blocks(K, P, paired, monkeypatch):
    """Few rollouts and passes: _replicates computes the replicates of each distinct (rollout, pass)
    weight row together (_grouped_sums); every statistic of every replicate equals the block path's."""
    from clbench import metrics

    rng = np.random.default_rng(K * 10 + P)
    n, B = 23, 3000
    sf, sl = rng.random((K, n)), rng.random((P, n))
    present = (rng.random((K, n)) < 0.9).astype(float)
    window, boundary = (rng.random((K, n)) < 0.3).astype(float), (rng.random((K, n)) < 0.1).astype(float)
    m = metrics.Matrices([str(i) for i in range(n)], {str(i): i for i in range(n)}, sf, present, window, sl, boundary)
    ck, ci = metrics._counts(rng, B, K), metrics._counts(rng, B, n)
    cp = ck if paired else metrics._counts(rng, B, P)
    r_max = 1.5 + 0.1 * rng.standard_normal(B)
    runs, grouped_sums = [], metrics._grouped_sums
    monkeypatch.setattr(metrics, "_grouped_sums", lambda *args: runs.append(len(args[1])) or grouped_sums(*args))
    grouped = metrics._replicates(m, r_max, 0.2, ck, ci, cp)
    assert runs and runs[0] < B / 16  # the grouped path ran, on few distinct weight rows
    monkeypatch.setattr(metrics, "GROUP_ROWS", B + 1)  # every replicate in blocks
    blocks = metrics._replicates(m, r_max, 0.2, ck, ci, cp)
    assert list(grouped) == list(blocks)
    for name in blocks:
        assert np.allclose(grouped[name], blocks[name], rtol=1e-12, atol=1e-13, equal_nan=True), name


def test_estimates_summarized_together_equal_each_on_its_own():
    """summarize_many (one percentile and one SD along rows) gives summarize's numbers bit for bit,
    non-finite replicates and undefined estimates included."""
    from clbench.metrics import summarize, summarize_many

    rng = np.random.default_rng(7)
    items = {f"m{j}": (float(rng.normal()), rng.normal(size=10_000) * (j + 1), None) for j in range(6)}
    with_nan = rng.normal(size=10_000)
    with_nan[::97] = np.nan
    items["nan"] = (0.5, with_nan, None)
    items["undefined"] = (None, rng.normal(size=10_000), "no headroom")
    items["point"] = (1.5, None, None)
    got = summarize_many(items, 12)
    assert list(got) == list(items)
    for name, (point, draws, reason) in items.items():
        assert got[name] == summarize(point, draws, 12, reason), name


def test_curve_bands_read_off_distinct_weights_equal_the_expanded_percentile():
    """The curves' percentiles over distinct replicate weights with multiplicities (ties included)
    are np.percentile's over the expanded replicates, and distinct rows map back to every row."""
    from clbench.metrics import _distinct_rows, _percentile_of_counted_rows, _weights

    rng = np.random.default_rng(3)
    w = np.hstack([_weights(rng, 1000, 5), _weights(rng, 1000, 2)])
    distinct, inverse = _distinct_rows(w)
    assert len({tuple(r) for r in w}) == len(distinct)
    assert np.array_equal(distinct[inverse], w)
    values = np.round(rng.normal(size=(len(distinct), 40)), 1)  # rounded: many ties
    got = _percentile_of_counted_rows(values, np.bincount(inverse, minlength=len(distinct)), [2.5, 97.5])
    assert np.array_equal(got, np.percentile(values[inverse], [2.5, 97.5], axis=0))


# ---------------------------------------------------------------- the bootstrap's numbers, pinned
def golden_records():
    """Two tasks, two systems; rollouts permute instances within variants; 3 stateless passes."""
    rng = np.random.default_rng(20260126)
    records = []
    for task, n, K, P in (("alpha", 24, 4, 3), ("beta", 15, 3, 1)):
        ids = [f"{task}-{i:02d}" for i in range(n)]
        variant = {iid: f"v{i * 3 // n}" for i, iid in enumerate(ids)}
        base = {iid: rng.random() for iid in ids}
        for system, skill in (("s1", 0.3), ("s2", 0.1)):
            for p in range(P):
                records += [{"task": task, "system": system, "mode": "stateless", "rollout": p, "instance_id": iid,
                             "position": i, "variant": variant[iid],
                             "reward": round(float(base[iid] * 0.6 + 0.1 * rng.random()), 6)}
                            for i, iid in enumerate(ids)]
            for k in range(K):
                order = [iid for v in sorted(set(variant.values()))
                         for iid in rng.permutation([x for x in ids if variant[x] == v])]
                records += [{"task": task, "system": system, "mode": "stateful", "rollout": k, "instance_id": iid,
                             "position": pos, "variant": variant[iid],
                             "reward": round(float(base[iid] * 0.6 + skill * min(pos, 5) / 5 + 0.1 * rng.random()), 6)}
                            for pos, iid in enumerate(order)]
    meta = {"tasks": {"alpha": {"r_max": 1.0, "r_reference": 0.35, "r_max_se": 0.02},
                      "beta": {"r_max": 0.9, "r_reference": 0.3}}}
    return records, meta


#: compute(golden_records()) when the bootstrap was last changed on purpose: point, SE and 95% CI of
#: each estimate, and one curve band. A change of the draws, of their order or of the arithmetic
#: shows here; rel 1e-9 leaves room for BLAS rounding on other machines (about 1e-13), nothing more.
#: Update only with a change that keeps the CIs statistically the same, and say why in its commit.
GOLDEN = {'aggregate': {'s1': {'normalized_gain': [0.42708535500075284,
                                          0.03477144506049378,
                                          0.36369095618651165,
                                          0.5001076261425357],
                      'normalized_reward': [0.46072754451566955,
                                            0.050622748705707384,
                                            0.3603289891464949,
                                            0.5583354586538893],
                      'stability': [0.057756894786321206,
                                    0.019783412909085012,
                                    0.02222851992516711,
                                    0.09943270969416124]},
               's2': {'normalized_gain': [0.12707899725746166,
                                          0.015298163064101235,
                                          0.09710092748021731,
                                          0.1572314935325889],
                      'normalized_reward': [0.18439761271367516,
                                            0.04328585412096683,
                                            0.10000851417958258,
                                            0.26874950115222895],
                      'stability': [0.016839126048688192,
                                    0.00786875544699273,
                                    0.0024673560645870067,
                                    0.03331849213197871]}},
 'tasks': {('alpha', 's1'): {'cumulative_gain': [6.154923166666665,
                                                 0.34913017643464334,
                                                 5.424332475000002,
                                                 6.791461304166663],
                             'curve_gain_band_3': [0.13458741874999994, 0.1824380854166666],
                             'early_gain': [0.0865742605101827,
                                            0.024359437025392474,
                                            0.042582043167958446,
                                            0.13839478789257423],
                             'normalized_gain': [0.41774154540736474,
                                                 0.03364120778507064,
                                                 0.35692358790063566,
                                                 0.4891394382667113],
                             'normalized_reward': [0.4500715705128205,
                                                   0.0552853145681514,
                                                   0.34287446737913096,
                                                   0.5594353177668934],
                             'stability': [0.041571243638779,
                                           0.017462718310055633,
                                           0.0098386974230079,
                                           0.07835849719201501]},
           ('alpha', 's2'): {'cumulative_gain': [1.9816392499999989,
                                                 0.1971224631662634,
                                                 1.5825930687499963,
                                                 2.3481552125000005],
                             'curve_gain_band_3': [0.00757433333333335, 0.08557008333333332],
                             'early_gain': [0.027661512221993742,
                                            0.009274682352178662,
                                            0.010373112490104943,
                                            0.047182848168574126],
                             'normalized_gain': [0.13464724018713792,
                                                 0.015468369959910315,
                                                 0.10530772428907562,
                                                 0.16634167658971194],
                             'normalized_reward': [0.18361366987179478,
                                                   0.051864541987140564,
                                                   0.08216104559955649,
                                                   0.28527930431390947],
                             'stability': [0.013701440879032831,
                                           0.006504430770275032,
                                           0.0025919608252849744,
                                           0.027921861969364754]},
           ('beta', 's1'): {'cumulative_gain': [3.684244666666668,
                                                0.38226601352501666,
                                                2.9099449,
                                                4.402154566666667],
                            'curve_gain_band_3': [0.12136399999999999, 0.18502],
                            'early_gain': [0.15194331346433157,
                                           0.04752236559936838,
                                           0.06658475766836988,
                                           0.25396810033857004],
                            'normalized_gain': [0.436429164594141,
                                                0.061144947808467784,
                                                0.3251539358205118,
                                                0.5643165631466629],
                            'normalized_reward': [0.47138351851851856,
                                                  0.08485827295837306,
                                                  0.3034902166666666,
                                                  0.6352729157407406],
                            'stability': [0.07394254593386342,
                                          0.03553873356833681,
                                          0.010347661686036068,
                                          0.15228154242683598]},
           ('beta', 's2'): {'cumulative_gain': [0.9953739999999994,
                                                0.19956460124167572,
                                                0.5827901833333331,
                                                1.369820716666667],
                            'curve_gain_band_3': [0.025058999999999998, 0.05366900000000002],
                            'early_gain': [0.043894634722659094,
                                           0.020551338491646184,
                                           0.005583327766324638,
                                           0.08706493820657431],
                            'normalized_gain': [0.11951075432778539,
                                                0.02625519896414548,
                                                0.06755362060824331,
                                                0.17085488164737278],
                            'normalized_reward': [0.18518155555555552,
                                                  0.07002620363601789,
                                                  0.048268876851851834,
                                                  0.3217646620370369],
                            'stability': [0.019976811218343552,
                                          0.014329600561352475,
                                          -0.005675754538423675,
                                          0.05074999123359241]}}}


def test_bootstrap_numbers_are_pinned():
    from clbench.metrics import compute

    records, meta = golden_records()
    got = compute(records, meta)
    for t in got["tasks"]:
        want = GOLDEN["tasks"][(t["task"], t["system"])]
        for name, values in want.items():
            if name == "curve_gain_band_3":
                have = [t["curves"]["gain"]["lo"][3], t["curves"]["gain"]["hi"][3]]
            else:
                have = [t[name]["mean"], t[name]["se"], *t[name]["ci"]]
            assert have == pytest.approx(values, rel=1e-9, abs=1e-12), (t["task"], t["system"], name)
    for system, want in GOLDEN["aggregate"].items():
        for name, values in want.items():
            a = got["aggregate"][system][name]
            assert [a["mean"], a["se"], *a["ci"]] == pytest.approx(values, rel=1e-9, abs=1e-12), (system, name)
    # one task: the aggregate is the task's estimate (its replicates are the aggregate's), n = 1
    one = compute([r for r in records if r["task"] == "beta"], meta)
    task = next(t for t in one["tasks"] if t["system"] == "s2")
    assert one["aggregate"]["s2"]["normalized_gain"] == {**task["normalized_gain"], "n": 1}
