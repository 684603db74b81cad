"""Run every benchmark and print medians and ratios: `python benchmarks/run_all.py [--quick]`.

- step latency per env (median and p95) with the scripted reference agent;
- each domain's own benchmark (benchmarks/bench_<domain>.py, e.g. DBExplore build times,
  Poker hands/s vs a bare texasholdem loop);
- the full reference suite (all tasks, 5 stateful rollouts + stateless) wall time on this machine
  (target: under 10 minutes on 2 cores, image builds excluded);
- Ray vs the local pool on the same suite, and the local pool with 1 vs 2 workers;
- last, one table of every overhead ratio with its target (the benches' `ratios()`: runner,
  CohortStudies, DBExplore, Poker). Each ratio is the median of repeats that alternate clbench and
  its baseline; the exit status is 1 when a ratio misses its target by more than its noise (the
  spread of the repeats), 0 otherwise. `--ratios` runs only that table.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _ratio import Ratio, table  # noqa: E402


def step_latency(env_id: str, instances: int) -> tuple[float, float, int]:
    from clbench.agent import make_agent
    from clbench.runner import make_env

    env = make_env(env_id)
    agent = make_agent("reference", env, seed=0)
    times = []
    obs, info = env.reset(seed=0)
    for i in range(min(instances, len(env.unwrapped.schedule))):
        if i:
            obs, info = env.reset()
        agent.begin_instance(obs, info)
        done = False
        while not done:
            action = agent.act(obs, info)
            t = time.perf_counter()
            obs, r, term, trunc, info = env.step(action)
            times.append(time.perf_counter() - t)
            done = term or trunc
        agent.end_instance(r, info)
    env.close()
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))], len(times)


def suite_time(tasks: list[str], rollouts: int, workers: int, executor: str = "local") -> float:
    from clbench.rollout import run_many
    from clbench.runner import RunConfig

    with tempfile.TemporaryDirectory() as out:
        cfgs = [RunConfig(t, "reference", out, rollouts=rollouts, workers=workers) for t in tasks]
        t = time.perf_counter()
        run_many(cfgs, say=lambda m: None, quiet=True, executor=executor)
        return time.perf_counter() - t


def _benches():
    for path in sorted(HERE.glob("bench_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield path.stem, mod


def domain_benchmarks(quick: bool) -> list[Ratio]:
    """Every bench's report; returns the ratios of those that measure some."""
    ratios = []
    for name, mod in _benches():
        print(f"\n## {name}")
        try:
            out = mod.main(quick=quick) if "quick" in mod.main.__code__.co_varnames else mod.main()
        except Exception as exc:  # one domain's missing prerequisite must not hide the others
            print(f"skipped: {type(exc).__name__}: {exc}")
            continue
        if isinstance(out, list):  # the benches that measure overhead ratios return them
            ratios += [r for r in out if isinstance(r, Ratio)]
    return ratios


def ratio_benchmarks(quick: bool) -> list[Ratio]:
    ratios = []
    for name, mod in _benches():
        if hasattr(mod, "ratios"):
            print(f"measuring {name} ...", flush=True)
            try:
                ratios += mod.ratios(quick=quick)
            except Exception as exc:  # e.g. lifelines (the cohort baseline) not installed
                print(f"skipped: {type(exc).__name__}: {exc}")
    return ratios


def report(ratios: list[Ratio]) -> int:
    """The ratio table; 1 when a ratio misses its target by more than the noise."""
    print("\n## overhead ratios (median of interleaved repeats)\n" + table(ratios))
    missed = [r.name for r in ratios if r.misses]
    if missed:
        print(f"{len(missed)} ratio(s) miss their target beyond noise: " + "; ".join(missed))
    return 1 if missed else 0


def main(argv=None) -> int:
    import clbench
    from clbench.commands.suite import resolve_tasks

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer instances and rollouts")
    p.add_argument("--tasks", nargs="+", help="suite tasks (default: all six)")
    p.add_argument("--no-ray", action="store_true")
    p.add_argument("--ratios", action="store_true", help="only the overhead-ratio table")
    args = p.parse_args(argv)
    if args.ratios:
        return report(ratio_benchmarks(args.quick))
    tasks = resolve_tasks(args.tasks)
    print(f"clbench {clbench.__version__} benchmarks on {len(tasks)} tasks")
    print("\n## step latency (reference agent)\n| env | steps | median ms | p95 ms |\n|---|---|---|---|")
    for env_id in tasks:
        try:
            med, p95, n = step_latency(env_id, 10 if args.quick else 40)
            print(f"| {env_id} | {n} | {med * 1e3:.3f} | {p95 * 1e3:.3f} |")
        except Exception as exc:
            print(f"| {env_id} | skipped: {type(exc).__name__}: {exc} | | |")
    ratios = domain_benchmarks(args.quick)
    rollouts = 1 if args.quick else 5
    print(f"\n## reference suite wall time ({rollouts} stateful rollouts + stateless)")
    t2 = suite_time(tasks, rollouts, 2)
    print(f"local pool, 2 workers: {t2:.1f} s (target < 600 s)")
    t1 = suite_time(tasks, rollouts, 1)
    print(f"local pool, 1 worker: {t1:.1f} s; scaling ratio 1->2 workers: {t1 / t2:.2f}x")
    if not args.no_ray:
        try:
            tr = suite_time(tasks, rollouts, 2, executor="ray")
            print(f"ray, 2 CPUs: {tr:.1f} s; ray / local ratio: {tr / t2:.2f}")
        except RuntimeError as exc:
            print(f"ray skipped: {exc}")
    return report(ratios)


if __name__ == "__main__":
    sys.exit(main())
