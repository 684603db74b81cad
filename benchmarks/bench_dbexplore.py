"""DBExplore speed: cold database build, cached load and query-step latency.

    python benchmarks/bench_dbexplore.py [--quick]

Targets (default scale, 2 cores): cold build of both releases < 20 s, cached load < 1 s,
median step < 10 ms for catalog queries. Prints medians and their ratio to the target.

Overhead ratios (issues 18, 34), each side alternated with the other: a cached load in a fresh
process (`gym.make`, then entering a release-1 and a release-2 question) <= 1.5x a fresh process
opening both database files with DuckDB, imports excluded on both sides (clbench, gymnasium, the
env module and duckdb are imported before the clock starts on the env side, duckdb on the other);
a catalog query through `env.step` <= 1.2x
the same query executed on a DuckDB cursor of the same database instance, fetching the rows a
step can show (51).
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ratio import Ratio, env_id, interleaved, table, run_script  # noqa: E402

CATALOG_QUERIES = [
    "SELECT table_name, comment FROM duckdb_tables()",
    "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE table_name = 'rvw_q4'",
    "DESCRIBE prod_m2",
    "SELECT * FROM prod_k7 LIMIT 5",
]


def _row(what: str, median: float, target: float | None, unit: str, n: int) -> str:
    if target is None:
        return f"| {what} | {n} | {median:.4g} {unit} | - | - |"
    return f"| {what} | {n} | {median:.4g} {unit} | {target:g} {unit} | {median / target:.2f} |"


def cold_build(scale: float, repeats: int) -> list[float]:
    import gymnasium as gym

    import clbench  # noqa: F401
    from clbench.envs.dbexplore.cache import database_paths

    spec = gym.make(env_id("DBExplore")).unwrapped.build_spec  # the canonical world's generator spec
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            database_paths(spec, scale, tmp)
            times.append(time.perf_counter() - t)
    return times


def cached_load(scale: float, repeats: int, cache_dir: str) -> list[float]:
    """Env creation, cache lookup, opening both releases and entering a question."""
    import gymnasium as gym

    import clbench  # noqa: F401

    gym.make(env_id("DBExplore"), scale=scale, cache_dir=cache_dir).unwrapped.database_paths()  # warm
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        env = gym.make(env_id("DBExplore"), scale=scale, cache_dir=cache_dir)
        env.reset(seed=0)
        env.reset(options={"instance": "q21", "stateless": True})
        times.append(time.perf_counter() - t)
        env.close()
    return times


def step_latency(scale: float, rounds: int, cache_dir: str, queries: list[str]) -> list[float]:
    import gymnasium as gym

    import clbench  # noqa: F401

    env = gym.make(env_id("DBExplore"), scale=scale, cache_dir=cache_dir)
    times = []
    env.reset(seed=0)
    for _ in range(rounds):
        for sql in queries:
            if len(times) % 15 == 0:  # a fresh question before the query budget runs out
                env.reset(options={"instance": "q01"})
            t = time.perf_counter()
            env.step("QUERY: " + sql)
            times.append(time.perf_counter() - t)
    env.close()
    return times


_FRESH_ENV = """
import sys, time
import clbench, gymnasium as gym, duckdb
import clbench.envs.dbexplore.dbexplore_env
t = time.perf_counter()
env = gym.make(sys.argv[1], cache_dir=sys.argv[2])
env.reset(seed=0)
env.reset(options={"instance": "q21", "stateless": True})
print(time.perf_counter() - t)
"""
_FRESH_DUCKDB = """
import sys, time
import duckdb
t = time.perf_counter()
cons = [duckdb.connect(p, read_only=True) for p in sys.argv[1:]]
print(time.perf_counter() - t)
"""


def _fresh(code: str, *args: str) -> float:
    """Seconds a fresh interpreter reports for the timed part of `code`."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def ratios(quick: bool = False) -> list[Ratio]:
    import gymnasium as gym

    import clbench  # noqa: F401

    env_name = env_id("DBExplore")
    repeats = 5 if quick else 11
    with tempfile.TemporaryDirectory() as cache:
        env = gym.make(env_name, cache_dir=cache)
        paths = [str(p) for p in env.unwrapped.database_paths().values()]  # built once, outside the timing
        loads = []
        for k in range(repeats):  # alternated, and alternately first
            pair = [lambda: _fresh(_FRESH_ENV, env_name, cache), lambda: _fresh(_FRESH_DUCKDB, *paths)]
            env_s, bare_s = [f() for f in pair] if k % 2 == 0 else [f() for f in pair[::-1]][::-1]
            loads.append(env_s / bare_s)

        from clbench.sqlguard import connect_readonly

        env.reset(seed=0)
        bare = connect_readonly(paths[0])  # a cursor on the same DuckDB instance (one per file and process)
        rounds = 20 if quick else 60

        def env_queries():
            for i in range(rounds):
                if i % 3 == 0:  # a fresh question before the query budget runs out
                    env.reset(options={"instance": "q01"})
                for sql in CATALOG_QUERIES:
                    env.step("QUERY: " + sql)

        shown = int(env.unwrapped.spec_data["result_max_rows"]) + 1  # the rows a step can show, and one more

        def bare_queries():
            for i in range(rounds):
                for sql in CATALOG_QUERIES:
                    bare.execute(sql).fetchmany(shown)

        steps = interleaved(env_queries, bare_queries, repeats)
        env.close()
        bare.close()
    return [Ratio("dbexplore: cached load / opening the DuckDB files", loads, 1.5, "lower",
                  "fresh process, imports done before the clock: gym.make + reset + a release-2 question / "
                  "duckdb.connect(read_only=True) of both release files"),
            Ratio("dbexplore: catalog query via env.step / the same query on DuckDB", steps, 1.2, "lower",
                  f"{len(CATALOG_QUERIES)} catalog queries via env.step('QUERY: ...') / the same SQL on a DuckDB "
                  "cursor of the same database, fetchmany(the rows a step shows + 1)")]


def vector_steps(scale: float, cache_dir: str, n_envs: int = 8, steps: int = 120) -> dict[str, float]:
    """Env steps per second of one env, `gym.make_vec` sync(n) and async(n) (issue 31), stepping
    through instance boundaries with a mix of queries and answers."""
    import gymnasium as gym

    import clbench  # noqa: F401

    actions = ["QUERY: SELECT count(*) FROM duckdb_tables()", "QUERY: SELECT 1", "ANSWER: 0"]
    kw = {"scale": scale, "cache_dir": cache_dir, "cycle": True}
    out = {}
    env = gym.make(env_id("DBExplore"), **kw)
    env.reset(seed=0)
    t = time.perf_counter()
    for i in range(steps):
        if env.step(actions[i % 3])[2]:
            env.reset()
    out["single"] = steps / (time.perf_counter() - t)
    env.close()
    for mode in ("sync", "async"):
        vec = gym.make_vec(env_id("DBExplore"), n_envs, vectorization_mode=mode,
                           vector_kwargs={"shared_memory": False} if mode == "async" else {}, **kw)
        vec.reset(seed=0)
        t = time.perf_counter()
        for i in range(steps // n_envs):
            vec.step(tuple(actions[(i + k) % 3] for k in range(n_envs)))
        out[f"{mode}({n_envs})"] = (steps // n_envs) * n_envs / (time.perf_counter() - t)
        vec.close()
    return out


def main(quick: bool = False) -> list[Ratio]:
    scale = 1.0
    repeats = 1 if quick else 3
    print(f"{env_id('DBExplore')} at scale {scale}\n| what | n | median | target | ratio |\n|---|---|---|---|---|")
    build = cold_build(scale, repeats)
    print(_row("cold build, both releases", statistics.median(build), 20.0, "s", len(build)))
    with tempfile.TemporaryDirectory() as cache:
        load = cached_load(scale, 3 if quick else 10, cache)
        print(_row("cached load (make + 2 releases)", statistics.median(load), 1.0, "s", len(load)))
        cat = step_latency(scale, 10 if quick else 50, cache, CATALOG_QUERIES)
        print(_row("step, catalog queries", statistics.median(cat) * 1e3, 10.0, "ms", len(cat)))
        summ = step_latency(scale, 2 if quick else 5, cache, ["SUMMARIZE rvw_m2", "SUMMARIZE prod_q4"])
        print(_row("step, SUMMARIZE of a 150k-row table", statistics.median(summ) * 1e3, None, "ms", len(summ)))
        vec = vector_steps(scale, cache)
        for name, rate in vec.items():
            print(f"| env steps/s, {name} | - | {rate:.4g} /s | - | {rate / vec['single']:.2f}x single |")
    out = ratios(quick)
    print(table(out))
    return out


if __name__ == "__main__":
    run_script(main, __doc__)
