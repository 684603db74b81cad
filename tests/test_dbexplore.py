"""DBExplore-v1: real DuckDB files at a small scale (0.02, ~1000 products per group).

The generated data's per-group conventions and the documented migration, the cache, reward
semantics, hostile SQL, the scripted agents and the issue's must-show numbers. The env contract
(check_env, reset modes, determinism, info keys, spec card, r_max and r_reference at this scale)
is checked for every env in tests/test_contract.py. The default-scale build time is a benchmark
(benchmarks/bench_dbexplore.py), not a test.
"""
from __future__ import annotations

import json
import multiprocessing
import re
import time

import duckdb
import gymnasium as gym
import numpy as np
import pytest

import clbench  # noqa: F401
from clbench.agent import make_agent
from clbench.commands.calibrate import stateless_mean
from clbench.env import load_task_spec
from clbench.envs.dbexplore.cache import cache_key, database_paths
from clbench.envs.dbexplore.connections import close_connection, open_connection
from clbench.rollout import run
from clbench.runner import RunConfig, play_instance

ENV = "clbench/DBExplore-v1"
SCALE = 0.02
RELEASE1_TABLES = {"items_g1", "items_g2", "items_g3", "fdbk_g1", "fdbk_g2", "fdbk_g3",
                   "tax_g1", "tax_g2", "attr_g1", "attr_g3", "ref_cd"}
#: the status code that marks a soft-deleted row, per table (tasks/dbexplore/default.yaml)
DELETED = {"items_g1": "D", "items_g2": "7", "items_g3": "X", "fdbk_g1": "1", "fdbk_g2": "R", "fdbk_g3": "9"}
CHANGED_BY_MIGRATION = {"items_g2", "fdbk_g1", "fdbk_g3", "attr_g3_legacy", "itm_attr_g3"}


@pytest.fixture(scope="module")
def kwargs(tmp_path_factory):
    return {"scale": SCALE, "cache_dir": str(tmp_path_factory.mktemp("dbexplore-cache"))}


@pytest.fixture(scope="module")
def env(kwargs):
    e = gym.make(ENV, **kwargs).unwrapped
    yield e
    e.close()


@pytest.fixture(scope="module")
def db(env):
    """Read-only connections to both releases (not the agent's connection)."""
    paths = env.database_paths()
    cons = {r: open_connection(p) for r, p in paths.items()}
    yield cons
    for r, con in cons.items():
        close_connection(paths[r], con)


def _one(con, sql):
    return con.execute(sql).fetchall()[0][0]


def _truth(env, db, qid):
    q = env.questions[qid]
    return q.answer(db[q.release])


def _tables(con):
    return {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}


def _types(con, table):
    return {r[0]: r[1] for r in con.execute(f"DESCRIBE {table}").fetchall()}


def test_schedule_variants_and_facts_stay_private(env):
    card = env.spec_card
    assert card.instances == 40 and card.r_max == 1.0
    assert [v["instances"] for v in card.variants] == [20, 20]
    order = env.schedule.order(5)
    assert {s.instance_id for s in order[:20]} == {f"q{i:02d}" for i in range(1, 21)}
    assert all(env.questions[s.instance_id].release == 2 for s in order[20:])
    facts = set(env.facts)
    quirky = 0
    for s in order:
        deps = [f["key"] for f in env.instance_facts(s.instance_id)]
        assert deps and set(deps) <= facts
        quirky += any(f != "schema.group_suffix" for f in deps)
        obs, info = env.reset(options={"instance": s.instance_id, "stateless": True})
        assert set(info) == {"instance_id", "position", "variant", "variant_position", "step", "steps_left"}
        assert not any(f in obs for f in facts)
    assert quirky >= 35  # most questions need a convention or a migration change
    with pytest.raises(KeyError):
        env.instance_facts("q99")


def test_release1_hides_per_group_conventions(db):
    con = db[1]
    assert _tables(con) == RELEASE1_TABLES  # no attributes for g2, no taxonomy for g3
    assert _types(con, "items_g2")["prc"] == "BIGINT" and _types(con, "items_g1")["prc"] == "DOUBLE"
    assert _one(con, "SELECT min(ts) FROM fdbk_g1") > 1e12  # epoch ms
    assert 1e9 < _one(con, "SELECT max(ts) FROM fdbk_g2") < 1e10  # epoch s
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", _one(con, "SELECT min(ts) FROM fdbk_g3"))
    flags = [sorted(str(r[0]) for r in con.execute(f"SELECT DISTINCT vrf FROM fdbk_{g}").fetchall())
             for g in ("g1", "g2", "g3")]
    assert flags == [["N", "Y"], ["0", "1"], ["F", "T"]]
    assert _one(con, "SELECT count(*) FROM items_g3 WHERE cat_txt NOT LIKE '% > %'") == 0
    # the stale stats: populated for part of the items only and behind the real review counts
    nulls, n = con.execute("SELECT count(*) - count(n_rv), count(*) FROM items_g1").fetchone()
    assert 0.2 * n < nulls < 0.8 * n
    stale, real = con.execute("SELECT sum(n_rv), sum(n) FROM (SELECT any_value(i.n_rv) AS n_rv, count(f.rv_id) AS n "
                              "FROM items_g1 i LEFT JOIN fdbk_g1 f ON f.itm_id = i.itm_id "
                              "WHERE i.n_rv IS NOT NULL GROUP BY i.itm_id)").fetchone()
    assert stale < 0.9 * real
    # J-shaped ratings, power-law review counts
    stars = dict(con.execute("SELECT rtg, count(*) FROM fdbk_g2 GROUP BY 1").fetchall())
    assert stars[5] > stars[4] > stars[2] and stars[1] > stars[2]
    top, median = con.execute(
        "SELECT max(c), median(c) FROM (SELECT count(*) AS c FROM fdbk_g2 GROUP BY itm_id)").fetchone()
    assert top > 20 * median


def test_soft_deletion_shows_only_in_the_code_lookup(db):
    con = db[1]
    assert _types(con, "items_g2")["st"] == "INTEGER" and _types(con, "items_g1")["st"] == "VARCHAR"
    for table, dead in DELETED.items():
        codes = dict(con.execute(f"SELECT cd, descr FROM ref_cd WHERE tbl = '{table}' AND col = 'st'").fetchall())
        assert len(codes) == 3 and [c for c, d in codes.items() if "delet" in d and "still" not in d] == [dead]
        shares = dict(con.execute(f"SELECT st::VARCHAR, count(*) / sum(count(*)) OVER () FROM {table} GROUP BY 1")
                      .fetchall())
        assert set(shares) == set(codes)
        # three codes in use, the deleted one a minority but not the rarest for items: no shortcut by counts
        assert 0.04 < shares[dead] < max(shares.values()) and min(shares.values()) > 0.04
        if table.startswith("items"):
            assert 0.04 < shares[dead] < 0.2 and shares[dead] < sorted(shares.values())[1]
    # a guess that every description mentioning deletion marks deleted rows fails on half the tables
    mention = con.execute("SELECT count(*) FROM ref_cd WHERE descr ILIKE '%delet%'").fetchone()[0]
    assert mention == len(DELETED) + 3
    # a deleted item's reviews are deleted too
    for g in ("g1", "g2", "g3"):
        live_reviews_of_dead_items = _one(con, f"SELECT count(*) FROM fdbk_{g} f JOIN items_{g} i USING (itm_id) "
                                               f"WHERE i.st::VARCHAR = '{DELETED['items_' + g]}' "
                                               f"AND f.st::VARCHAR <> '{DELETED['fdbk_' + g]}'")
        assert live_reviews_of_dead_items == 0
    # the catalog says nothing about the codes
    comments = " ".join(str(r[0]) for r in con.execute(
        "SELECT comment FROM duckdb_columns() UNION ALL SELECT comment FROM duckdb_tables()").fetchall())
    assert "delet" not in comments.lower()


def test_every_answer_is_distinct_and_depends_on_soft_deletion(env, db):
    from clbench.agents.dbexplore import parse_question
    from clbench.envs.dbexplore.logical import compile_sql

    truths = {qid: _truth(env, db, qid) for qid in env.questions}
    for a, b in ((a, b) for a in truths for b in truths if a != b):
        qa, qb = env.questions[a], env.questions[b]
        assert qa.answer_type != qb.answer_type or not qb.is_correct(truths[a], truths[b]), (a, b)
    latent = env.latent()["releases"]
    changed = 0
    for qid, q in env.questions.items():
        lq = parse_question(q.text)
        blind = dict(latent[str(q.release)][lq.group], item_live="TRUE", review_live="TRUE")
        value = db[q.release].execute(compile_sql(lq, blind)).fetchall()[0][0]
        changed += not q.is_correct(q.parse(value), truths[qid])
    assert changed >= 36  # ignoring deleted rows gives a wrong answer (two top-1 names may survive it)


def test_release2_applies_the_documented_migration(db):
    old, new = db[1], db[2]
    assert _tables(new) == RELEASE1_TABLES - {"attr_g3"} | {"attr_g3_legacy", "itm_attr_g3"}
    assert _one(new, "SELECT count(*) FROM attr_g3_legacy") < 0.8 * _one(new, "SELECT count(*) FROM itm_attr_g3")
    assert _one(new, "SELECT count(*) FROM itm_attr_g3") == _one(old, "SELECT count(*) FROM attr_g3")
    assert _types(new, "items_g2")["prc_cur"].startswith("DECIMAL")
    assert _one(new, "SELECT sum(prc) FROM items_g2") == _one(old, "SELECT sum(prc) FROM items_g2")  # old one stale
    assert _one(new, "SELECT avg(prc_cur) / (avg(prc) / 100) FROM items_g2") > 1.03
    set_, total = new.execute("SELECT count(vrf_st), count(*) FROM fdbk_g1").fetchone()
    assert 0.3 * total < set_ < 0.9 * total
    assert {r[0] for r in new.execute("SELECT DISTINCT vrf_st FROM fdbk_g1 WHERE vrf_st IS NOT NULL").fetchall()} == {
        "verified", "unverified"}
    assert _one(new, "SELECT count(*) FROM fdbk_g1 WHERE vrf = 'Y' AND vrf_st = 'unverified'") > 0
    yr_nulls, ts_nulls, total = new.execute(
        "SELECT count(*) - count(yr), count(*) - count(ts), count(*) FROM fdbk_g3").fetchone()
    assert yr_nulls == 0 and 0.2 * total < ts_nulls < 0.6 * total
    for table in ("items_g1", "fdbk_g2", "tax_g2", "attr_g1"):
        assert new.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall() == \
            old.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()


def _contents(con):
    return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in sorted(_tables(con))}


def _file_contents(path):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return _contents(con)
    finally:
        con.close()


def test_build_is_deterministic_and_cached(db, tmp_path):
    spec = load_task_spec("dbexplore")
    fresh = database_paths(spec, SCALE, tmp_path)
    for release, con in db.items():
        assert _file_contents(fresh[release]) == _contents(con)
    stamps = {r: p.stat().st_mtime_ns for r, p in fresh.items()}
    again = database_paths(spec, SCALE, tmp_path)
    assert again == fresh and {r: p.stat().st_mtime_ns for r, p in again.items()} == stamps
    assert cache_key(spec, 0.03) != cache_key(spec, SCALE)
    assert cache_key({**spec, "seed": 1}, SCALE) != cache_key(spec, SCALE)
    assert sorted(p.name for p in fresh[1].parent.iterdir()) == [".lock", "release1.duckdb", "release2.duckdb"]


def _build(folder):
    from clbench.env import load_task_spec as spec_of
    from clbench.envs.dbexplore.cache import database_paths as build

    return {r: str(p) for r, p in build(spec_of("dbexplore"), SCALE, folder).items()}


def test_parallel_workers_share_one_build(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        a, b = pool.map(_build, [str(tmp_path)] * 2)
    assert a == b
    files = sorted(p.name for p in (tmp_path / "dbexplore").rglob("*.duckdb*"))
    assert files == ["release1.duckdb", "release2.duckdb"]  # no half-built leftovers
    assert len(_file_contents(a[2])) == 12


def test_reward_decays_with_every_query_after_the_first(env, db):
    truth = _truth(env, db, "q02")
    env.reset(options={"instance": "q02", "stateless": True})
    for _ in range(3):
        obs, r, term, trunc, info = env.step("QUERY: SELECT count(*) FROM items_g1")
        assert not term and r == 0.0
    assert info["steps_left"] == 13
    obs, r, term, trunc, info = env.step(f"ANSWER: {truth}")
    assert term and not trunc and r == pytest.approx(0.8 ** 2) and info["instance_reward"] == r
    assert info["raw_metric"] == {"name": "queries_used", "value": 3.0} and info["solved"]
    # the one query that computes the answer is free
    env.reset(options={"instance": "q02"})
    env.step("QUERY: SELECT count(*) FROM items_g1 WHERE prc > 50 AND st <> 'D'")
    assert env.step(f'{{"tool": "answer", "arguments": {{"value": {truth}}}}}')[1] == 1.0
    env.reset(options={"instance": "q02"})
    obs, r, term, *_ , info = env.step(f"ANSWER: {truth + 1}")
    assert term and r == 0.0 and not info["solved"] and "incorrect" in obs


def test_grading_by_answer_type(env, db):
    def score(qid, answer):
        env.reset(options={"instance": qid, "stateless": True})
        return env.step(f"ANSWER: {answer}")[1]

    avg = _truth(env, db, "q01")  # float: within max(0.01, 0.1% relative)
    assert score("q01", avg * 1.0009) == 1.0 and score("q01", avg * 1.003) == 0.0
    assert score("q01", f"${avg:,.4f}") == 1.0
    count = _truth(env, db, "q03")  # int: exact
    assert score("q03", f"{count}.0") == 1.0 and score("q03", count + 1) == 0.0
    name = _truth(env, db, "q10")  # text: case- and space-insensitive
    assert score("q10", "  " + name.upper().replace(" ", "   ") + " ") == 1.0
    assert score("q10", "Nonexistent Category") == 0.0


def test_terminal_observation_states_score_parts_and_expected_answer(env, db):
    truth = _truth(env, db, "q09")
    env.reset(options={"instance": "q09", "stateless": True})
    env.step("QUERY: SELECT 1")
    obs, r, term, *_ = env.step(f"ANSWER: {truth}")
    assert term and r == 1.0  # the query that computes the answer is free
    assert f"is correct; the expected answer was {truth:.6g}" in obs and "- queries used: 1 of 15" in obs
    assert "Instance score: 1.0000 (" in obs and "- reward: 0.8 ** max(0, 1 - 1) = 1.0000" in obs
    env.reset(options={"instance": "q09", "stateless": True})
    for _ in range(2):
        env.step("QUERY: SELECT 1")
    obs, r, *_ = env.step(f"ANSWER: {truth}")
    assert r == pytest.approx(0.8) and "- reward: 0.8 ** max(0, 2 - 1) = 0.8000" in obs
    env.reset(options={"instance": "q09", "stateless": True})
    obs, r, *_ = env.step("ANSWER: 1.5")
    assert r == 0.0 and "is incorrect; the expected answer was" in obs and f"{truth:.6g}" in obs
    assert "Instance score: 0.0000 (" in obs and "- reward: 0 (a wrong answer scores 0)" in obs
    card = env.spec_card
    assert "expected answer" in card.feedback and "0.8 ** max(0, queries - 1)" in card.reward
    assert json.loads(json.dumps(card)) == dict(card)


def test_brief_states_every_scoring_rule_and_a_rejected_query_costs_one(env):
    obs, info = env.reset(options={"instance": "q02", "stateless": True})
    for rule in ("0.8 ** max(0, queries - 1)", "including rejected and failing ones",
                 "an unparseable reply, an empty query or an answer of the wrong type costs no query",
                 "3 such replies in a row end the question with 0", "soft-deleted", "15 queries"):
        assert rule in obs, rule
    obs = env.step("QUERY: DROP TABLE items_g1")[0]
    assert obs.startswith("Rejected:") and "[query 1 of 15 used; 14 left]" in obs
    obs, r, term, trunc, info = env.step("no command here")
    assert "Invalid action" in obs and not term and info["steps_left"] == 15  # 14 queries + the answer


def test_careful_memoryless_explorer_stays_below_0_7_r_max(env, kwargs):
    # Catalog, one probe folding every convention the question's tables need, answer: all 40
    # correct, yet 0.8 ** 2 each, because no convention can be read off the catalog alone.
    rewards = []
    for slot in env.schedule.order(0):
        agent = make_agent("explorer", env)
        obs, info = env.reset(options={"instance": slot.instance_id, "stateless": True})
        out = play_instance(env, agent, obs, info, [])
        assert out["solved"], slot.instance_id
        rewards.append(out["reward"])
    assert np.mean(rewards) <= 0.7 * env.r_max and np.mean(rewards) == pytest.approx(0.64)
    assert np.mean(rewards) > env.r_reference  # folding discovery beats the step-by-step reference


def test_invalid_actions_cost_no_query_but_are_capped(env):
    env.reset(options={"instance": "q03"})
    obs, r, term, trunc, info = env.step("let me think about this")
    assert "Invalid action" in obs and "QUERY:" in obs and not term and info["steps_left"] == 16
    obs, r, term, trunc, info = env.step("ANSWER: about twelve")  # wrong type for an int question
    assert "expected a number" in obs and not term and info["steps_left"] == 16
    obs, r, term, trunc, info = env.step("QUERY:   ")
    assert term and r == 0.0 and "Too many invalid actions" in obs


def test_sixteenth_query_ends_with_zero(env):
    env.reset(options={"instance": "q04"})
    for i in range(15):
        obs, r, term, trunc, info = env.step("QUERY: SELECT 1")
        assert not term
    assert "15 of 15 used; 0 left" in obs
    obs, r, term, trunc, info = env.step("QUERY: SELECT 2")
    assert term and not trunc and r == 0.0 and "budget" in obs


def test_grammar_variants(env):
    env.reset(options={"instance": "q05"})
    obs = env.step("I will look at the tables first.\nQUERY: SELECT count(*) AS n FROM tax_g1")[0]
    assert obs.startswith("n\n19")
    obs = env.step("query: ```sql\nSELECT count(*) AS m FROM tax_g2\n```")[0]
    assert obs.startswith("m\n21")
    obs = env.step('{"tool": "query_sql", "arguments": {"sql": "SELECT nope FROM items_g1"}}')[0]
    assert obs.startswith("Error: BinderException") and "3 of 15 used" in obs  # errors verbatim, and they count


def test_observation_brief_notice_and_result_caps(env):
    obs, info = env.reset(options={"instance": "q06", "stateless": True})
    assert "data analyst" in obs and "15 queries" in obs and "QUERY:" in obs
    assert "Database: release 1." in obs and "Notice" not in obs and "Answer type: int" in obs
    assert env.questions["q06"].text in obs
    obs = env.step("QUERY: SELECT rv_id, rtg FROM fdbk_g1")[0]
    assert "[showing 50 of" in obs and len(obs.splitlines()) == 53
    obs = env.step("QUERY: SELECT repeat('x', 10000) AS long")[0]
    assert "output cut at 4000 characters" in obs

    shown = gym.make(ENV, render_mode="ansi", scale=SCALE, cache_dir=env.cache_dir)
    assert shown.reset(seed=0)[0] == shown.render()
    shown.close()


def test_stateless_jump_after_migration_uses_the_migrated_database(env):
    obs, info = env.reset(options={"instance": "q25", "stateless": True})
    assert "Database: release 2." in obs and "Notice: the database was migrated" in obs
    assert info["variant"] == "release-2"
    obs = env.step("QUERY: SELECT count(*) - count(yr) AS missing FROM fdbk_g3")[0]
    assert obs.startswith("missing\n0")
    env.reset(options={"instance": "q05", "stateless": True})
    assert env.step("QUERY: SELECT yr FROM fdbk_g3")[0].startswith("Error: BinderException")


HOSTILE = [
    "COPY items_g1 TO '{out}'",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/hostname')",
    "FROM glob('/*')",
    "SELECT * FROM '{release2}'",
    "ATTACH '{release2}' AS other",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "RESET lock_configuration",
    "PRAGMA enable_profiling",
    "CALL pragma_version()",
    "CREATE TEMP TABLE answers AS SELECT 1",
    "DROP TABLE items_g1",
    "DELETE FROM fdbk_g1",
    "SELECT 1; DROP TABLE items_g1",
    "EXPORT DATABASE '{out}'",
]


def test_hostile_queries_are_refused(env, tmp_path):
    out = tmp_path / "leak.csv"
    release2 = env.database_paths()[2]
    env.reset(options={"instance": "q07", "stateless": True})
    for k, sql in enumerate(HOSTILE):
        if k and k % 10 == 0:
            env.reset(options={"instance": "q07", "stateless": True})
        obs = env.step("QUERY: " + sql.format(out=out, release2=release2))[0]
        assert obs.startswith(("Rejected:", "Error:")), (sql, obs)
    assert not out.exists() and not list(tmp_path.iterdir())
    obs = env.step("QUERY: SELECT count(*) AS n FROM items_g1")[0]
    assert obs.startswith("n\n") and int(obs.splitlines()[1]) > 0
    # nothing but the data: no views, macros or extra tables that could hold answers
    obs = env.step("QUERY: SELECT count(*) AS n FROM duckdb_views() WHERE NOT internal")[0]
    assert obs.startswith("n\n0")
    obs = env.step("QUERY: SELECT count(*) AS n FROM duckdb_functions() WHERE NOT internal")[0]
    assert obs.startswith("n\n0")
    obs = env.step("QUERY: SELECT string_agg(table_name, ',' ORDER BY table_name) AS t FROM duckdb_tables()")[0]
    assert set(obs.splitlines()[1].split(",")) == RELEASE1_TABLES


def test_runaway_query_is_interrupted_and_env_keeps_working(kwargs):
    env = gym.make(ENV, query_timeout=1.0, **kwargs).unwrapped
    env.reset(seed=0)
    start = time.perf_counter()
    obs = env.step("QUERY: SELECT count(*) FROM fdbk_g1 a, fdbk_g1 b, fdbk_g1 c "
                   "WHERE hash(a.rv_id, b.rv_id, c.rv_id) = 42")[0]
    assert "interrupted after the 1 s time limit" in obs and time.perf_counter() - start < 6
    obs = env.step("QUERY: SELECT count(*) AS n FROM tax_g1")[0]
    assert obs.startswith("n\n19")
    env.close()


def test_the_stateless_reference_has_headroom(env):
    # test_contract: the oracle and the stateless reference reproduce r_max and r_reference at this
    # scale (their query counts do not depend on it); test_calibration_at_default_scale at full size
    assert env.r_reference < 0.8 * env.r_max


@pytest.mark.slow
def test_calibration_at_default_scale(kwargs):  # 10-20 s: builds and plays the full-size database
    full = {"cache_dir": kwargs["cache_dir"]}
    env = gym.make(ENV).unwrapped
    assert stateless_mean(ENV, "oracle", full) == pytest.approx(env.r_max, abs=1e-6)
    assert stateless_mean(ENV, "reference", full) == pytest.approx(env.r_reference, abs=1e-6)
    assert stateless_mean(ENV, "explorer", full) <= 0.7 * env.r_max
    paths = gym.make(ENV, **full).unwrapped.database_paths()
    cons = {r: open_connection(p) for r, p in paths.items()}
    truths = {qid: q.answer(cons[q.release]) for qid, q in env.questions.items()}
    for r, con in cons.items():
        close_connection(paths[r], con)
    for a, b in ((a, b) for a in truths for b in truths if a != b):  # no question accepts another's answer
        qa, qb = env.questions[a], env.questions[b]
        assert qa.answer_type != qb.answer_type or not qb.is_correct(truths[a], truths[b]), (a, b)


def _stateful_queries(kwargs, seed=0):
    """(rewards by position, [(position, variant, action)]) of one stateful reference rollout."""
    env = gym.make(ENV, **kwargs)
    agent = make_agent("reference", env, seed=seed)
    rewards, actions = [], []
    obs, info = env.reset(seed=seed)
    for pos in range(40):
        if pos:
            obs, info = env.reset()
        traj = []
        out = play_instance(env, agent, obs, info, traj)
        assert out["error"] is None and out["solved"], (info["instance_id"], traj[-2:])
        rewards.append(out["reward"])
        actions += [(pos, info["variant"], t["action"]) for t in traj if t["event"] == "step"]
    env.close()
    return rewards, actions


def test_reference_learns_once_and_reexplores_only_what_changed(kwargs):
    rewards, actions = _stateful_queries(kwargs, seed=2)
    catalog = [pos for pos, _, a in actions if "duckdb_tables()" in a]
    assert catalog == [0, 20]  # once, then again at the migration notice
    assert next(a for pos, _, a in actions if pos == 20).startswith("QUERY: SELECT t.table_name")
    summarized = {v: [a.split()[-1] for _, vv, a in actions if vv == v and a.startswith("QUERY: SUMMARIZE")]
                  for v in ("release-1", "release-2")}
    assert len(summarized["release-1"]) == len(set(summarized["release-1"]))
    assert set(summarized["release-2"]) <= CHANGED_BY_MIGRATION and summarized["release-2"]
    assert rewards[20] < np.mean(rewards[15:20]) and rewards[-5:] == [1.0] * 5


def test_reference_notices_a_migration_from_a_failing_query(env):
    agent = make_agent("reference", env)
    obs, info = env.reset(options={"instance": "q13", "stateless": True})  # learns attr_g3 (release 1)
    assert play_instance(env, agent, obs, info, [])["solved"]
    obs, info = env.reset(options={"instance": "q27", "stateless": True})
    hidden = re.sub(r"Database: release 2\.\nNotice:[^\n]*", "Database: release 1.", obs)  # no notice
    assert "Notice" not in hidden
    agent.begin_instance(hidden, info)
    steps, obs, done = [], hidden, False
    while not done:
        action = agent.act(obs, info)
        obs, r, done, trunc, info = env.step(action)
        steps.append((action, obs))
    first_action, first_obs = steps[0]
    assert "FROM attr_g3 " in first_action and "does not exist" in first_obs  # its old map fails
    assert "duckdb_tables()" in steps[1][0]  # so it re-reads the catalog
    assert info["solved"] and "itm_attr_g3" in steps[-2][0]


def test_reference_state_round_trip_keeps_what_it_learned(env):
    agent = make_agent("reference", env)
    obs, info = env.reset(seed=0)
    play_instance(env, agent, obs, info, [])  # q01: explores items_g2
    clone = make_agent("reference", env)
    clone.load_state_dict(agent.state_dict())
    obs, info = env.reset(options={"instance": "q03"})  # the same table: one query suffices
    assert play_instance(env, clone, obs, info, [])["reward"] == 1.0
    fresh = make_agent("reference", env)
    obs, info = env.reset(options={"instance": "q03", "stateless": True})
    assert play_instance(env, fresh, obs, info, [])["reward"] < 1.0


def test_random_agent_is_a_floor(env):
    agent = make_agent("random", env, seed=1)
    obs, info = env.reset(seed=0)
    total = 0.0
    for i in range(10):
        if i:
            obs, info = env.reset()
        total += play_instance(env, agent, obs, info, [])["reward"]
    assert total / 10 < 0.2


def test_must_show_reference_rollout(kwargs, tmp_path):
    card = run(RunConfig(ENV, "reference", str(tmp_path / "run"), rollouts=5, workers=2, env_kwargs=kwargs),
               say=lambda m: None)
    t = card["tasks"]["dbexplore/reference"]
    assert t["normalized_gain"]["mean"] >= 0.3 and t["normalized_gain"]["ci"][0] > 0
    assert t["mean_reward_stateless"] < 0.8 * t["r_max"]
    curve = t["curves"]["stateful"]["mean"]
    assert t["curves"]["boundaries"] == [0, 20]
    # a visible dip right after the migration, then recovery
    assert curve[20] < np.mean(curve[15:20]) - 0.1
    assert np.mean(curve[30:]) > curve[20] + 0.1
