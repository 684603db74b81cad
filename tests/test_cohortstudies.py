"""CohortStudies-v4: real DuckDB study databases, lifelines Kaplan-Meier, exact latent truth. The
env contract (check_env, reset modes, determinism, info keys, the stateless jump showing the same
study as the stateful position, spec card, r_max and r_reference) is checked for every env in
tests/test_contract.py."""
from __future__ import annotations

import json
import os

import duckdb
import gymnasium as gym
import numpy as np
import pandas as pd
import pytest

import clbench  # noqa: F401  registers the envs
from clbench.agent import make_agent
from clbench.agents.cohortstudies import CohortReference, _condition_key, parse_columns
from clbench.envs.cohortstudies.codings import CodeCoding, NumericCoding, parse_conditions, parse_tag
from clbench.envs.cohortstudies.scoring import binary_kl_bits, information_gain_bits
from clbench.feedback import format_score

ENV = "clbench/CohortStudies-v4"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cohort-cache"))


@pytest.fixture(scope="module")
def env(cache):
    e = gym.make(ENV, cache_dir=cache).unwrapped
    yield e
    e.close()


def call(tool: str, **arguments) -> str:
    return json.dumps({"tool": tool, "arguments": arguments})


def play(env, agent, obs, info) -> tuple[float, dict]:
    agent.begin_instance(obs, info)
    while True:
        obs, r, term, trunc, info = env.step(agent.act(obs, info))
        if term or trunc:
            agent.end_instance(r, info)
            return r, info


def test_schedule_variants_and_spec_card(env):
    card = env.spec_card
    assert [v["name"] for v in card.variants] == ["HERALD", "MERIDIAN", "MOSAIC", "FORGE", "CADENCE"]
    assert card.instances == 20 and card.max_steps == 20
    assert {t["function"]["name"] for t in card.tools} == {
        "get_database_metadata", "get_data_summary", "query_sql", "estimate_survival_by_group", "submit_cohort_report"}
    order = env.schedule.order(3)
    assert [s.variant for s in order] == [s.variant for s in env.schedule.order(0)]
    assert [s.instance_id for s in order] != [s.instance_id for s in env.schedule.order(0)]
    assert len(env.cohorts) == 36
    assert f"[{env.eps:g}, {1 - env.eps:g}]" in card.reward  # the stated smoothing is the one applied


def test_exact_truth_matches_monte_carlo(env):
    pop = env.population
    rng = np.random.default_rng(123)
    sample = pop.sample(rng, "Westfield", 400_000)
    for cid in ("C03", "C11", "C14", "C22", "C29", "C35"):
        conds = env.cohorts[cid]
        mask = np.ones(len(sample["type"]), dtype=bool)
        for c in conds:
            mask &= pop.in_domain(sample[c.var], c.domain)
        exact = pop.cohort_survival("Westfield", conds, env.points)
        empirical = np.array([(sample["months"][mask] > t).mean() for t in env.points])
        se = np.sqrt(exact * (1 - exact) / mask.sum())
        assert np.all(np.abs(empirical - exact) < 4.5 * se + 1e-4), (cid, exact, empirical)


def test_builds_are_deterministic_and_hide_the_latent_type(env, cache):
    other = gym.make(ENV, cache_dir=cache).unwrapped
    try:
        inst = env.schedule.variants[2].instances[1]
        a, b = env.build(inst), other.build(inst)
        assert a.path == b.path and a.path.is_file()  # one cache file, shared by both envs
        assert a.data.table.equals(b.data.table)
        stored = duckdb.connect(str(a.path), read_only=True).execute("FROM patients").df()
        pd.testing.assert_frame_equal(stored, a.data.table, check_index_type=False)
        assert np.array_equal(a.baseline, b.baseline)
        cols = set(a.data.table.columns)
        assert not cols & {"type", "months", "region"}
        study = env.studies["MOSAIC"]
        assert cols == set(study.column_texts())
        next_inst = env.schedule.variants[2].instances[2]
        assert not env.build(next_inst).data.table.equals(a.data.table)
    finally:
        other.close()


def test_hardened_sql_and_expressions(env):
    env.reset(seed=0, options={"instance": "FORGE-1"})
    obs, *_ = env.step(call("query_sql", sql="SELECT table_name FROM information_schema.tables"))
    assert obs.splitlines()[1:] == ["patients"]
    for sql in ("SELECT * FROM read_csv('/etc/passwd')", "DROP TABLE patients", "ATTACH '/tmp/x.db' AS x",
                "COPY patients TO '/tmp/leak.csv'"):
        obs, *_ = env.step(call("query_sql", sql=sql))
        assert obs.startswith(("Rejected", "Error")), (sql, obs)
    exprs = ["1) AS g FROM patients UNION SELECT 1 --", "(SELECT max(worker_no) FROM patients)",
             "CASE WHEN age_entry >= 65 THEN 'old' ELSE 'young' END", "worker_no"]
    obs, *_ = env.step(call("estimate_survival_by_group", group_expressions=exprs))
    blocks = obs.split("\n\n")[1:]
    assert "not a single SQL expression" in blocks[0]
    assert "subqueries are not allowed" in blocks[1]
    assert blocks[2].splitlines()[2].startswith("old | ") and blocks[2].splitlines()[3].startswith("young | ")
    assert "at most 40 are allowed" in blocks[3]


def test_km_tool_matches_baseline_and_lifelines(env):
    from lifelines import KaplanMeierFitter

    obs, info = env.reset(seed=0, options={"instance": "MERIDIAN-2"})
    obs, *_ = env.step("estimate_survival_by_group: 'all'")
    row = obs.splitlines()[-1].split(" | ")
    built = env.build(env.slot.instance)
    assert [float(x) for x in row[3:]] == pytest.approx(built.baseline, abs=1e-4)
    kmf = KaplanMeierFitter().fit(built.data.table["fu_days"] / 30.4375, built.data.table["death"] == 1)
    assert built.baseline == pytest.approx(kmf.survival_function_at_times(env.points).to_numpy())
    summary, *_ = env.step("get_data_summary")
    assert f"S(36) = {built.baseline[2]:.4f}" in summary


def test_tags_round_trip_and_translate_conditions(env):
    levels = env.population.levels
    for study in env.studies.values():
        for col in study.columns:
            assert parse_tag(col.description) == (col.coding if col.documented else None), col.name
    forge = {c.var: c for c in env.studies["FORGE"].columns}
    carrier = forge["risk_alleles"].coding
    assert carrier.sql_condition("carrier", parse_conditions("risk_alleles >= 1", levels)[0].domain) == \
        "\"carrier\" IN ('Y')"
    assert carrier.sql_condition("carrier", parse_conditions("risk_alleles = 2", levels)[0].domain) is None
    assert forge["exposure"].coding.sql_condition(
        "exposure_index", parse_conditions("exposure = 'high'", levels)[0].domain) == '("exposure_index" >= 10)'
    errors = NumericCoding("cognition", scale=-1.0, offset=30.0)
    assert errors.sql_condition("e", parse_conditions("cognition < 24", levels)[0].domain) == '"e" > 6'
    bands = env.studies["MOSAIC"].columns[0].coding
    assert isinstance(bands, CodeCoding)
    assert bands.sql_condition("age_band", parse_conditions("age < 65", levels)[0].domain) == \
        "\"age_band\" IN ('45-54', '55-64')"
    assert bands.sql_condition("age_band", parse_conditions("age < 70", levels)[0].domain) is None


def test_translated_cohorts_select_the_right_patients(env):
    """Every group the reference resolves from CADENCE's descriptions (a condition, or a cohort's
    resolvable conditions together) picks (almost) exactly its patients."""
    study = env.studies["CADENCE"]
    rng = np.random.default_rng(5)
    pat = study.enroll(rng, "Southport")
    table = {c.name: c.encode(pat[c.var], env.population, rng) for c in study.columns}
    con = duckdb.connect()
    df = pd.DataFrame({k: v.reset_index(drop=True) for k, v in table.items()})
    con.register("patients", df)
    agent = CohortReference(env.spec_card)
    agent.levels, agent.cohort_texts = env.population.levels, env.cohort_texts
    columns = {c.var: (c.name, c.coding) for c in study.columns}
    exprs = agent._expressions(columns)[1:]
    conditions = {_condition_key(c): [c] for conds in env.cohorts.values() for c in conds}
    conditions.update({cid: [c for c in env.cohorts[cid] if _condition_key(c) in keys]
                       for cid, (keys, _label, _whole) in agent.plan.items()})
    assert len(exprs) >= 24 and sum(whole for *_, whole in agent.plan.values()) >= 12
    for expr in exprs:
        label = expr.rsplit(" THEN ", 1)[1].removesuffix(" END").strip("'")
        got = np.array([v == label for (v,) in con.execute(f"SELECT {expr} FROM patients").fetchall()])
        want = np.ones(len(df), dtype=bool)
        complete = np.ones(len(df), dtype=bool)
        for cond in conditions[label]:
            want &= env.population.in_domain(pat[cond.var], cond.domain)
            complete &= df[columns[cond.var][0]].notna().to_numpy()
        agree = (got == want)[complete].mean()
        assert agree > 0.995, (label, agree)


def test_reward_semantics(env):
    truth = np.array([[0.9, 0.8, 0.7], [0.6, 0.4, 0.2]])
    assert information_gain_bits(truth, [0.8, 0.6, 0.5], truth, 1e-3) == pytest.approx(
        binary_kl_bits(truth, np.array([0.8, 0.6, 0.5]), 1e-3).mean())
    assert binary_kl_bits(0.7, 0.7, 1e-3) == 0
    assert binary_kl_bits(1.0, 0.0, 1e-3) == pytest.approx(0.999 * np.log2(0.999 / 0.001) + 0.001 * np.log2(0.001 / 0.999))
    obs, info = env.reset(seed=0, options={"instance": "HERALD-3"})
    built = env.build(env.slot.instance)
    flat = {c: list(built.baseline) for c in env.cohorts}
    obs, r, term, trunc, info = env.step(call("submit_cohort_report", survival=flat))
    assert term and not trunc and r == pytest.approx(0.0, abs=1e-12)
    assert info["raw_metric"] == {"name": "information_gain_bits", "value": r}
    # the score and its aggregate parts are told; nothing per cohort (v2), never a survival value
    assert f"Instance score: {format_score(r)}" in obs
    base_kl = binary_kl_bits(built.truth, built.baseline[None, :], env.eps).mean()
    assert f"mean KL(true || baseline): {base_kl:.4f} bits" in obs and f"mean KL(true || your report): {base_kl:.4f}" in obs
    assert not any(c in obs for c in env.cohorts) and not any(f"{p:.3f}" in obs for p in built.truth.ravel())
    assert "too high" not in obs and "too low" not in obs
    env.reset(options={"instance": "HERALD-3"})
    truth = make_agent("oracle", env).latent["truth"]["HERALD-3"]
    *_, r_oracle, term, _, _ = env.step(call("submit_cohort_report", survival=truth))
    assert r_oracle == pytest.approx(binary_kl_bits(built.truth, built.baseline[None, :], env.eps).mean())
    assert r_oracle > 0.01


def test_invalid_reports_cost_a_call_and_three_end_the_instance(env):
    obs, info = env.reset(seed=0, options={"instance": "MOSAIC-1"})
    short = {c: [0.9, 0.8, 0.7] for c in list(env.cohorts)[:35]}
    obs, r, term, trunc, info = env.step(call("submit_cohort_report", survival=short))
    assert "missing cohorts: C36" in obs and not term and info["steps_left"] == 19
    bad = {c: [0.9, 0.8, 1.7] for c in env.cohorts}
    obs, r, term, *_ = env.step(call("submit_cohort_report", survival=bad))
    assert "maximum of 1" in obs and not term
    obs, r, term, trunc, info = env.step("this is not a tool call")
    assert term and r == 0.0 and "Tools:" in obs


def test_budget_runs_out_with_zero_reward(env):
    env.reset(seed=0, options={"instance": "CADENCE-2"})
    for i in range(20):
        obs, r, term, trunc, info = env.step("SELECT count(*) FROM patients")
        assert obs.splitlines()[1] == "1700"
    assert trunc and not term and r == 0.0 and info["instance_reward"] == 0.0


def test_text_grammar(env):
    env.reset(seed=0, options={"instance": "HERALD-1"})
    assert env.step("get_database_metadata")[0].startswith("Study HERALD")
    assert env.step('query_sql: {"sql": "SELECT 41 + 1 AS x"}')[0] == "x\n42"
    assert env.step("query_sql: SELECT 2 AS y")[0] == "y\n2"
    obs = env.step("estimate_survival_by_group: sex")[0]
    assert "F | " in obs and "M | " in obs
    obs, *_ = env.step("get_data_summary: 12")
    assert obs.startswith("Invalid action") and "JSON arguments" in obs


def test_reference_maps_columns_through_descriptions(env):
    expected = {  # resolvable cohorts per study follow from the measured variables and their codings
        "HERALD": {"C14", "C19", "C33"}, "FORGE": {"C13", "C31", "C11"}, "MERIDIAN": {"C11", "C34", "C36"}}
    absent = {"HERALD": {"C11", "C09"}, "FORGE": {"C14", "C05"}, "MERIDIAN": {"C07", "C09"}}
    for name in expected:
        env.reset(seed=0, options={"instance": f"{name}-1"})
        cols = parse_columns(env.step("get_database_metadata")[0])
        agent = CohortReference(env.spec_card)
        agent.levels, agent.cohort_texts = env.population.levels, env.cohort_texts
        agent._expressions(cols)
        ids = {cid for cid, (_keys, _label, whole) in agent.plan.items() if whole}
        assert expected[name] <= ids and not absent[name] & ids, (name, ids)


def test_the_stateless_reference_has_headroom(env):
    # test_contract: the oracle and the stateless reference reproduce r_max and r_reference; v2's
    # reference analyses each study fully (0.51 of r_max), what is left needs other studies
    assert env.r_reference < 0.6 * env.r_max


def test_stateful_reference_learns_across_studies(env):
    agent = make_agent("reference", env)
    obs, info = env.reset(seed=1)
    rewards = {}
    for k in range(len(env.schedule)):
        if k:
            obs, info = env.reset()
        rewards[info["instance_id"]] = play(env, agent, obs, info)[0]
    mean_sf = np.mean(list(rewards.values()))
    gain = (mean_sf - env.r_reference) / (env.r_max - env.r_reference)
    assert gain > 0.25
    # the gain comes from later studies, which can borrow cohorts they cannot observe
    late = np.mean([v for k, v in rewards.items() if k.startswith(("FORGE", "CADENCE"))])
    assert late > 1.5 * np.mean([v for k, v in rewards.items() if k.startswith("HERALD")])
    state = agent.state_dict()
    clone = CohortReference(env.spec_card)
    clone.load_state_dict(json.loads(json.dumps(state)))
    assert clone.memory == agent.memory and len(agent.memory) == 36


@pytest.mark.slow
def test_must_show_reference_rollout(tmp_path):
    from clbench.rollout import run
    from clbench.runner import RunConfig

    r_ref = gym.make(ENV).unwrapped.r_reference
    card = run(RunConfig(ENV, "reference", str(tmp_path / "ref"), rollouts=5, workers=2), say=lambda m: None)
    t = card["tasks"]["cohortstudies/reference"]
    # the interval resamples instances as well as rollouts (20 instances): wider than over rollouts alone
    # v2's stateless reference analyses each study fully, so less is left to learn than in v1 (0.4x)
    assert t["normalized_gain"]["mean"] >= 0.3 and t["normalized_gain"]["ci"][0] > 0.1
    assert t["mean_reward_stateless"] == pytest.approx(r_ref, abs=1e-6)
    card = run(RunConfig(ENV, "oracle", str(tmp_path / "oracle"), rollouts=1, workers=2), say=lambda m: None)
    t = card["tasks"]["cohortstudies/oracle"]
    assert t["mean_reward"]["mean"] == pytest.approx(t["r_max"], abs=1e-9)
    assert t["mean_reward_stateless"] == pytest.approx(t["r_max"], abs=1e-9)


# ---------------------------------------------------------------------------- worlds, splits, red team (v2)
def play_through(env, agent, seed: int = 0, instances: int | None = None) -> np.ndarray:
    """One agent through `instances` instances (default: the schedule) from rollout `seed`: rewards."""
    obs, info = env.reset(seed=seed)
    rewards = []
    for k in range(instances or len(env.schedule)):
        if k:
            obs, info = env.reset()
        agent.begin_instance(obs, info)
        while True:
            obs, r, term, trunc, info = env.step(agent.act(obs, info))
            if term or trunc:
                agent.end_instance(r, info, obs)
                rewards.append(r)
                break
    return np.array(rewards)


def truths(env) -> dict[str, np.ndarray]:
    """Instance id (without a split prefix) -> its ground truth, (cohorts, time points)."""
    return {k.removeprefix("train-"): np.array(list(v.values())) for k, v in env.latent()["truth"].items()}


def test_train_split_shares_kinds_never_answers(env, cache):
    """v1's train split had the test split's population: 20 of 20 train instances had their test
    twin's ground truth. Now every latent value is drawn for the train world."""
    train = gym.make(ENV, cache_dir=cache, split="train").unwrapped
    try:
        test_truth, train_truth = truths(env), truths(train)
        assert test_truth.keys() == train_truth.keys() and len(test_truth) == 20
        identical = [k for k in test_truth if np.allclose(test_truth[k], train_truth[k], atol=1e-6)]
        assert identical == []  # identical values on 0 of 20
        # not even one cohort's curve, anywhere in the train split, equals one of the test split's
        test_rows = {tuple(np.round(r, 6)) for t in test_truth.values() for r in t}
        assert not test_rows & {tuple(np.round(r, 6)) for t in train_truth.values() for r in t}
        assert not set(env.population.regions) & set(train.population.regions)
        assert train.world["population"]["weibull_scale_months"] != env.world["population"]["weibull_scale_months"]
        # the same kinds: studies, columns measured, the re-coding in the same place
        assert [s.name for s in train.studies.values()] == [s.name for s in env.studies.values()]
        drifting = [c.name for s in train.studies.values() for c in s.columns if not c.documented]
        assert len(drifting) == 1 and drifting[0] != "cog_score"
    finally:
        train.close()


#: worlds whose train split is compared with their test split (all 20 with CLBENCH_SLOW=1)
SPLIT_WORLDS = [None, *(range(1, 21) if os.environ.get("CLBENCH_SLOW") == "1" else [1, 9])]


@pytest.mark.parametrize("world_seed", SPLIT_WORLDS)
def test_train_answers_never_answer_the_test_world(world_seed, cache):
    """In every world (the canonical one and fresh ones) the train split's ground truths differ from
    the test split's on every instance, and the train answers (each twin's truth, or their mean per
    cohort) earn at most a fifth of r_max on the test instances: the stateless reference earns
    about half (0.3-0.75 of it, tests below), so a model trained on the train split's answers stays
    clearly below r_reference. v2's first fresh worlds were alike enough for the train answers to
    reach r_reference in 9 of 20 worlds; train worlds are now drawn against their test world
    (worlds.draw_world's `avoid`)."""
    kw = {} if world_seed is None else {"world_seed": world_seed}
    test = gym.make(ENV, cache_dir=cache, **kw).unwrapped
    train = gym.make(ENV, cache_dir=cache, split="train", **kw).unwrapped
    try:
        test_truth, train_truth = truths(test), truths(train)
        assert test_truth.keys() == train_truth.keys() and len(test_truth) == 20
        assert [k for k in test_truth if np.allclose(test_truth[k], train_truth[k], atol=1e-6)] == []
        mean_table = np.mean(list(train_truth.values()), axis=0)
        best, twin, table = [], [], []
        for v in test.schedule.variants:
            for inst in v.instances:
                base, truth = test.build(inst).baseline, test_truth[inst.instance_id]
                best.append(information_gain_bits(truth, base, truth, test.eps))
                twin.append(information_gain_bits(truth, base, train_truth[inst.instance_id], test.eps))
                table.append(information_gain_bits(truth, base, mean_table, test.eps))
        r_max = float(np.mean(best))
        assert np.mean(twin) < 0.2 * r_max and np.mean(table) < 0.2 * r_max, (np.mean(twin), np.mean(table), r_max)
    finally:
        test.close()
        train.close()


def test_fresh_worlds_are_deterministic_and_distinct(cache, monkeypatch, tmp_path):
    from clbench.envs.cohortstudies import cohortstudies_env

    made = {}
    # the other world is one test_train_answers_never_answer_the_test_world has drawn and built already (SPLIT_WORLDS)
    for key, kw in (("w1", {"world_seed": 1}), ("w1 again", {"world_seed": 1}), ("w9", {"world_seed": 9}),
                    ("train-w1", {"world_seed": 1, "split": "train"})):
        # drawn again: neither the process's copy nor the cache folder's
        monkeypatch.setattr(cohortstudies_env, "_DRAWN", {})
        e = gym.make(ENV, cache_dir=str(tmp_path) if key == "w1 again" else cache, schedule="short", **kw).unwrapped
        made[key] = (e.world, truths(e), e.reset(seed=0)[0])
        e.close()
    assert made["w1"][0] == made["w1 again"][0] and made["w1"][2] == made["w1 again"][2]
    for a, b in (("w1", "w9"), ("w1", "train-w1")):
        assert made[a][0] != made[b][0]
        assert not any(np.allclose(made[a][1][k], made[b][1][k]) for k in made[a][1])


def test_feedback_is_aggregate_and_a_feedback_only_agent_stays_below_the_reference(env):
    """A data-blind agent that tunes a table from the feedback alone (the attack that reached 84% of
    r_max with v1's per-cohort feedback), over three passes of the schedule, and the table it ends
    with replayed as a fixed table: both below r_reference. So are the memoryless families."""
    from clbench.agents.cohortstudies_redteam import FeedbackSearch

    env.cycle = True
    try:
        agent = FeedbackSearch(env.spec_card)
        learning = play_through(env, agent, instances=3 * len(env.schedule))
        agent.learning = False
        fixed = play_through(env, agent)
    finally:
        env.cycle = False
    assert learning.mean() < env.r_reference and learning[-20:].mean() < env.r_reference
    assert fixed.mean() < env.r_reference, fixed.mean()
    assert len(agent.best) == 4  # it did search: one KL per region


def test_a_table_learned_from_the_feedback_does_not_carry_to_a_fresh_world(cache):
    """The score-only search, given passes over a world's train split (the same 20 instances again and
    again: on the canonical world, 10 passes take it past r_reference), learns that world's answers;
    on the fresh world the train split trains for, its table scores below the flat baseline (0), so
    below r_reference (0.3-0.75 of r_max, test_fresh_worlds_keep_the_difficulty). Measured with 10
    passes: -0.011 to -0.049 on worlds 1-5; the canonical world's table -0.023 to -0.132 on worlds 1-20."""
    from clbench.agents.cohortstudies_redteam import FeedbackSearch

    train = gym.make(ENV, cache_dir=cache, split="train", world_seed=1, cycle=True).unwrapped
    fresh = gym.make(ENV, cache_dir=cache, world_seed=1).unwrapped
    try:
        agent = FeedbackSearch(train.spec_card)
        learning = play_through(train, agent, instances=4 * len(train.schedule))
        agent.learning = False
        there = play_through(train, agent)
        here = play_through(fresh, agent)
    finally:
        train.close()
        fresh.close()
    assert there.mean() > learning[:20].mean()  # it did learn the train world's table
    assert here.mean() < 0, (there.mean(), here.mean())


def test_memoryless_families_stay_below_the_reference(env):
    import itertools

    from clbench.agent import load_object

    best = {}
    for family, (path, grid) in type(env).policy_families.items():
        for values in itertools.product(*grid.values()):
            params = dict(zip(grid, values))
            rewards = []
            for slot in env.schedule.order(0):
                obs, info = env.reset(seed=0, options={"instance": slot.instance_id, "stateless": True})
                agent = load_object(path)(env.spec_card, seed=0, **params)
                agent.begin_instance(obs, info)
                while True:
                    obs, r, term, trunc, info = env.step(agent.act(obs, info))
                    if term or trunc:
                        rewards.append(r)
                        break
            best[f"{family}{params}"] = float(np.mean(rewards))
    top = max(best, key=best.get)
    assert best[top] < env.r_reference, (top, best[top])


def test_stateless_reference_beats_constant_reports(env):
    """The reference analyses the study (r_reference) and clearly beats any constant report."""
    from clbench.agents.cohortstudies_redteam import FixedTable

    constant = play_through(env, FixedTable(env.spec_card, curve=(0.87, 0.73, 0.58)))  # no state: stateless
    assert env.r_reference > 1.5 * constant.mean()


#: world seeds whose difficulty is checked (all 20 with CLBENCH_SLOW=1)
WORLD_SEEDS = list(range(1, 21)) if os.environ.get("CLBENCH_SLOW") == "1" else [1, 7]
#: the played stateless reference's share of r_max stays within this factor of the canonical world's
REFERENCE_SHARE_BAND = 1.3


def difficulty_row(env) -> dict:
    """r_max, r_reference, the stateful reference (rollout 0) and the drift cost (frozen before the
    re-coding vs unfrozen, over the declared drift's span), as clbench drift-check measures them."""
    from clbench.commands.drift_check import declared_drifts, drift_span

    def stateless(make):
        return np.mean([_one(env, make(), slot.instance_id) for slot in env.schedule.order(0)])

    [drift] = declared_drifts(env)
    first, n = drift_span(env.schedule, drift)
    r_max = stateless(lambda: make_agent("oracle", env))
    r_ref = stateless(lambda: make_agent("reference", env))
    stateful = play_through(env, make_agent("reference", env))
    frozen = play_through(env, make_agent("reference", env, freeze_at=first))
    cost = float(stateful[first:first + n].mean() - frozen[first:first + n].mean())
    return {"r_max": r_max, "r_reference": r_ref, "share": r_ref / r_max, "stateful": stateful,
            "gain": (stateful.mean() - r_ref) / (r_max - r_ref), "drift_cost": cost,
            "drift_share": cost / (r_max - r_ref)}


@pytest.fixture(scope="module")
def canonical_row(env):
    return difficulty_row(env)


@pytest.mark.parametrize("world_seed", WORLD_SEEDS)
def test_fresh_worlds_keep_the_difficulty(world_seed, cache, canonical_row):
    """In a fresh world: headroom above the stateless reference, the reference's share of r_max and the
    drift cost's share of the headroom in the canonical world's bands, a stateful reference that learns
    (normalized gain in the canonical world's band), and no data-blind table near the reference.
    Measured on worlds 1-20 (canonical 0.52 and 0.34): the reference's share of r_max 0.46-0.63
    (0.22-0.55 before worlds were held to it), the drift cost's share of the headroom 0.26-0.45
    (0.01-0.56 before, outside the band in 12 of 20), the normalized gain 0.30-0.51."""
    from clbench.agents.cohortstudies_redteam import FixedTable
    from clbench.commands.worlds import BAND
    from clbench.envs.cohortstudies import worlds
    from clbench.envs.cohortstudies.analyst import Analyst

    env = gym.make(ENV, cache_dir=cache, world_seed=world_seed).unwrapped
    try:
        row = difficulty_row(env)
        table = max(np.mean([_one(env, FixedTable(env.spec_card, curve=c), slot.instance_id)
                             for slot in env.schedule.order(0)])
                    for c in type(env).policy_families["fixed_table"][1]["curve"])
        model, canon_model = Analyst(env.world, env.spec_data).profile(), Analyst(worlds.canonical(env.spec_data),
                                                                                 env.spec_data).profile()
    finally:
        env.close()
    canon = canonical_row
    # the draw's own criterion (the analytic model of the reference), and what the played reference shows
    assert abs(np.log(model["reference_share"] / canon_model["reference_share"])) <= np.log(worlds.REFERENCE_SHARE_RATIO)
    assert abs(np.log(model["drift_share"] / canon_model["drift_share"])) <= np.log(worlds.DRIFT_SHARE_RATIO)
    assert 0.018 < row["r_max"] < 0.06, row
    assert abs(np.log(row["share"] / canon["share"])) <= np.log(REFERENCE_SHARE_BAND), (row["share"], canon["share"])
    tol = max(BAND["drift_abs"], BAND["drift_rel"] * abs(canon["drift_share"]))
    assert abs(row["drift_share"] - canon["drift_share"]) <= tol, (row["drift_share"], canon["drift_share"], tol)
    tol = max(BAND["gain_abs"], BAND["gain_rel"] * abs(canon["gain"]))
    assert abs(row["gain"] - canon["gain"]) <= tol, (row["gain"], canon["gain"])
    assert table < row["r_reference"], (table, row["r_reference"])


def _one(env, agent, instance_id: str) -> float:
    obs, info = env.reset(seed=0, options={"instance": instance_id, "stateless": True})
    agent.begin_instance(obs, info)
    while True:
        obs, r, term, trunc, info = env.step(agent.act(obs, info))
        if term or trunc:
            return r


def test_public_text_names_no_latent_value(env):
    """The canonical world's latent values (region names, types, the re-coded column and its coding)
    appear in no agent-facing or documentation text of this env."""
    import inspect
    from pathlib import Path

    import clbench.envs.cohortstudies as pkg

    secrets = type(env).public_secrets()
    assert {"Northvale", "cog_score", "50 - value"} <= set(secrets)
    card = json.dumps(env.agent_card).lower()
    for word in ("drift", "re-cod", "recod", "re-scor", "forge", "cadence", "meridian"):
        assert word not in card, word  # nothing about when or what the drift is
    texts = [json.dumps(env.agent_card), env.spec_card.brief, env.spec_card.reward, env.spec_card.feedback,
             json.dumps(env.spec_card.variants), inspect.getdoc(type(env)) or ""]
    root = Path(pkg.__file__).parent
    for module in root.glob("*.py"):
        texts.append(inspect.getdoc(__import__(f"clbench.envs.cohortstudies.{module.stem}", fromlist=["x"])) or "")
    yaml_path = Path(clbench.__file__).parent / "tasks" / "cohortstudies" / "default.yaml"
    if yaml_path.exists():
        texts += [line.split("#", 1)[1] for line in yaml_path.read_text().splitlines() if "#" in line]
    for secret in secrets:
        for text in texts:
            assert secret not in text, (secret, text[:200])


def test_info_types_are_stable_and_vectors_step_through_instance_boundaries(cache):
    """Every info key keeps one type (gymnasium stacks infos across sub-envs), and sync and async
    vectors play through several instance boundaries."""
    report = call("submit_cohort_report", survival={f"C{i:02d}": [0.9, 0.8, 0.7] for i in range(1, 37)})
    actions = ["get_database_metadata", "QUERY_SQL: ", report, "query_sql: SELECT 1", "nonsense", report,
               "estimate_survival_by_group: 'all'", report]
    env = gym.make(ENV, cache_dir=cache, schedule="short", cycle=True).unwrapped
    kinds: dict[str, set] = {}
    env.reset(seed=0)
    for k in range(30):
        if env._done:
            env.reset()
        *_, info = env.step(actions[k % len(actions)])
        for key, value in info.items():
            kinds.setdefault(key, set()).add(type(value))
    env.close()
    assert all(len(t) == 1 for t in kinds.values()), kinds
    for mode in ("sync", "async"):
        vec = gym.make_vec(ENV, 3, vectorization_mode=mode, cache_dir=cache, schedule="short", cycle=True,
                           vector_kwargs={"shared_memory": False} if mode == "async" else {})
        try:
            vec.reset(seed=0)
            ends = 0
            for k in range(24):
                _obs, _r, term, trunc, info = vec.step([actions[(k + j) % len(actions)] for j in range(3)])
                ends += int(np.sum(term | trunc))
            assert ends >= 6 and "instance_id" in info
        finally:
            vec.close()


def test_the_reference_reads_selection_bias_from_the_design(env):
    """Clinic referrals sample sicker patients than their population; volunteers, workers, community
    samples and registries that leave out long-term care healthier ones (the reference's design shift)."""
    from clbench.agents.cohortstudies import selection_direction

    got = {}
    for name in env.studies:
        env.reset(seed=0, options={"instance": f"{name}-1"})
        got[name] = selection_direction(env.step("get_database_metadata")[0])
    assert got == {"HERALD": -1, "MERIDIAN": 1, "MOSAIC": -1, "FORGE": -1, "CADENCE": -1}
