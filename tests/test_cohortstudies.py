"""CohortStudies-v2: real DuckDB study databases, lifelines Kaplan-Meier, exact latent truth. The
env contract (check_env, reset modes, determinism, info keys, the stateless jump showing the same
study as the stateful position, spec card, r_max and r_reference) is checked for every env in
tests/test_contract.py."""
from __future__ import annotations

import json

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

ENV = "clbench/CohortStudies-v2"


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
    # test_contract: the oracle and the stateless reference reproduce r_max and r_reference
    assert env.r_reference < 0.5 * env.r_max


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
    assert gain > 0.3
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
    assert t["normalized_gain"]["mean"] >= 0.4 and t["normalized_gain"]["ci"][0] > 0.2
    assert t["mean_reward_stateless"] == pytest.approx(r_ref, abs=1e-6)
    card = run(RunConfig(ENV, "oracle", str(tmp_path / "oracle"), rollouts=1, workers=2), say=lambda m: None)
    t = card["tasks"]["cohortstudies/oracle"]
    assert t["mean_reward"]["mean"] == pytest.approx(t["r_max"], abs=1e-9)
    assert t["mean_reward_stateless"] == pytest.approx(t["r_max"], abs=1e-9)
