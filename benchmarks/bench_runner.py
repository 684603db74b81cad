"""Runner overhead: `clbench rollout` against a hand-written loop over the same env and agent, per env.

    python benchmarks/bench_runner.py [--quick] [--envs Poker,SpectrumMonitor] [--instructions]

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

`--instructions` (opt-in, minutes per env) counts instead of timing: callgrind's instructions (Ir) per
run of each side, which the load of a shared machine does not move, and those of the run card alone
(its metrics, validation, writing and printing on a finished run directory). Under callgrind a run
takes ~50x longer, so the periods of time-based batching (record flushes, stop-flag looks,
checkpoints, the error policy's reads) are stretched by that factor in the counted process: the
batches stay those of a native run. Instructions are not seconds (numpy's bootstrap runs at a higher
rate than the interpreter), but two sides that do the same work count the same.

Fairness (checked with cProfile call counts on Poker, 5 rollouts): both sides build the env once
(the same 10 schedule builds), play the same 1200 instances (1200 resets, 3061 steps) with the same
agents and seeds; the runner builds one more agent (the CLI's pre-flight check of the agent's
options). What only the runner does is its product: records, trajectories, checkpoints, the run card.

Where the runner's own time goes (`--instructions`, Poker, 5 rollouts; the bare loop 1.85 G
instructions a run): +16.0% in all (the CPU-time ratio measured ~1.2 on a loaded machine), of which
the run card is +10.4% and everything else (encoding and writing each instance's record and
trajectory, the events, checkpoints, setting up the run directory) +5.6%. The run card's part, by
callgrind sections: metrics 8.7% (bootstrap draws and counts, replicate sums, curves, percentiles,
grouping the records), validation 0.7%, writing 0.9%, printing 0.1%. It is a fixed cost per (task,
system): 10,000 replicates of the paired bootstrap over the 120 instances, whatever the number of
rollouts; numpy's draws alone (the generator's stream, which fixes the CIs) are 2.3%. A breakdown
that counted only the draws (~5 ms) missed the rest of the card (~18 ms CPU).
The same counts: SpectrumMonitor 1.036 (run card 1.7%, the rest 1.8%), MemoryProbe 1.076 (run
card 5.4%, the rest 2.2%): their CPU-time ratios on a loaded machine (1.01 +- 0.09, 1.22 +- 0.19) are
noise around those.

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


#: a run under callgrind takes about this many times as long as natively (see the docstring)
CALLGRIND_SLOWDOWN = 50
INSTRUCTION_DEFINITION = ("callgrind instructions (Ir) per run of in-process `clbench rollout --agent reference "
                          "--rollouts 5 --workers 1 --quiet` / of the hand-written loop; the run card's share: "
                          "its metrics, validation, writing and printing on a finished run directory / the loop")


def _count_side(side: str, env: str, repeats: int) -> None:
    """In a process started under `valgrind --tool=callgrind --instr-atstart=no`: warm up, then count
    `repeats` runs of `side` ("bare", "command" or "card") and dump the counts."""
    import shutil
    import subprocess

    from clbench import progress, run_dir, runner

    run_dir.FLUSH_SECONDS *= CALLGRIND_SLOWDOWN  # each module's own binding: the batches of a native run
    run_dir.POLICY_LOOK_SECONDS *= CALLGRIND_SLOWDOWN
    progress.POLICY_LOOK_SECONDS *= CALLGRIND_SLOWDOWN
    runner.CHECKPOINT_SECONDS *= CALLGRIND_SLOWDOWN
    timed_command(env), bare(env)
    tmp = tempfile.mkdtemp()
    try:
        command(env, f"{tmp}/run")
        run = _card_rerun(f"{tmp}/run") if side == "card" else None

        def callgrind(*args):
            subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, capture_output=True)

        callgrind("-i", "on")
        for k in range(repeats):
            if side == "bare":
                bare(env)
            elif side == "card":
                run()
            else:
                command(env, f"{tmp}/run{k}")
        callgrind("-d")
        callgrind("-i", "off")
    finally:
        shutil.rmtree(tmp)


def _card_rerun(out: str):
    """The run card of the finished run directory `out` as `clbench rollout` makes it: built from the
    records in memory, validated, written and printed (nothing cached from the run that wrote it)."""
    from clbench import runcard
    from clbench.reporting.tables import print_metrics
    from clbench.results import load_records
    from clbench.run_dir import RunDirectory

    rd, records = RunDirectory(out), load_records(out)
    conf = rd.config()

    def run():
        runcard._LAST.clear()
        rd.write_run_card(runcard.build_run_card(out, conf, records=records))
        with contextlib.redirect_stdout(io.StringIO()):
            print_metrics(runcard.compute(out))
    return run


def instruction_counts(name: str, repeats: int = 2) -> dict:
    """Instructions per run of each side ("bare", "command", "card") of env `name`, each counted by
    callgrind in its own process (the three at once)."""
    import subprocess

    env, procs = env_id(name), {}
    with tempfile.TemporaryDirectory() as tmp:
        for side in ("bare", "command", "card"):
            procs[side] = subprocess.Popen(
                ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={tmp}/{side}.out",
                 sys.executable, __file__, "--count-side", side, env, str(repeats)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        counts = {}
        for side, proc in procs.items():
            err = proc.communicate()[1]
            if proc.returncode:
                raise RuntimeError(f"callgrind of {side} exited {proc.returncode}: {err[-600:]}")
            with open(f"{tmp}/{side}.out.1") as fh:  # part 1: the dump made after the counted runs
                total = next(int(line.split()[1]) for line in fh if line.startswith("totals:"))
            counts[side] = total / repeats
    return counts


def instructions_main(envs=ENVS) -> list[Ratio]:
    found = []
    for name in envs:
        c = instruction_counts(name)
        ratio = c["command"] / c["bare"]
        card = c["card"] / c["bare"]
        print(f"  {name}: bare {c['bare'] / 1e9:.3f} G instructions a run, clbench rollout {c['command'] / 1e9:.3f} G: "
              f"ratio {ratio:.3f}; the run card {card:.1%} of the loop, the rest of the runner's own "
              f"{ratio - 1 - card:.1%}", flush=True)
        found.append(Ratio(f"runner: clbench rollout / hand-written loop ({name}, {ROLLOUTS} rollouts), instructions",
                           [ratio], 1.1, "lower", INSTRUCTION_DEFINITION))
    print(table(found))
    return found


if __name__ == "__main__":
    if "--count-side" in sys.argv:
        i = sys.argv.index("--count-side")
        _count_side(sys.argv[i + 1], sys.argv[i + 2], int(sys.argv[i + 3]))
        sys.exit(0)
    chosen = ENVS
    if "--envs" in sys.argv:
        i = sys.argv.index("--envs")
        chosen = tuple(sys.argv[i + 1].split(","))
        del sys.argv[i:i + 2]
    if "--instructions" in sys.argv:
        instructions_main(chosen)
    else:
        run_script(lambda quick=False: main(quick, chosen), __doc__)
