"""CohortStudies-v4 speed: study builds, tool-call latency and a whole reference instance.

    python benchmarks/bench_cohortstudies.py [--quick]

Targets (2 cores): building one study instance (sample, DuckDB file, baseline KM) < 0.3 s;
query_sql < 20 ms; estimate_survival_by_group with 12 expressions < 1 s; one reference
instance end to end < 1.5 s. The KM step is also compared with the bare km_at fits it
makes (overhead ratio). Prints medians and ratios to the targets.

Overhead ratios (issues 18, 34): a whole instance through the env (reset to the instance, then
the reference agent's recorded tool calls through env.step) <= 1.0x the strongest plain script
doing the same work without the env: open the study's DuckDB file, DESCRIBE and the SELECTs
(fetching the rows a step shows), each grouping query fetched as numpy columns with clbench's own
numpy Kaplan-Meier estimator (km_at) per group, and the numpy score; and the env module's import
in a fresh process (after `import clbench`) < 0.5 s.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ratio import Ratio, env_id, interleaved, table, run_script  # noqa: E402



def _row(what: str, values: list[float], target: float | None, unit: str, scale: float = 1.0) -> str:
    med = statistics.median(values) * scale
    if target is None:
        return f"| {what} | {len(values)} | {med:.4g} {unit} | - | - |"
    return f"| {what} | {len(values)} | {med:.4g} {unit} | {target:g} {unit} | {med / target:.2f} |"


def _timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _record_calls(env, instances) -> dict[str, list[dict]]:
    """The reference agent's tool calls on each instance (stateless, as JSON objects)."""
    from clbench.agent import make_agent

    calls = {}
    for inst in instances:
        agent = make_agent("reference", env)
        obs, info = env.reset(seed=0, options={"instance": inst.instance_id, "stateless": True})
        agent.begin_instance(obs, info)
        calls[inst.instance_id] = []
        done = False
        while not done:
            action = agent.act(obs, info)
            calls[inst.instance_id].append(json.loads(action))
            obs, r, term, trunc, info = env.step(action)
            done = term or trunc
    return calls


def _original(env, inst, calls: list[dict]) -> None:
    """The same tool calls made directly on DuckDB and numpy (no parsing, checks or text)."""
    import numpy as np

    from clbench.envs.cohortstudies.codings import quote_ident, sql_literal
    from clbench.envs.cohortstudies.km import km_at
    from clbench.envs.cohortstudies.scoring import information_gain_bits
    from clbench.sqlguard import connect_readonly

    built = env.build(inst)
    con = connect_readonly(str(built.path))
    study = env.studies[inst.payload["study"]]
    t, e = study.time, study.event
    for call in calls:
        tool, args = call["tool"], call["arguments"]
        if tool == "get_database_metadata":
            con.execute("DESCRIBE patients").fetchall()
        elif tool == "query_sql":
            con.execute(args["sql"]).fetchmany(51)
        elif tool == "estimate_survival_by_group":
            for expr in [args["group_expression"]] if "group_expression" in args else args["group_expressions"]:
                time, event, label = con.execute(
                    f"SELECT {quote_ident(t['column'])}, ({quote_ident(e['column'])} = {sql_literal(e['dead'])}), "
                    f"CAST(({expr}) AS VARCHAR) FROM patients").fetchnumpy().values()
                months = np.asarray(time, dtype=float) / float(t["per_month"])
                events = np.asarray(event, dtype=bool)
                labels = np.asarray(label, dtype=object)
                for lb in {lb for lb in labels.tolist() if lb is not None}:
                    m = labels == lb
                    km_at(months[m], events[m], env.points)
        elif tool == "submit_cohort_report":
            report = np.array([args["survival"][c] for c in env.cohorts], dtype=float)
            information_gain_bits(built.truth, built.baseline, report, env.eps)
    con.close()


def _through_env(env, inst, calls: list[dict]) -> None:
    env.reset(options={"instance": inst.instance_id, "stateless": True})
    for call in calls:
        env.step(json.dumps(call))


_IMPORT = """
import time
import clbench
t = time.perf_counter()
import clbench.envs.cohortstudies.cohortstudies_env
print(time.perf_counter() - t)
"""


def ratios(quick: bool = False) -> list[Ratio]:
    import gymnasium as gym

    env = gym.make(env_id("CohortStudies")).unwrapped
    insts = [i for v in env.schedule.variants for i in v.instances][: 5 if quick else 20]
    calls = _record_calls(env, insts)
    repeats = 3 if quick else 7
    instance = interleaved(lambda: [_through_env(env, i, calls[i.instance_id]) for i in insts],
                           lambda: [_original(env, i, calls[i.instance_id]) for i in insts], repeats)
    env.close()
    imports = [float(subprocess.run([sys.executable, "-c", _IMPORT], capture_output=True, text=True,
                                    check=True).stdout.split()[-1]) for _ in range(repeats)]
    return [Ratio("cohort: instance via env / same DuckDB queries + numpy KM", instance, 1.0, "lower",
                  f"{len(insts)} reference instances through env.reset + env.step (recorded tool calls) / the "
                  "same calls as a plain script: DuckDB connect, DESCRIBE, SELECTs (51 rows fetched), "
                  "grouping queries via fetchnumpy + clbench's km_at per group, the numpy score"),
            Ratio("cohort: env module import, fresh process (seconds)", imports, 0.5, "lower",
                  "seconds to import the env module in a fresh interpreter after `import clbench` (not a ratio)")]


def main(quick: bool = False) -> list[Ratio]:
    import gymnasium as gym
    import numpy as np

    import clbench  # noqa: F401
    from clbench.agent import make_agent
    from clbench.envs.cohortstudies.km import km_at

    env = gym.make(env_id("CohortStudies")).unwrapped
    insts = [i for v in env.schedule.variants for i in v.instances]
    n = 5 if quick else len(insts)
    print(f"{env.env_id}\n| what | n | median | target | ratio |\n|---|---|---|---|---|")

    def build(inst):
        env._built.pop(inst.instance_id, None)
        env.build(inst)

    builds = [_timed(lambda i=i: build(i), 1)[0] for i in insts[:n]]
    print(_row("build one study instance", builds, 0.3, "s"))

    env.reset(seed=0, options={"instance": "FORGE-2"})
    query = _timed(lambda: env.step("query_sql: SELECT sex, avg(age_entry) FROM patients GROUP BY 1"), 3 if quick else 15)
    print(_row("query_sql step", query, 20.0, "ms", 1e3))
    exprs = [f"CASE WHEN age_entry >= {a} THEN 'old' ELSE 'young' END" for a in range(50, 74, 2)]
    est = []
    for _ in range(2 if quick else 5):
        env.reset(options={"instance": "FORGE-2"})
        est += _timed(lambda: env.step(json.dumps({"tool": "estimate_survival_by_group",
                                                   "arguments": {"group_expressions": exprs}})), 1)
    print(_row("estimate_survival_by_group, 12 expressions", est, 1.0, "s"))

    data = env.build(env.slot.instance).data
    age = data.table["age_entry"].to_numpy()
    bare = _timed(lambda: [km_at(data.months[m], data.events[m], env.points)
                           for a in range(50, 74, 2) for m in (age >= a, age < a)], 2 if quick else 5)
    print(_row("bare km_at fits for the same 24 groups", bare, None, "s"))
    print(f"KM step overhead over bare km_at fits: {statistics.median(est) / statistics.median(bare):.2f}x")

    plays = []
    for inst in insts[:n]:
        agent = make_agent("reference", env)
        t = time.perf_counter()
        obs, info = env.reset(seed=0, options={"instance": inst.instance_id, "stateless": True})
        agent.begin_instance(obs, info)
        done = False
        while not done:
            obs, r, term, trunc, info = env.step(agent.act(obs, info))
            done = term or trunc
        plays.append(time.perf_counter() - t)
    print(_row("reference instance end to end (built DB)", plays, 1.5, "s"))
    print(f"mean rows per study: {np.mean([len(env.build(i).data.table) for i in insts[:n]]):.0f}")
    env.close()
    out = ratios(quick)
    print(table(out))
    return out


if __name__ == "__main__":
    run_script(main, __doc__)
