"""Vector envs: instances per second of `gym.make_vec(id, 8)` (sync and async) against one env.

    python benchmarks/bench_vector.py [--quick]

Every side plays the same fixed one-step reply (each env's first degenerate answer, or its first
tool with the least arguments), so every step ends an instance and the next one starts: the work
is the env's own instance turnover, which a training loop pays for. The single env loops
`step` + `reset()`; the vectors step 8 sub-envs made with `cycle=True`: gymnasium's sync and async,
and clbench's batched vector (`vectorization_mode="vector_entry_point"`, clbench/vector.py: its
default, all sub-envs in the parent on a machine with at most 2 CPUs, as "batched", and two
processes holding four sub-envs each, one message per step, as "batched, 2 processes": reported,
not judged, since what it gains depends on a CPU being free, which it is not on a shared machine). Gymnasium's
default autoreset (NEXT_STEP) spends every other vector step on resets; SAME_STEP resets inside the
step that ended the instance, so it is measured too. Each env (the single one, every sub-env) first
plays a quarter as many instances untimed, then the timed run: an env caches per object (DBExplore
its graded answers), so eight cold sub-envs against one warm env would measure the caches. Ratios:
instances/s of the vector over the single env; >= 1 means a vector of 8 is not slower than one env.

Why gymnasium's vectors stay below 1 (sync) and far below (async) on clbench envs: SyncVectorEnv
does the same env work in one process plus, per sub-env per step, `_add_info` (a fresh array and
mask per info key, recursing into nested infos such as raw_metric and final_info), which costs
about as much as a cheap instance (DBExplore warm: ~30 us of env work, ~20 us of stacking);
AsyncVectorEnv adds one pipe round trip, one pickled info and one process wake-up per sub-env per
step, and its 8 processes share 2 CPUs. clbench's batched vector skips both costs: it stacks infos
only when they are read, and calls the sub-envs inside gym.make's wrappers once these only forward.
In one process it can at best match one env: it does the same env work, and holding eight
instances' results at once (the step's observations, infos and SAME_STEP finals, until the caller
drops them) costs a few us per instance in memory traffic that one env reusing its freed memory
does not pay (measured in one process, DBExplore warm: sub-envs stepped in a bare loop 32 us per
instance, through the shard 35 us, through the vector 39 us, one env 33 us). Above 1 needs a free
CPU for a second process. On a loaded machine wall-clock ratios also measure the scheduler: every
process gets a share, so a vector of several processes takes CPU from other sessions (async's
ratios above 1 under load) and loses it again at each wake-up.

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


def single(eid: str, instances: int, warm: bool = True) -> float:
    import gymnasium as gym

    import clbench  # noqa: F401 - registers the envs (a fresh process for a cold run)

    env = gym.make(eid, cycle=True)
    reply = _reply(eid)
    env.reset(seed=0)
    for timed in (False, True) if warm else (True,):  # a warm-up of a quarter as many instances, then timed
        done, goal = 0, instances if timed else instances // 4
        t = time.perf_counter()
        while done < goal:
            _, _, term, trunc, _ = env.step(reply)
            if term or trunc:
                done += 1
                env.reset()
    rate = done / (time.perf_counter() - t)
    env.close()
    return rate


def vector(eid: str, mode: str, autoreset: str, instances: int, warm: bool = True) -> float:
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    import clbench  # noqa: F401

    kwargs = {"autoreset_mode": AutoresetMode[autoreset]}
    if mode == "async":
        kwargs["shared_memory"] = False
    if mode.startswith("batched"):  # clbench.vector: its default, or two processes of N / 2 sub-envs each
        if mode == "batched2":
            kwargs["workers"] = 2
        vec = gym.make_vec(eid, N, vectorization_mode="vector_entry_point", cycle=True, **kwargs)
    else:
        vec = gym.make_vec(eid, N, vectorization_mode=mode, cycle=True, vector_kwargs=kwargs)
    reply = (_reply(eid),) * N
    vec.reset(seed=0)
    for timed in (False, True) if warm else (True,):  # every sub-env warms up as much as the single env
        done, goal = 0, instances if timed else N * (instances // 4)
        t = time.perf_counter()
        while done < goal:
            _, _, term, trunc, _ = vec.step(reply)
            done += int((term | trunc).sum())
    rate = done / (time.perf_counter() - t)
    vec.close()
    return rate


def cold(fn, *args) -> float:
    """fn(*args, warm=False) in a fresh process: nothing cached in memory from an earlier run."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args, warm=False).result()


def measure(quick: bool = False) -> tuple[list[Ratio], list[str]]:
    """The ratios, and one line of absolute instances/s (median and range) per env and side."""
    import statistics

    repeats, instances = (2, 200) if quick else (5, 400)
    found, rates = [], []

    def line(name: str, side: str, xs: list[float], ratios: list[float] = ()) -> str:
        ratio = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else ""
        return f"| {name} | {side} | {statistics.median(xs):.0f} | {min(xs):.0f}-{max(xs):.0f} | {ratio} |"

    for name in ENVS[:1] if quick else ENVS:
        eid = env_id(name)
        singles = []
        for mode, autoreset in (("sync", "SAME_STEP"), ("async", "SAME_STEP"), ("batched", "SAME_STEP"),
                                ("sync", "NEXT_STEP"), ("batched", "NEXT_STEP"), ("batched2", "SAME_STEP")):
            samples, vec = [], []
            for _ in range(repeats):  # alternated, so a busy machine slows both sides alike
                singles.append(single(eid, instances))
                vec.append(vector(eid, mode, autoreset, instances))
                samples.append(vec[-1] / singles[-1])
            side = f"batched({N}) {autoreset}, 2 processes" if mode == "batched2" else f"{mode}({N}) {autoreset}"
            rates.append(line(name, side, vec, samples))
            if mode == "batched2":
                continue
            # the batched vector must not be slower than one env in either mode; gymnasium's NEXT_STEP
            # vectors spend a whole vector step per reset (every other step here), hence 0.5
            target = 1.0 if autoreset == "SAME_STEP" or mode == "batched" else 0.5
            found.append(Ratio(f"{name} {mode}({N}) {autoreset} / one env, instances/s", samples, target, "higher"))
        rates.append(line(name, "one env", singles))
        if name not in COLD:
            continue
        singles = []
        for mode in ("sync", "batched"):
            samples, vec = [], []
            for _ in range(repeats):
                singles.append(cold(single, eid, instances))
                vec.append(cold(vector, eid, mode, "SAME_STEP", instances))
                samples.append(vec[-1] / singles[-1])
            found.append(Ratio(f"{name} {mode}({N}) SAME_STEP cold / one env cold, instances/s", samples, 1.0,
                               "higher"))
            rates.append(line(name, f"{mode}({N}) SAME_STEP cold", vec, samples))
        rates.append(line(name, "one env cold", singles))
    return found, rates


def ratios(quick: bool = False) -> list[Ratio]:
    return measure(quick)[0]


def main(quick: bool = False) -> list[Ratio]:
    found, rates = measure(quick)
    print("| env | side | instances/s (median) | range | / one env (median, range) |\n|---|---|---|---|---|\n"
          + "\n".join(rates))
    print(table(found))
    return found


if __name__ == "__main__":
    run_script(main, __doc__)
