"""Vector envs: instances per second of a vector of 8 sub-envs against one env.

    python benchmarks/bench_vector.py [--quick]
    python benchmarks/bench_vector.py --instructions   # valgrind: instructions per instance, load-independent

What is judged: clbench's own vector (`gym.make_vec(id, 8, vectorization_mode="vector_entry_point")`,
clbench/vector.py, "batched" below) must not be slower than one env: target >= 1.0 in both autoreset
modes, with its default processes on this machine with its CPUs free (`default_workers`: all sub-envs in the
parent for envs with cheap steps, worker processes for expensive steps; the row names what was used).
What is reported, not judged: gymnasium's own SyncVectorEnv and AsyncVectorEnv ("sync", "async"),
as reference rows (we cannot change gymnasium; why they stay below 1 is said below), and the other
choice of processes for the batched vector (parent only, or 2 processes), so the default can be
checked against it.

Every side plays the same fixed one-step reply (each env's first degenerate answer, or its first
tool with the least arguments), so every step ends an instance and the next one starts: the work
is the env's own instance turnover, which a training loop pays for. The single env (gym.make, as a
user makes it) loops `step` + `reset()`; the vectors step 8 sub-envs made with `cycle=True`.
Gymnasium's default autoreset (NEXT_STEP) spends every other vector step on resets; SAME_STEP resets
inside the step that ended the instance; both are measured. Each env (the single one, every
sub-env) first plays a quarter as many instances untimed, then the timed run: an env caches per
object (DBExplore its graded answers), so eight cold sub-envs against one warm env would measure
the caches. The loops themselves cost alike: the single env's caller tests two Python bools per
step; the vector's caller keeps each step's termination arrays and counts them every 16 steps
(counting them every step, a numpy reduction after the envs' work, costs the caller ~1-2 us per
instance, as much as the vector's own bookkeeping). Ratios: instances/s of the vector over the
single env, the two alternated repeat by repeat; a ratio's clock is CPU time of the process when
every sub-env lives in it (immune to the other sessions on a shared machine), wall-clock time when
worker processes step sub-envs (their CPU time is not the parent's), as each row says.

Where the time goes in one process (issue 31; DBExplore, CPU time, medians and quartiles of 201
alternated chunks of 64 pairs of vector steps, each pair 8 instances; load 7-9 on 2 shared CPUs). The vector
does one env's env work and skips gym.make's two forwarding wrappers around each sub-env after their
one-time checks: one unwrapped env runs 1.09x one env's instances/s, eight stepped bare 1.06-1.09x (the
cache traffic of eight envs' objects), the shard's generated step of them (`_stepper_source`) 1.045x.
Its own cost is per vector step: three fresh reward/end arrays (copies of arrays cached under the
columns' key; -0.042), the LazyInfo (-0.007), step()'s checks, key and return (~-0.03), then the
caller's counts of two arrays (-0.02): 0.947 (0.904-0.983) NEXT_STEP. Warm, each of these is a few
thousand instructions (~0.1 us); run once per vector step between sub-env steps that evict their code and
data, each costs 3-6x that (a fresh array ~0.3-0.7 us). Instruction counts are at parity (callgrind,
2,048 instances after 400: one env 111.6k per instance, NEXT_STEP 109.0k), CPU time is not: SAME_STEP
pays the step once per 8 DBExplore instances (0.979, 0.931-1.012), NEXT_STEP twice, its step of resets
(8 resets of ~2.5 us) being a vector step of its own (0.909, 0.880-0.952, same run; 0.94-0.95 at load
1.4-2.5). That second step's fixed cost is NEXT_STEP's floor, ~0.94-0.96 of one env in CPU time.
Tried and not kept: arrays copied ahead or released in batches, np.zeros for the zero columns, a zip loop
instead of the straight-line code, the step of resets' arrays and LazyInfo made before its resets while
the step's code is hot (0.999 of the current step, paired), resets in reverse order (1.000), gc off
(no change); the ending step's key lookup is worth at most ~0.01 (1.013 paired with none at all);
recycling the arrays a caller dropped (+0.01 to +0.04) is not the fresh arrays SyncVectorEnv returns (a
held array could not be resized, a changed one would come back changed). Prefetching
NEXT_STEP's resets (done at the end of step t, in the parent or in a worker after it answered, so that
step t+1 only hands them out) is not exact and not done: a clbench reset cannot be undone (it advances the
rollout's position and enters the next instance, whose state a stateful env keeps), so a reset(seed=..,
options=..) or reset_mask between the two steps would meet an already-reset sub-env (an instance skipped,
its RNG advanced), and call/get_attr/render there would see the next instance where SyncVectorEnv shows
the ended one; what the caller does next is not known when step t returns.
A second process needs a free CPU and a dear step. With 2 processes the parent pays per vector step its
message (~6 us CPU: pickling and the write that wakes the worker), the answer (~8 us: two reads and
unpickling) and the join of the shards' columns (~3 us); a worker pickles its infos apart from its columns,
so the parent unpickles them only when an info is read (parent CPU per step, old/new paired, 41-61 repeats
at load 3-9: DBExplore NEXT_STEP 57.6 -> 51.8 us, SpectrumMonitor NEXT_STEP 188 -> 178, SAME_STEP 346 ->
326; a caller reading every info pays as before, 0.99 paired). CPU per vector step, parent alone vs parent +
worker (NEXT_STEP, 21 x 500-2,000 steps, load 3): DBExplore 41 vs 48 + 45 us, so a worker cannot win even on
a free CPU (the parent is the default); SpectrumMonitor (64 us a step, 13 a reset, unwrapped) 293 vs 175 +
180 us (SAME_STEP 554 vs 327 + 320): on a free CPU up to 293/180 = 1.6x the parent alone, but when the two
processes share one CPU their wall time is the sum (349 us a step at load 3: wall-time ratio 0.80,
0.77-0.86, with 2 processes against 0.96, 0.93-1.07, in the parent alone). The judged rows use the processes
of a machine with its CPUs free, so on a loaded machine they measure the load. Spinning on the pipes instead
of blocking gains nothing here (a blocking round trip is ~14 us) and under load takes the CPU the other
process needs (p90 round trip 2.4 ms).
Eight envs' objects and results take more cache than one env's, so on a machine whose other processes
share the caches the in-process CPU-time ratios drop as the load rises; `--instructions` counts the work
itself, which no load changes: that is where the vector's bookkeeping shows.

Why gymnasium's vectors stay below 1 (sync) and far below (async) on clbench envs: SyncVectorEnv
does the same env work in one process plus, per sub-env per step, `_add_info` (a fresh array and
mask per info key, recursing into nested infos such as raw_metric and final_info), which costs
about as much as a cheap instance (DBExplore warm: ~30 us of env work, ~20 us of stacking);
AsyncVectorEnv adds one pipe round trip, one pickled info and one process wake-up per sub-env per
step, and its 8 processes share 2 CPUs. On a loaded machine wall-clock ratios also measure the
scheduler: every process gets a share, so a vector of several processes takes CPU from other
sessions and loses it again at each wake-up.

Envs in COLD are also measured cold: each side in a fresh process, timed from the first reset with
no warm-up, so the work an env caches (DBExplore's true answers, computed once per process and
shared by the sub-envs living there) is in the time, as at the start of a training run.
"""
from __future__ import annotations

import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ratio import Ratio, env_id, run_script, table  # noqa: E402

N = 8
ENVS = ("SpectrumMonitor", "DBExplore", "MemoryProbe")
COLD = ("DBExplore",)


def _reply(eid: str) -> str:
    from clbench.agents.degenerate import fixed_answers, tool_reply
    from clbench.registry import env_class

    answers = fixed_answers(eid)
    if answers:
        return next(iter(answers.values()))
    import gymnasium as gym

    return tool_reply(gym.make(eid).unwrapped.tools[-1])


def single(eid: str, instances: int, warm: bool = True, cpu: bool = True) -> float:
    import gymnasium as gym

    import clbench  # noqa: F401 - registers the envs (a fresh process for a cold run)

    clock = time.process_time if cpu else time.perf_counter
    env = gym.make(eid, cycle=True)
    reply = _reply(eid)
    env.reset(seed=0)
    for timed in (False, True) if warm else (True,):  # a warm-up of a quarter as many instances, then timed
        done, goal = 0, instances if timed else instances // 4
        t = clock()
        while done < goal:
            _, _, term, trunc, _ = env.step(reply)
            if term or trunc:
                done += 1
                env.reset()
    rate = done / (clock() - t)
    env.close()
    return rate


def make_vector(eid: str, mode: str, autoreset: str):
    """gymnasium's "sync" / "async", or clbench's "batchedK" (K processes, the parent one of them)."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    import clbench  # noqa: F401

    kwargs = {"autoreset_mode": AutoresetMode[autoreset]}
    if mode == "async":
        kwargs["shared_memory"] = False
    if mode.startswith("batched"):
        return gym.make_vec(eid, N, vectorization_mode="vector_entry_point", cycle=True,
                            workers=int(mode.removeprefix("batched")), **kwargs)
    return gym.make_vec(eid, N, vectorization_mode=mode, cycle=True, vector_kwargs=kwargs)


def in_process(mode: str) -> bool:
    """Whether every sub-env of this vector lives in the calling process (then CPU time is the clock)."""
    return mode in ("sync", "batched1")


def processes(mode: str) -> str:
    if in_process(mode):
        return "parent only"
    return f"{N} processes" if mode == "async" else f"{mode.removeprefix('batched')} processes"


def vector(eid: str, mode: str, autoreset: str, instances: int, warm: bool = True, cpu: bool = True) -> float:
    import numpy as np

    clock = time.process_time if cpu else time.perf_counter
    vec = make_vector(eid, mode, autoreset)
    reply = (_reply(eid),) * N
    vec.reset(seed=0)
    for timed in (False, True) if warm else (True,):  # every sub-env warms up as much as the single env
        done, goal = 0, instances if timed else N * (instances // 4)
        t = clock()
        while done < goal:
            ends = [vec.step(reply)[2:4] for _ in range(16)]  # the caller counts ends every 16 steps (docstring)
            done += sum(np.count_nonzero(term) + np.count_nonzero(trunc) for term, trunc in ends)
    rate = done / (clock() - t)
    vec.close()
    return rate


def cold(fn, *args) -> float:
    """fn(*args, warm=False) in a fresh process: nothing cached in memory from an earlier run."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args, warm=False).result()


def measure(quick: bool = False) -> tuple[list[Ratio], list[str]]:
    """The judged ratios (clbench's batched vector), and one line per env and side of absolute
    instances/s (median and range) with its ratio to one env, judged or not."""
    import statistics

    repeats, instances = (3, 200) if quick else (7, 400)
    found, rates = [], []

    def line(name: str, side: str, xs: list[float], ratios: list[float] = (), judged: str = "") -> str:
        ratio = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else ""
        return f"| {name} | {side} | {statistics.median(xs):.0f} | {min(xs):.0f}-{max(xs):.0f} | {ratio} | {judged} |"

    for name in ENVS[:1] if quick else ENVS:
        eid = env_id(name)
        from clbench.vector import default_workers, machine_cpus, step_seconds

        # the default for this env on this machine with its CPUs free (its declared step cost), kept for
        # every repeat; the other choice is reported beside it. Not the load average's choice now: the
        # rows run before this one raise it, and a table once judged MemoryProbe's vector in the parent
        # alone (0.99) where a quiet machine gives it 2 processes (1.35-1.54)
        default = f"batched{default_workers(N, step_seconds(eid), cpus=machine_cpus())}"
        other = "batched2" if default == "batched1" else "batched1"
        singles = {True: [], False: []}
        for mode, autoreset in ((default, "SAME_STEP"), (default, "NEXT_STEP"), (other, "SAME_STEP"),
                                ("sync", "SAME_STEP"), ("sync", "NEXT_STEP"), ("async", "SAME_STEP")):
            cpu = in_process(mode)
            samples, vec = [], []
            for _ in range(repeats):  # alternated, so a busy machine slows both sides alike
                singles[cpu].append(single(eid, instances, cpu=cpu))
                vec.append(vector(eid, mode, autoreset, instances, cpu=cpu))
                samples.append(vec[-1] / singles[cpu][-1])
            owner = ("clbench batched, default" if mode == default else "clbench batched") if mode.startswith(
                "batched") else f"gymnasium {mode}"
            side = f"{owner}({N}) {autoreset}, {processes(mode)}, {'CPU' if cpu else 'wall'} time"
            judged = mode == default
            rates.append(line(name, side, vec, samples, "judged >= 1" if judged else "reference, no target"))
            if judged:
                found.append(Ratio(f"{name} clbench batched({N}) {autoreset} / one env, instances/s", samples, 1.0,
                                   "higher", f"instances/s of clbench's vector of {N} ({processes(mode)}) over "
                                   f"one gym.make env's, {'CPU' if cpu else 'wall-clock'} time, alternated"))
        for cpu, xs in singles.items():
            if xs:
                rates.append(line(name, f"one env, {'CPU' if cpu else 'wall'} time", xs))
        if name not in COLD:
            continue
        singles = []
        for mode in ("batched1", "sync"):  # cheap steps: the parent alone is the default
            samples, vec = [], []
            for _ in range(repeats):
                singles.append(cold(single, eid, instances))
                vec.append(cold(vector, eid, mode, "SAME_STEP", instances))
                samples.append(vec[-1] / singles[-1])
            if mode == "batched1":
                found.append(Ratio(f"{name} clbench batched({N}) SAME_STEP cold / one env cold, instances/s", samples,
                                   1.0, "higher", "the same, each side in a fresh process with nothing cached, "
                                   "CPU time"))
            owner = "clbench batched" if mode == "batched1" else "gymnasium sync"
            rates.append(line(name, f"{owner}({N}) SAME_STEP cold, parent only, CPU time", vec, samples,
                              "judged >= 1" if mode == "batched1" else "reference, no target"))
        rates.append(line(name, "one env cold, CPU time", singles))
    return found, rates


def ratios(quick: bool = False) -> list[Ratio]:
    return measure(quick)[0]


def main(quick: bool = False) -> list[Ratio]:
    found, rates = measure(quick)
    print("| env | side | instances/s (median) | range | / one env (median, range) | target |\n"
          "|---|---|---|---|---|---|\n" + "\n".join(rates))
    print(table(found))
    return found


def turnover(eid: str, side: str, instances: int) -> None:
    """Play `instances` instances on one env ("single") or a parent-only vector of N ("SAME_STEP",
    "NEXT_STEP"), after a warm-up in which every question's answer gets cached (`--instructions`)."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    import clbench  # noqa: F401

    reply = _reply(eid)
    if side == "single":
        env = gym.make(eid, cycle=True)
        env.reset(seed=0)

        def run(n):
            for _ in range(n):
                env.step(reply)
                env.reset()
    else:
        vec = gym.make_vec(eid, N, vectorization_mode="vector_entry_point", cycle=True, workers=1,
                           autoreset_mode=AutoresetMode[side])
        vec.reset(seed=0)
        replies, steps = (reply,) * N, 1 if side == "SAME_STEP" else 2

        def run(n):
            for _ in range(steps * n // N):
                vec.step(replies)
    run(400)
    run(instances)


def instructions(names=("DBExplore", "SpectrumMonitor"), instances: int = 4000) -> str:
    """Instructions executed per instance (valgrind's cachegrind, PYTHONHASHSEED=0: the same count on a
    busy machine as on a quiet one) by one env and by a parent-only vector of N in both autoreset
    modes: the difference of a run of `instances` instances and a run of none, each side in its own
    process. It measures the bookkeeping, not the cache traffic of eight envs' objects. The two runs'
    setups differ by a few million instructions (DuckDB's threads, the collector), about 1-2% of the
    per-instance count at 4000 instances: compare sides within that."""
    import os
    import re
    import shutil
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    valgrind = shutil.which("valgrind")
    if not valgrind:
        return "valgrind is not installed: no instruction counts"

    def count(eid: str, side: str, k: int) -> int:
        out = subprocess.run([valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                              sys.executable, __file__, "--turnover", eid, side, str(k)], capture_output=True,
                             text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, check=True).stderr
        return int(re.search(r"I\s+refs:\s+([\d,]+)", out).group(1).replace(",", ""))

    jobs = [(env_id(name), side, k) for name in names for side in ("single", "SAME_STEP", "NEXT_STEP")
            for k in (0, instances)]
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: count(*job), jobs)))
    rows = ["| env | side | instructions per instance | / one env's (<= 1: no more work than one env) |",
            "|---|---|---|---|"]
    for name in names:
        eid = env_id(name)
        per = {side: (counts[(eid, side, instances)] - counts[(eid, side, 0)]) / instances
               for side in ("single", "SAME_STEP", "NEXT_STEP")}
        for side, label in (("single", "one env"), ("SAME_STEP", f"clbench batched({N}) SAME_STEP, parent only"),
                            ("NEXT_STEP", f"clbench batched({N}) NEXT_STEP, parent only")):
            rows.append(f"| {name} | {label} | {per[side]:.0f} | {per[side] / per['single']:.3f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--turnover"]:
        turnover(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1:2] == ["--instructions"]:
        print(instructions())
    else:
        run_script(main, __doc__)
