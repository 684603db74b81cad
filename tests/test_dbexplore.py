"""DBExplore-v3: real DuckDB files at a small scale (0.02, ~1000 products per group).

The generated data's per-group conventions and the documented migration, the cache, reward
semantics, hostile SQL, the scripted agents, the memoryless families against the reference,
fresh worlds and the issue's must-show numbers. The env contract (check_env, reset modes,
determinism, info keys, spec card, r_max and r_reference at this scale) is checked for every env
in tests/test_contract.py. The default-scale build time is a benchmark
(benchmarks/bench_dbexplore.py), not a test.
"""
from __future__ import annotations

import json
import multiprocessing
import os
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

ENV = "clbench/DBExplore-v3"
SCALE = 0.02
SLOW = bool(os.environ.get("CLBENCH_SLOW"))
# the canonical world (tasks/dbexplore/default.yaml `world`): office m2, electronics q4, instruments k7
OFFICE, ELEC, INSTR = ("prod_m2", "rvw_m2"), ("prod_q4", "rvw_q4"), ("prod_k7", "rvw_k7")
RELEASE1_TABLES = {"prod_m2", "prod_q4", "prod_k7", "rvw_m2", "rvw_q4", "rvw_k7",
                   "cat_m2", "cat_q4", "props_m2", "props_k7", "cd_map", "qtake_m2", "qtake_q4", "qtake_k7"}
#: each group's reviews table, time expression and fiscal start month (release 1; the migration moves electronics')
FISCAL = {"rvw_m2": ("epoch_ms(f.ts * 1000)", 11), "rvw_q4": ("CAST(f.ts AS TIMESTAMP)", 2),
          "rvw_k7": ("epoch_ms(f.ts)", 9)}
#: the status code that marks a soft-deleted row, per table
DELETED = {"prod_m2": "D", "prod_q4": "7", "prod_k7": "X", "rvw_m2": "1", "rvw_q4": "R", "rvw_k7": "9"}


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
    return env._truth(env.questions[qid])


def _tables(con):
    return {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}


def _types(con, table):
    return {r[0]: r[1] for r in con.execute(f"DESCRIBE {table}").fetchall()}


def _play(env, agent, iid, stateless=True):
    obs, info = env.reset(options={"instance": iid, "stateless": stateless})
    return play_instance(env, agent, obs, info, [])


def test_schedule_variants_and_facts_stay_private(env):
    card = env.spec_card
    assert card.instances == 40 and card.r_max == 1.0
    assert [v["instances"] for v in card.variants] == [20, 20]
    order = env.schedule.order(5)
    assert {s.instance_id for s in order[:20]} == {f"q{i:02d}" for i in range(1, 21)}
    assert all(env.questions[s.instance_id].release == 2 for s in order[20:])
    for s in order:
        facts = env.instance_facts(s.instance_id)
        assert len(facts) >= 2 and all(f["mentions"] for f in facts)
        obs, info = env.reset(options={"instance": s.instance_id, "stateless": True})
        assert set(info) == {"instance_id", "position", "variant", "variant_position", "step", "steps_left"}
        assert not any(m["text"] in obs for f in facts for m in f["mentions"])
        assert "release" not in obs.lower() and "migrat" not in obs.lower()  # nothing says when the drift is
    with pytest.raises(KeyError):
        env.instance_facts("q99")


def test_release1_hides_per_group_conventions(db):
    con = db[1]
    assert _tables(con) == RELEASE1_TABLES  # no attributes for electronics, no category tree for instruments
    assert {_types(con, t)["prc"] for t in ("prod_m2", "prod_q4", "prod_k7")} == {"DOUBLE"}  # types say nothing
    assert _one(con, "SELECT bool_and(prc = round(prc)) FROM prod_q4")  # whole numbers: cents
    # office prices are in a unit whose scale the data does not show: not whole, not cents
    assert not _one(con, "SELECT bool_and(prc = round(prc)) FROM prod_m2")
    assert 1e9 < _one(con, "SELECT max(ts) FROM rvw_m2") < 1e10  # epoch s
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", _one(con, "SELECT min(ts) FROM rvw_q4"))
    assert _one(con, "SELECT min(ts) FROM rvw_k7") > 1e12  # epoch ms
    flags = [sorted(str(r[0]) for r in con.execute(f"SELECT DISTINCT vrf FROM {t}").fetchall())
             for t in ("rvw_m2", "rvw_q4", "rvw_k7")]
    assert flags == [["N", "Y"], ["0", "1"], ["F", "T"]]
    assert _one(con, "SELECT count(*) FROM prod_k7 WHERE cat_txt NOT LIKE '% > %'") == 0
    # comments name roles and groups, never units, encodings or calendars
    comments = " ".join(str(r[0]) for r in con.execute(
        "SELECT comment FROM duckdb_columns() UNION ALL SELECT comment FROM duckdb_tables()").fetchall()).lower()
    months = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
              "november", "december"]
    assert "electronics" in comments and not any(w in comments for w in ["cent", "dollar", "epoch", "unit", "start"]
                                                 + months)
    # the stale stats: populated for part of the items only and behind the real review counts
    nulls, n = con.execute("SELECT count(*) - count(n_rv), count(*) FROM prod_m2").fetchone()
    assert 0.2 * n < nulls < 0.8 * n
    stale, real = con.execute("SELECT sum(n_rv), sum(n) FROM (SELECT any_value(i.n_rv) AS n_rv, count(f.rv_id) AS n "
                              "FROM prod_m2 i LEFT JOIN rvw_m2 f ON f.itm_id = i.itm_id "
                              "WHERE i.n_rv IS NOT NULL GROUP BY i.itm_id)").fetchone()
    assert stale < 0.9 * real
    stars = dict(con.execute("SELECT rtg, count(*) FROM rvw_q4 GROUP BY 1").fetchall())
    assert stars[5] > stars[4] > stars[2] and stars[1] > stars[2]
    top, median = con.execute(
        "SELECT max(c), median(c) FROM (SELECT count(*) AS c FROM rvw_q4 GROUP BY itm_id)").fetchone()
    assert top > 20 * median


def _alignment(con, reviews: str, intake: str, ts: str) -> dict[int, float]:
    """{start month: share of the intake report's quarters whose count the review dates give under it}."""
    rows = con.execute(
        f"SELECT c.s, avg(CASE WHEN k.rv_ct = c.n THEN 1.0 ELSE 0.0 END) FROM {intake} k JOIN ("
        f"SELECT s.s, year({ts}) + CASE WHEN s.s > 1 AND month({ts}) >= s.s THEN 1 ELSE 0 END AS fy, "
        f"((month({ts}) - s.s + 12) % 12) // 3 + 1 AS fq, count(*) AS n FROM {reviews} f, range(1, 13) s(s) "
        f"WHERE f.ts IS NOT NULL GROUP BY ALL) c ON k.fy = c.fy AND k.fq = c.fq GROUP BY c.s").fetchall()
    return {int(m): float(share) for m, share in rows}


def test_fiscal_calendars_show_only_by_testing_start_months_against_the_intake_report(db):
    con = db[1]
    starts = []
    for reviews, (ts, start) in FISCAL.items():
        intake = "qtake_" + reviews.split("_")[1]
        assert _types(con, intake) == {"fy": "SMALLINT", "fq": "TINYINT", "rv_ct": "INTEGER"}  # no month anywhere
        assert _one(con, f"SELECT count(*) FROM {intake}") == 44  # fiscal years 2008-2018, four quarters each
        share = _alignment(con, reviews, intake, ts)
        assert share[start] == 1.0 and max(v for m, v in share.items() if m != start) < 0.5, share
        starts.append(start)
    assert len(set(starts)) == 3  # no single guess of a start month is right for every group


def test_no_fixed_fiscal_guess_is_right_for_every_group_in_any_world():
    from clbench.envs.dbexplore import world as worlds

    spec = load_task_spec("dbexplore")
    for n in range(1, 51):
        env = gym.make(ENV, world_seed=n, scale=SCALE).unwrapped  # draws the world; builds nothing
        w = env.world
        before = [w["groups"][g]["fiscal_start"] for g in worlds.GROUPS]
        after = [worlds.migrated(w)["groups"][g]["fiscal_start"] for g in worlds.GROUPS]
        assert len(set(before)) == 3 and len(set(after)) >= 2 and after != before, (n, before, after)
        assert 1 not in before + after  # calendar years never: the naming rule always matters
    assert spec["intake_fiscal_years"] == [2008, 2018]


def test_soft_deletion_shows_only_in_the_code_lookup(db):
    con = db[1]
    assert _types(con, "prod_q4")["st"] == "INTEGER" and _types(con, "prod_m2")["st"] == "VARCHAR"
    for table, dead in DELETED.items():
        codes = dict(con.execute(f"SELECT cd, descr FROM cd_map WHERE tbl = '{table}' AND col = 'st'").fetchall())
        assert len(codes) == 3 and [c for c, d in codes.items() if "delet" in d and "still" not in d] == [dead]
        shares = dict(con.execute(f"SELECT st::VARCHAR, count(*) / sum(count(*)) OVER () FROM {table} GROUP BY 1")
                      .fetchall())
        assert set(shares) == set(codes)
        assert 0.04 < shares[dead] < max(shares.values()) and min(shares.values()) > 0.04
    mention = con.execute("SELECT count(*) FROM cd_map WHERE descr ILIKE '%delet%'").fetchone()[0]
    assert mention == len(DELETED) + 3  # a keyword alone misreads half the tables
    for items, reviews in (OFFICE, ELEC, INSTR):  # a deleted item's reviews are deleted too
        assert _one(con, f"SELECT count(*) FROM {reviews} f JOIN {items} i USING (itm_id) "
                         f"WHERE i.st::VARCHAR = '{DELETED[items]}' AND f.st::VARCHAR <> '{DELETED[reviews]}'") == 0


def test_every_answer_is_distinct_and_depends_on_soft_deletion(env, db):
    from clbench.envs.dbexplore.logical import compile_sql

    truths = {qid: _truth(env, db, qid) for qid in env.questions}
    for a, b in ((a, b) for a in truths for b in truths if a != b):
        qa, qb = env.questions[a], env.questions[b]
        assert qa.answer_type != qb.answer_type or not qb.is_correct(truths[a], truths[b]), (a, b)
    latent = env.latent()["releases"]
    changed = 0
    for qid, q in env.questions.items():
        lq = q.logical
        blind = dict(latent[str(q.release)][lq.group], item_live="TRUE", review_live="TRUE")
        value = db[q.release].execute(compile_sql(lq, blind)).fetchall()[0][0]
        changed += not q.is_correct(q.parse(value), truths[qid])
    assert changed >= 36  # ignoring deleted rows gives a wrong answer (two top-1 names may survive it)


def test_release2_applies_the_documented_migration(db):
    old, new = db[1], db[2]
    assert _tables(new) == RELEASE1_TABLES - {"props_k7"} | {"props_k7_legacy", "itm_props_k7"}
    assert _one(new, "SELECT count(*) FROM props_k7_legacy") < 0.8 * _one(new, "SELECT count(*) FROM itm_props_k7")
    assert _one(new, "SELECT count(*) FROM itm_props_k7") == _one(old, "SELECT count(*) FROM props_k7")
    assert _types(new, "prod_q4")["prc_cur"].startswith("DECIMAL")
    assert _one(new, "SELECT sum(prc) FROM prod_q4") == _one(old, "SELECT sum(prc) FROM prod_q4")  # old one stale
    assert _one(new, "SELECT avg(prc_cur) / (avg(prc) / 100) FROM prod_q4") > 1.03
    # office prices re-stated in place in another unit: same column, same catalog
    assert _types(new, "prod_m2") == _types(old, "prod_m2")
    assert _one(new, "SELECT sum(prc) FROM prod_m2") / _one(old, "SELECT sum(prc) FROM prod_m2") == \
        pytest.approx(0.94 / 1.37, rel=1e-3)
    set_, total = new.execute("SELECT count(vrf_st), count(*) FROM rvw_m2").fetchone()
    assert 0.3 * total < set_ < 0.9 * total
    assert {r[0] for r in new.execute("SELECT DISTINCT vrf_st FROM rvw_m2 WHERE vrf_st IS NOT NULL").fetchall()} == {
        "verified", "unverified"}
    assert _one(new, "SELECT count(*) FROM rvw_m2 WHERE vrf = 'Y' AND vrf_st = 'unverified'") > 0
    # electronics' fiscal calendar moved: its intake report is restated, and lines up only under the new start
    assert _tables(new) >= {"qtake_q4"} and _alignment(new, "rvw_q4", "qtake_q4", "CAST(f.ts AS TIMESTAMP)")[5] == 1.0
    yr_nulls, ts_nulls, total = new.execute(
        "SELECT count(*) - count(yr), count(*) - count(ts), count(*) FROM rvw_k7").fetchone()
    assert yr_nulls == 0 and 0.2 * total < ts_nulls < 0.6 * total
    for table in ("prod_k7", "rvw_q4", "cat_q4", "props_m2", "qtake_m2", "qtake_k7"):
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


def _canonical_build_spec():
    from clbench.envs.dbexplore.world import canonical

    spec = load_task_spec("dbexplore")
    return dict(spec, world=canonical(spec))


def test_build_is_deterministic_and_cached(env, db, tmp_path):
    spec = _canonical_build_spec()
    assert spec == env.build_spec
    fresh = database_paths(spec, SCALE, tmp_path)
    for release, con in db.items():
        assert _file_contents(fresh[release]) == _contents(con)
    stamps = {r: p.stat().st_mtime_ns for r, p in fresh.items()}
    again = database_paths(spec, SCALE, tmp_path)
    assert again == fresh and {r: p.stat().st_mtime_ns for r, p in again.items()} == stamps
    assert cache_key(spec, 0.03) != cache_key(spec, SCALE)
    assert cache_key({**spec, "seed": 1}, SCALE) != cache_key(spec, SCALE)
    other = gym.make(ENV, world_seed=1, scale=SCALE, cache_dir=str(tmp_path)).unwrapped
    assert cache_key(other.build_spec, SCALE) != cache_key(spec, SCALE)  # a world has its own files
    assert sorted(p.name for p in fresh[1].parent.iterdir()) == [".lock", "release1.duckdb", "release2.duckdb"]


def _build(folder):
    from clbench.envs.dbexplore.cache import database_paths as build

    return {r: str(p) for r, p in build(_canonical_build_spec(), SCALE, folder).items()}


def test_parallel_workers_share_one_build(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        a, b = pool.map(_build, [str(tmp_path)] * 2)
    assert a == b
    files = sorted(p.name for p in (tmp_path / "dbexplore").rglob("*.duckdb*"))
    assert files == ["release1.duckdb", "release2.duckdb"]  # no half-built leftovers
    assert len(_file_contents(a[2])) == 15


def test_reward_decays_with_every_query_after_the_first(env, db):
    truth = _truth(env, db, "q03")
    env.reset(options={"instance": "q03", "stateless": True})
    for _ in range(3):
        obs, r, term, trunc, info = env.step("QUERY: SELECT count(*) FROM prod_q4")
        assert not term and r == 0.0
    assert info["steps_left"] == 13
    obs, r, term, trunc, info = env.step(f"ANSWER: {truth}")
    assert term and not trunc and r == pytest.approx(0.8 ** 2) and info["instance_reward"] == r
    assert info["raw_metric"] == {"name": "queries_used", "value": 3.0} and info["solved"]
    env.reset(options={"instance": "q03"})  # the one query that computes the answer is free
    env.step("QUERY: SELECT 1")
    assert env.step(f'{{"tool": "answer", "arguments": {{"value": {truth}}}}}')[1] == 1.0
    env.reset(options={"instance": "q03"})
    obs, r, term, *_, info = env.step(f"ANSWER: {truth + 1}")
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
    assert term and r == 1.0
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
                 "3 such replies in a row end the question with 0", "soft-deleted", "15 queries", "fiscal year"):
        assert rule in obs, rule
    obs = env.step("QUERY: DROP TABLE prod_m2")[0]
    assert obs.startswith("Rejected:") and "[query 1 of 15 used; 14 left]" in obs
    obs, r, term, trunc, info = env.step("no command here")
    assert "Invalid action" in obs and not term and info["steps_left"] == 15  # 14 queries + the answer


def _family_means(env, grid_only: dict | None = None) -> dict[str, float]:
    """Stateless mean of every point of every policy family's grid (the red team's search)."""
    import itertools

    means = {}
    for family, (path, grid) in env.policy_families.items():
        grid = (grid_only or {}).get(family, grid)
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            params = dict(zip(keys, values))
            rewards = [_play(env, make_agent(path, env, **params), s.instance_id)["reward"]
                       for s in env.schedule.order(0)]
            means[f"{family}{params}"] = float(np.mean(rewards))
    return means


def test_memoryless_families_stay_below_the_reference(env):
    # The one-look catalog reader of issue 28 (0.8 on all 40 in v1) guessing a fiscal month (every
    # month with CLBENCH_SLOW=1) instead of testing it, the careful explorer and a keyword reading of
    # the codes, over their grids: none reaches the stateless reference
    means = _family_means(env)
    best = max(means, key=means.get)
    assert means[best] < env.r_reference - 0.02, (best, means[best], env.r_reference)
    assert max(means.values()) < 0.8 * env.r_max  # and no memoryless play is near 0.8 per question


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
    obs = env.step("I will look at the tables first.\nQUERY: SELECT count(*) AS n FROM cat_m2")[0]
    assert obs.startswith("n\n19")
    obs = env.step("query: ```sql\nSELECT count(*) AS m FROM cat_q4\n```")[0]
    assert obs.startswith("m\n21")
    obs = env.step('{"tool": "query_sql", "arguments": {"sql": "SELECT nope FROM prod_m2"}}')[0]
    assert obs.startswith("Error: BinderException") and "3 of 15 used" in obs  # errors verbatim, and they count


def test_observation_brief_and_result_caps(env):
    obs, info = env.reset(options={"instance": "q06", "stateless": True})
    assert "data analyst" in obs and "15 queries" in obs and "QUERY:" in obs
    assert "Notice" not in obs and "Answer type: int" in obs
    assert env.questions["q06"].text in obs
    obs = env.step("QUERY: SELECT rv_id, rtg FROM rvw_m2")[0]
    assert "[showing 50 of" in obs and len(obs.splitlines()) == 53
    obs = env.step("QUERY: SELECT repeat('x', 10000) AS long")[0]
    assert "output cut at 4000 characters" in obs

    shown = gym.make(ENV, render_mode="ansi", scale=SCALE, cache_dir=env.cache_dir)
    assert shown.reset(seed=0)[0] == shown.render()
    shown.close()


def test_stateless_jump_after_migration_uses_the_migrated_database(env):
    obs, info = env.reset(options={"instance": "q25", "stateless": True})
    assert info["variant"] == "release-2" and "migrat" not in obs.lower()
    obs = env.step("QUERY: SELECT count(*) - count(yr) AS missing FROM rvw_k7")[0]
    assert obs.startswith("missing\n0")
    env.reset(options={"instance": "q05", "stateless": True})
    assert env.step("QUERY: SELECT yr FROM rvw_k7")[0].startswith("Error: BinderException")


HOSTILE = [
    "COPY prod_m2 TO '{out}'",
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
    "DROP TABLE prod_m2",
    "DELETE FROM rvw_m2",
    "SELECT 1; DROP TABLE prod_m2",
    "EXPORT DATABASE '{out}'",
    "SELECT * FROM query('SELECT 1')",
    "SELECT * FROM query_table('prod_m2')",
]


def test_hostile_queries_are_refused(env, tmp_path):
    out = tmp_path / "leak.csv"
    release2 = env.database_paths()[2]
    env.reset(options={"instance": "q07", "stateless": True})
    refused = []
    for k, sql in enumerate(HOSTILE):
        if k and k % 10 == 0:
            env.reset(options={"instance": "q07", "stateless": True})
        obs = env.step("QUERY: " + sql.format(out=out, release2=release2))[0]
        refused.append(obs.startswith(("Rejected:", "Error:")))
    assert all(refused[:17]), [s for s, ok in zip(HOSTILE, refused) if not ok]
    assert not out.exists() and not list(tmp_path.iterdir())
    obs = env.step("QUERY: SELECT count(*) AS n FROM prod_m2")[0]
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
    obs = env.step("QUERY: SELECT count(*) FROM rvw_m2 a, rvw_m2 b, rvw_m2 c "
                   "WHERE hash(a.rv_id, b.rv_id, c.rv_id) = 42")[0]
    assert "interrupted after the 1 s time limit" in obs and time.perf_counter() - start < 6
    obs = env.step("QUERY: SELECT count(*) AS n FROM cat_m2")[0]
    assert obs.startswith("n\n19")
    env.close()


def test_the_stateless_reference_has_headroom(env):
    # test_contract: the oracle and the stateless reference reproduce r_max and r_reference at this
    # scale (their query counts do not depend on it); test_calibration_at_default_scale at full size.
    # Below 0.8 per question: the catalog costs a query and a unit no look shows costs answers
    assert env.r_reference <= 0.8 * env.r_max - 0.02


@pytest.mark.slow
def test_calibration_at_default_scale(kwargs):  # builds and plays the full-size database
    full = {"cache_dir": kwargs["cache_dir"]}
    env = gym.make(ENV, **full).unwrapped
    assert stateless_mean(ENV, "oracle", full) == pytest.approx(env.r_max, abs=1e-6)
    assert stateless_mean(ENV, "reference", full) == pytest.approx(env.r_reference, abs=1e-6)
    truths = {qid: env._truth(q) for qid, q in env.questions.items()}
    for a, b in ((a, b) for a in truths for b in truths if a != b):  # no question accepts another's answer
        qa, qb = env.questions[a], env.questions[b]
        assert qa.answer_type != qb.answer_type or not qb.is_correct(truths[a], truths[b]), (a, b)
    env.close()


def _stateful(kwargs, seed=0, **agent_kwargs):
    """(rewards by position, [(position, action)]) of one stateful reference rollout."""
    env = gym.make(ENV, **kwargs)
    agent = make_agent("reference", env, seed=seed, **agent_kwargs)
    rewards, actions = [], []
    obs, info = env.reset(seed=seed)
    for pos in range(40):
        if pos:
            obs, info = env.reset()
        traj = []
        out = play_instance(env, agent, obs, info, traj)
        assert out["error"] is None
        rewards.append(out["reward"])
        actions += [(pos, t["action"]) for t in traj if t["event"] == "step"]
    env.close()
    return rewards, actions


def test_reference_learns_what_no_look_gives_and_relearns_after_the_migration(kwargs):
    rewards, actions = _stateful(kwargs, seed=2)
    catalog = [pos for pos, a in actions if "duckdb_tables()" in a]
    assert catalog[0] == 0 and len(catalog) <= 8  # the catalog once, again only after a surprise
    assert sum(r == 1.0 for r in rewards[:20]) >= 12  # one query per question once it knows
    assert rewards[-5:] == [1.0] * 5  # units and calendars relearned after the silent migration
    frozen, _ = _stateful(kwargs, seed=2, freeze_at=20)
    assert frozen[:20] == rewards[:20] and np.mean(frozen[20:]) < np.mean(rewards[20:]) - 0.1  # the drift is real


def test_reference_notices_a_migration_from_a_failing_query(env):
    agent = make_agent("reference", env)
    assert _play(env, agent, "q13")["solved"]  # learns where instrument attributes are (release 1)
    obs, info = env.reset(options={"instance": "q27", "stateless": True})
    traj = []
    out = play_instance(env, agent, obs, info, traj)
    steps = [t for t in traj if t["event"] == "step"]
    assert "FROM props_k7 " in steps[0]["action"] and "does not exist" in steps[0]["observation"]
    assert "duckdb_tables()" in steps[1]["action"]  # so it re-reads the catalog
    assert out["solved"] and "itm_props_k7" in steps[-2]["action"]


def test_reference_state_round_trip_keeps_what_it_learned(env):
    agent = make_agent("reference", env)
    assert _play(env, agent, "q02", stateless=False)["reward"] == 0.0  # office prices: a unit no look shows
    clone = make_agent("reference", env)
    clone.load_state_dict(agent.state_dict())
    (rate,) = [v for key, v in clone.knowledge["rates"].items() if key.startswith("office")]
    assert rate == pytest.approx(1.37, rel=1e-3)  # the unit, taught by q02's feedback
    assert _play(env, clone, "q16", stateless=False)["reward"] == 1.0  # and the catalog: one query
    assert _play(env, make_agent("reference", env), "q16")["reward"] == 0.8  # a fresh agent reads it again


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
    assert t["mean_reward_stateless"] <= 0.8 * t["r_max"] - 0.02
    curve = t["curves"]["stateful"]["mean"]
    assert t["curves"]["boundaries"] == [0, 20]
    assert curve[20] < np.mean(curve[15:20]) - 0.1  # a dip right after the migration, then recovery


# ---------------------------------------------------------------------- worlds (issue 29)
def test_public_text_names_no_latent_value(env):
    import clbench.agents.dbexplore as agents
    import clbench.envs.dbexplore as pkg
    from clbench.envs.dbexplore import cache, generator, logical, migration, questions, world

    secrets = env.public_secrets()
    assert {"prod_q4", "rvw_k7", "cd_map", "1.37", "0.94"} <= set(secrets)
    texts = [json.dumps(env.agent_card), json.dumps(dict(env.spec_card)), type(env).__doc__, pkg.__doc__,
             agents.__doc__] + [m.__doc__ for m in (cache, generator, logical, migration, questions, world)]
    for text in texts:
        assert not [s for s in secrets if s in text]


def test_train_split_and_worlds_draw_their_own_structure(env, kwargs):
    canon = env.latent()["releases"]
    for other in (gym.make(ENV, world_seed=3, **kwargs).unwrapped, gym.make(ENV, split="train", **kwargs).unwrapped):
        assert other.world != env.world
        maps = other.latent()["releases"]
        tables = {m["items"] for m in maps["1"].values()} | {m["reviews"] for m in maps["1"].values()}
        assert not tables & ({m["items"] for m in canon["1"].values()} | {m["reviews"] for m in canon["1"].values()})
        same_text = 0
        for qid, q in other.questions.items():
            ref = env.questions[qid]
            lq, lr = q.logical, ref.logical
            assert (lq.measure, lq.entity, lq.fiscal, q.answer_type, q.release) == \
                (lr.measure, lr.entity, lr.fiscal, ref.answer_type, ref.release)
            same_text += q.text == ref.text
            other._truth(q)  # every drawn question has an answer in its world
        assert same_text <= 10
        ids = {s.instance_id for s in other.schedule.order(0)}
        assert not ids & set(env.questions) if other.split == "train" else ids == set(env.questions)
        other.close()


def _world_numbers(world_seed, kwargs) -> dict:
    kw = dict(kwargs, world_seed=world_seed)
    env = gym.make(ENV, **kw).unwrapped
    sl = [_play(env, make_agent("reference", env), s.instance_id)["reward"] for s in env.schedule.order(0)]
    oracle = [_play(env, make_agent("oracle", env), s.instance_id)["reward"] for s in env.schedule.order(0)]
    families = _family_means(env)
    env.close()
    sf, _ = _stateful(kw)
    fr, _ = _stateful(kw, freeze_at=20)
    r_sl, r_max = float(np.mean(sl)), float(np.mean(oracle))
    return {"r_max": r_max, "r_reference": r_sl, "gain": (np.mean(sf) - r_sl) / (r_max - r_sl),
            "drift_cost": float(np.mean(sf[20:]) - np.mean(fr[20:])), "best_family": max(families.values())}


@pytest.mark.parametrize("world_seed", list(range(1, 21)) if SLOW else [1, 2])
def test_difficulty_holds_across_worlds(world_seed, kwargs):
    n = _world_numbers(world_seed, kwargs)
    assert n["r_max"] == 1.0
    assert 0.7 <= n["r_reference"] <= 0.78  # 0.8 but for the units no look shows
    assert n["gain"] >= 0.3
    assert n["drift_cost"] >= 0.15
    # a fixed fiscal-month guess misses at least one group's calendar in every world
    assert n["best_family"] < n["r_reference"] - 0.02


def test_vector_envs_step_through_instance_boundaries(kwargs):
    for mode in ("sync", "async"):
        envs = gym.make_vec(ENV, 3, vectorization_mode=mode, cycle=True,
                            vector_kwargs={"shared_memory": False} if mode == "async" else {}, **kwargs)
        try:
            envs.reset(seed=0)
            rng = np.random.default_rng(0)
            actions = ["QUERY: SELECT 1", "ANSWER: 0", "garbage", "ANSWER: 1.5"]
            ends = 0
            for _ in range(40):
                obs, r, term, trunc, info = envs.step(tuple(actions[i] for i in rng.integers(0, 4, size=3)))
                ends += int(np.sum(term | trunc))
                if "raw_metric" in info:
                    assert info["raw_metric"]["value"].dtype.kind == "f"
            assert ends >= 10
        finally:
            envs.close()


def test_true_answers_are_computed_once_per_process_and_world(kwargs, monkeypatch):
    # the sub-envs of a vector share a process: an answer's SQL runs once there, never across worlds
    from clbench.envs.dbexplore import dbexplore_env, questions

    calls = []
    answer = questions.Question.answer
    monkeypatch.setattr(questions.Question, "answer", lambda q, con, maps: calls.append(q.qid) or answer(q, con, maps))
    monkeypatch.setattr(dbexplore_env, "_TRUTHS", {})
    a, b = (gym.make(ENV, **kwargs).unwrapped for _ in range(2))
    other = gym.make(ENV, world_seed=1, **kwargs).unwrapped
    try:
        assert a._truth(a.questions["q03"]) == b._truth(b.questions["q03"]) and calls == ["q03"]
        other._truth(other.questions["q03"])
        assert calls == ["q03", "q03"]  # another world's database and question: its own answer
        assert len(dbexplore_env._TRUTHS) == 2
    finally:
        for e in (a, b, other):
            e.close()
