"""Run every benchmark and print medians and ratios: `python benchmarks/run_all.py [--quick]`.

- step latency per env (median and p95) with the scripted reference agent;
- each domain's own benchmark (benchmarks/bench_<domain>.py, e.g. DBExplore build times,
  Poker hands/s vs a bare texasholdem loop);
- the full reference suite (all tasks, 5 stateful rollouts + stateless) wall time on this machine
  (target: under 10 minutes on 2 cores, image builds excluded);
- Ray vs the local pool on the same suite, and the local pool with 1 vs 2 workers;
- last, one table of every overhead ratio with its target and definition (the benches'
  `ratios()`: runner, memory growth, Ray, CohortStudies, DBExplore, Poker, the bwrap and Docker
  command round trips). Each ratio is the median of repeats that alternate clbench and its
  baseline; the exit status is 1 when a ratio misses its target by more than its noise (the
  spread of the repeats), 0 otherwise. A row whose bench or prerequisite is missing is printed as
  not available. `--ratios` runs only that table; `--ratios --slow` adds the reference suite's
  wall time (2 workers, target <= 600 s).
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
from _ratio import Ratio, load, not_available, table  # noqa: E402

#: rows of issue 34's table measured by benches of their own: bench -> (row, target, better,
#: definition), reported as not available while the bench (or its `ratios()`) is missing
EXPECTED = {
    "bench_runner": ("runner: clbench rollout / hand-written loop", 1.1, "lower",
                     "`clbench rollout` / a hand-written loop over the same env and agent, no records"),
    "bench_memory": ("memory: clbench CPU per call growth", 1.5, "lower",
                     "each memory system's clbench CPU per call and state size, late / early in a long run"),
    "bench_ray": ("ray: 2-node local cluster / local pool, 2 workers", 1.2, "lower",
                  "`--executor ray` wall time on a 2-node local cluster / the local pool, 2 workers"),
}
SUITE_DEF = "wall seconds of `clbench suite --agent reference` (all tasks, 5 rollouts + stateless), 2 workers"


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


#: benches that start a cluster of their own run last: Ray's daemons keep the 1-minute load average up for a
#: while after they stop, and the vector's default processes count free CPUs from it (a table in which
#: bench_vector ran right after bench_ray put MemoryProbe's vector in the parent: 0.97, against 1.69 alone)
LAST = ("bench_ray",)


def _benches():
    for path in sorted(HERE.glob("bench_*.py"), key=lambda p: (p.stem in LAST, p.stem)):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        # importable by name (benchmarks/ on the path, the module in sys.modules): a bench that runs a
        # function of its own in a spawned process pickles it by module and name
        if str(HERE) not in sys.path:
            sys.path.insert(0, str(HERE))
        sys.modules[path.stem] = mod
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


def as_ratio(row) -> Ratio:
    """A bench's row as a Ratio: benches return Ratio objects or dict rows {"measure", "anchor",
    "value", "samples" (one ratio per repeat; [value] when absent), "target" (None: reported, not
    judged), "definition"}."""
    if isinstance(row, Ratio):
        return row
    name = f"{row['measure']} ({row['anchor']})" if isinstance(row.get("anchor"), str) else row["measure"]
    target = row.get("target")
    definition = row.get("definition", "") + ("" if target is not None else " (reported, no target)")
    return Ratio(name, list(row.get("samples") or [row["value"]]), float("inf") if target is None else target,
                 row.get("better", "lower"), definition)


def ratio_benchmarks(quick: bool) -> list[Ratio]:
    """Every bench's `ratios()`, and a not-available row for each expected one that is missing."""
    ratios = []
    found = set()
    for name, mod in _benches():
        if hasattr(mod, "ratios"):
            print(f"measuring {name} ...", flush=True)
            try:
                ratios += [as_ratio(r) for r in mod.ratios(quick=quick)]
                found.add(name)
            except Exception as exc:  # one bench's missing prerequisite must not hide the others
                print(f"skipped: {type(exc).__name__}: {exc}")
                if name in EXPECTED:
                    ratios.append(not_available(*EXPECTED[name][:3], f"{type(exc).__name__}: {exc}",
                                                EXPECTED[name][3]))
                    found.add(name)
    for name, (row, target, better, definition) in EXPECTED.items():
        if name not in found:
            ratios.append(not_available(row, target, better, f"benchmarks/{name}.py has no ratios() here",
                                        definition))
    return ratios


def suite_ratio(quick: bool) -> Ratio:
    from clbench.commands.suite import resolve_tasks

    seconds = suite_time(resolve_tasks(None), 1 if quick else 5, 2)
    return Ratio("suite: reference, 2 workers (seconds)", [seconds], 600.0, "lower", SUITE_DEF)


def report(ratios: list[Ratio]) -> int:
    """The ratio table; 1 when a ratio misses its target by more than the noise."""
    print(f"\n## overhead ratios (median of interleaved repeats; {load()})\n" + table(ratios))
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
    p.add_argument("--slow", action="store_true", help="with --ratios: add the reference suite's wall time")
    args = p.parse_args(argv)
    if args.ratios:
        print(f"start: {load()}", flush=True)
        ratios = ratio_benchmarks(args.quick)
        if args.slow:
            print("measuring the reference suite ...", flush=True)
            ratios.append(suite_ratio(args.quick))
        else:
            ratios.append(not_available("suite: reference, 2 workers (seconds)", 600.0, "lower",
                                        "slow; run with --slow", SUITE_DEF))
        return report(ratios)
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
