"""Runner overhead: `clbench rollout` against a hand-written loop over the same env and agent, per env.

    python benchmarks/bench_runner.py [--quick] [--envs Poker,SpectrumMonitor]

Definition (printed next to each ratio): wall time of `clbench rollout --agent reference
--rollouts 5 --workers 1 --quiet` run in this process through the CLI entry point (a fresh env,
every record, trajectory and agent checkpoint written, the run card with its bootstrap, the metrics
printed) divided by the wall time of a hand-written loop that plays the same stateful rollouts and
stateless passes with the same agents and seeds and writes nothing. The two alternate repeat by
repeat; the value is the median ratio and the spread 1.4826 x its median absolute deviation.
Target: <= 1.1 (the runner's own time at most 10% of the bare loop's). The same repeats also give
the ratio of CPU seconds of this process (both sides play in it; on shared cores the load moves wall
time more than CPU time), and the run card's CPU time (metrics with its bootstrap, validation,
writing: a fixed cost per task and system) is printed as the part of the runner's own time it is.

Also: the run card's bootstrap memory (tracemalloc peak of clbench.metrics.compute) at 5, 40 and
80 rollouts of SpectrumMonitor; flat means 80 rollouts need no more than 40 (target 80 / 40 <= 1.2).

`ratios()` returns rows {"measure", "anchor", "value", "spread", "target", "definition"} for
benchmarks/run_all.py.
"""
from __future__ import annotations

import contextlib
import io
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ratio import Ratio, env_id, load, run_script, table  # noqa: E402

ROLLOUTS = 5
#: scripted envs whose reference agent runs without a sandbox (CodeRepair and SalesForecast spend
#: their time in sandbox commands: `--envs` adds them)
ENVS = ("Poker", "SpectrumMonitor", "MemoryProbe", "DBExplore", "CohortStudies")
DEFINITION = ("wall time of in-process `clbench rollout --agent reference --rollouts 5 --workers 1 --quiet` "
              "(records, trajectories, checkpoints, run card, metrics) / a hand-written loop playing the same "
              "rollouts and stateless passes with the same agents and seeds, writing nothing; alternated, "
              "median of the per-repeat ratios")
CPU_DEFINITION = ("the same, CPU seconds of this process (time.process_time: the inline worker plays in it) instead "
                  "of wall seconds: on shared cores the load slows both sides' wall time unevenly, their CPU time less")
MEMORY_DEFINITION = ("tracemalloc peak of clbench.metrics.compute (the run card's bootstrap) on SpectrumMonitor "
                     "reference records of 80 stateful rollouts / of 40 (a 5-rollout run's rollouts repeated)")


def command(env: str, out: str, rollouts: int = ROLLOUTS) -> None:
    """`clbench rollout` in this process (inline worker), on a fresh env, into the new directory `out`."""
    from clbench.cli import main
    from clbench.runner import close_cached_envs

    close_cached_envs()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(["rollout", "--env", env, "--agent", "reference", "--out", out, "--rollouts", str(rollouts),
                   "--workers", "1", "--quiet"])
    if rc:
        raise RuntimeError(f"clbench rollout exited {rc}")


def timed_command(env: str, rollouts: int = ROLLOUTS, clock=time.perf_counter) -> float:
    """Seconds of `command`; making and removing the temporary run directory is not timed (neither
    is part of `clbench rollout`)."""
    with tempfile.TemporaryDirectory() as tmp:
        return _seconds(lambda: command(env, f"{tmp}/run", rollouts), clock)


def _run_card_seconds(env: str) -> float:
    """CPU seconds of the run card alone (its metrics and bootstrap, validation, writing) in one
    `command`: the runner's fixed cost per (task, system), whatever the number of instances."""
    import clbench.rollout as rollout

    spent, build = [], rollout.build_run_card

    def timed(*args, **kwargs):
        t = time.process_time()
        try:
            return build(*args, **kwargs)
        finally:
            spent.append(time.process_time() - t)

    rollout.build_run_card = timed
    try:
        timed_command(env)
    finally:
        rollout.build_run_card = build
    return sum(spent)


def bare(env_id_: str, rollouts: int = ROLLOUTS) -> None:
    """The same episodes with the same agents and seeds, as a user would write the loop; nothing recorded."""
    from clbench.agent import end_instance, make_agent
    from clbench.runner import RunConfig, make_env, stateless_agent_seed, stateless_plan

    env = make_env(env_id_)

    def play(agent, obs, info):
        agent.begin_instance(obs, info)
        while True:
            obs, reward, term, trunc, info = env.step(agent.act(obs, info))
            if term or trunc:
                break
        end_instance(agent, reward, info, obs)

    for k in range(rollouts):
        agent = make_agent("reference", env, seed=k)
        obs, info = env.reset(seed=k)
        for pos in range(len(env.unwrapped.schedule)):
            if pos:
                obs, info = env.reset()
            play(agent, obs, info)
    passes = stateless_plan(RunConfig(env_id_, "reference", "-", rollouts=rollouts))["passes"]
    for p in range(passes):
        for inst in env.unwrapped.schedule.order(0):
            agent = make_agent("reference", env, seed=stateless_agent_seed(p, inst.instance_id))
            play(agent, *env.reset(seed=p, options={"instance": inst.instance_id, "stateless": True}))
    env.close()


def _seconds(fn, clock=time.perf_counter) -> float:
    t = clock()
    fn()
    return clock() - t


def _both(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of fn()."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def runner_ratio(name: str, repeats: int) -> tuple[Ratio, Ratio]:
    """(wall-time ratio, CPU-time ratio), from the same alternated repeats."""
    env = env_id(name)
    timed_command(env), bare(env)  # warm-up: imports, caches, built data
    wall, cpu = [], []

    def command_once():
        with tempfile.TemporaryDirectory() as tmp:
            return _both(lambda: command(env, f"{tmp}/run"))

    for k in range(repeats):  # the side that goes first alternates: neither always runs on a warmer cache
        if k % 2:
            c = command_once()
            b = _both(lambda: bare(env))
        else:
            b = _both(lambda: bare(env))
            c = command_once()
        wall.append(c[0] / b[0])
        cpu.append(c[1] / b[1])
        print(f"  {name}: bare {b[0]:.3f} s ({b[1]:.3f} CPU), runner's own {c[0] - b[0]:+.3f} s "
              f"({c[1] - b[1]:+.3f} CPU), ratio {wall[-1]:.3f} (CPU {cpu[-1]:.3f}) (load {os.getloadavg()[0]:.1f})",
              flush=True)
    card = statistics.median(_run_card_seconds(env) for _ in range(3))
    print(f"  {name}: of the runner's own time, the run card (metrics, {ROLLOUTS} rollouts' bootstrap, validation, "
          f"writing) takes {card * 1e3:.1f} ms CPU", flush=True)
    title = f"runner: clbench rollout / hand-written loop ({name}, {ROLLOUTS} rollouts)"
    return (Ratio(title, wall, 1.1, "lower", DEFINITION),
            Ratio(title + ", CPU time", cpu, 1.1, "lower", CPU_DEFINITION))


def bootstrap_peaks(rollouts=(5, 40, 80)) -> dict:
    """MiB: tracemalloc peak of the metrics (the run card's bootstrap included) of SpectrumMonitor
    reference records with each number of stateful rollouts: one real 5-rollout run, its stateful
    rollouts repeated under new rollout numbers (the memory depends on the shape, not the rewards)."""
    import tracemalloc

    from clbench import metrics
    from clbench.results import load_metadata, load_records

    with tempfile.TemporaryDirectory() as tmp:
        command(env_id("SpectrumMonitor"), f"{tmp}/run", ROLLOUTS)
        recs, meta = load_records(f"{tmp}/run"), load_metadata(f"{tmp}/run")
    stateful = [r for r in recs if r["mode"] == "stateful"]
    stateless = [r for r in recs if r["mode"] == "stateless"]
    peaks = {}
    for k in rollouts:
        grown = stateless + [dict(r, rollout=r["rollout"] + ROLLOUTS * j) for j in range(-(-k // ROLLOUTS))
                             for r in stateful if r["rollout"] + ROLLOUTS * j < k]
        tracemalloc.start()
        try:
            metrics.compute(grown, meta)
            peaks[k] = tracemalloc.get_traced_memory()[1] / 2 ** 20
        finally:
            tracemalloc.stop()
    return peaks


def measured(quick: bool = False, envs=ENVS) -> tuple[list[Ratio], dict]:
    repeats = 3 if quick else 7
    out = []
    for name in envs:
        try:
            out.extend(runner_ratio(name, repeats))
        except Exception as exc:  # one env's missing prerequisite must not hide the others
            print(f"{name}: skipped ({type(exc).__name__}: {exc})")
    peaks = bootstrap_peaks()
    print(f"  bootstrap peak: {peaks}", flush=True)
    return out, peaks


def rows(found: list[Ratio], peaks: dict) -> list[dict]:
    out = [{"measure": r.name, "anchor": 1.0, "value": r.value, "spread": r.noise, "samples": r.samples,
            "target": r.target, "definition": r.definition} for r in found]
    out.append({"measure": f"run card bootstrap memory, 80 / 40 rollouts ({peaks[80]:.1f} / {peaks[40]:.1f} MiB; "
                           f"{peaks[5]:.1f} MiB at 5)", "anchor": 1.0, "value": peaks[80] / peaks[40], "spread": 0.0,
                "target": 1.2, "definition": MEMORY_DEFINITION})
    return out


def ratios(quick: bool = False, envs=ENVS) -> list[dict]:
    """Rows {"measure", "anchor", "value", "spread", "target", "definition"} (benchmarks/run_all.py)."""
    return rows(*measured(quick, envs))


def main(quick: bool = False, envs=ENVS) -> list[Ratio]:
    found, peaks = measured(quick, envs)
    print(load())
    print(table(found))
    print("\nbootstrap memory peak: " + ", ".join(f"{v:.1f} MiB at {k} rollouts" for k, v in peaks.items()) +
          f" (80 / 40: {peaks[80] / peaks[40]:.2f}, target <= 1.2, flat; {MEMORY_DEFINITION})")
    for row in rows(found, peaks):
        print(f"  {row['measure']}: {row['value']:.3f} +- {row['spread']:.3f} (target {row['target']})")
    return found + [Ratio("runner: bootstrap memory, 80 / 40 rollouts", [peaks[80] / peaks[40]], 1.2, "lower",
                          MEMORY_DEFINITION)]


if __name__ == "__main__":
    if "--envs" in sys.argv:
        i = sys.argv.index("--envs")
        chosen = tuple(sys.argv[i + 1].split(","))
        del sys.argv[i:i + 2]
        run_script(lambda quick=False: main(quick, chosen), __doc__)
    else:
        run_script(main, __doc__)
