"""CohortStudies-v0 speed: study builds, tool-call latency and a whole reference instance.

    python benchmarks/bench_cohort.py [--quick]

Targets (2 cores): building one study instance (sample, DuckDB file, baseline KM) < 0.3 s;
query_sql < 20 ms; estimate_survival_by_group with 12 expressions < 1 s; one reference
instance end to end < 1.5 s. The KM step is also compared with the bare lifelines fits it
makes (overhead ratio). Prints medians and ratios to the targets.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

ENV = "clbench/CohortStudies-v0"


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


def main(quick: bool = False) -> None:
    import gymnasium as gym
    import numpy as np

    import clbench  # noqa: F401
    from clbench.agent import make_agent
    from clbench.envs.cohort.km import km_at

    env = gym.make(ENV).unwrapped
    insts = [i for v in env.schedule.variants for i in v.instances]
    n = 5 if quick else len(insts)
    print(f"{ENV}\n| what | n | median | target | ratio |\n|---|---|---|---|---|")

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
    print(_row("bare lifelines fits for the same 24 groups", bare, None, "s"))
    print(f"KM step overhead over bare lifelines: {statistics.median(est) / statistics.median(bare):.2f}x")

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


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    main(quick=p.parse_args().quick)
    sys.exit(0)
