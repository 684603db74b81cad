"""CodeRepair-v4 and sandbox speed: medians of the operations a rollout repeats.

Prints, per available backend (bwrap, docker): a trivial command's round trip, a sandbox's
creation on the tablib checkout, an env reset, and a submission's evaluation (hidden tests in
a fresh checkout); and the docker/bwrap ratios. Run: python benchmarks/bench_coderepair.py

Overhead ratios (issue 34), `ratios()`: a sandbox's command round trip (`sandbox.run("true")`:
the control group, rlimits, uid drop, seccomp filter, bash, output capture and the result)
against the plainest way to run the same thing in the same isolation, alternated repeat by repeat:
- bwrap: `subprocess.run` of bwrap with the sandbox's own namespaces and mounts running `true`
  (target <= 1.2);
- Docker: `docker exec CID true` through the SDK (`container.exec_run`) on the sandbox's own
  container (target <= 1.2).
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

import gymnasium as gym

import clbench  # noqa: F401
from pathlib import Path

from clbench.agent import make_agent
from clbench.sandbox.bwrap import bwrap_works
from clbench.sandbox.select import docker_ready

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ratio import Ratio, not_available, paired, table  # noqa: E402

#: the image of the Docker row: the smallest one `clbench containers build` makes
DOCKER_IMAGE = "clbench/offline-base:bookworm"
BWRAP_DEF = ("bwrap sandbox.run('true') / subprocess.run of bwrap with the same namespaces and mounts "
             "running `true` (the plainest bwrap call in the same isolation)")
DOCKER_DEF = (f"docker sandbox.run('true') / container.exec_run(['true']) (the SDK's `docker exec CID true`) "
              f"on the same running container ({DOCKER_IMAGE})")


def bwrap_ratio(repeats: int, calls: int) -> Ratio:
    from clbench.sandbox.bwrap import BwrapSandbox

    name = "bwrap: command round trip / bare bwrap ... true"
    ok, why = bwrap_works()
    if not ok:
        return not_available(name, 1.2, "lower", why, BWRAP_DEF)
    with tempfile.TemporaryDirectory() as src:
        (Path(src) / "a.txt").write_text("x\n")
        with BwrapSandbox(src) as box:
            full = box.argv("true", box.limits)
            bare = full[: full.index("--")] + ["--", "true"]

            def ours():
                if not box.run("true").ok:
                    raise RuntimeError("`true` failed in the bwrap sandbox")

            samples = paired(ours, lambda: subprocess.run(bare, check=True), repeats, calls)
    return Ratio(name, samples, 1.2, "lower", BWRAP_DEF)


def docker_ratio(repeats: int, calls: int) -> Ratio:
    from clbench.sandbox import Runtime
    from clbench.sandbox.docker_backend import DockerSandbox

    name = "docker: command round trip / docker exec CID true"
    ok, why = docker_ready(Runtime(image=DOCKER_IMAGE))
    if not ok:
        return not_available(name, 1.2, "lower", why, DOCKER_DEF)
    with tempfile.TemporaryDirectory() as src:
        (Path(src) / "a.txt").write_text("x\n")
        with DockerSandbox(src, runtime=Runtime(image=DOCKER_IMAGE)) as box:
            def ours():
                if not box.run("true").ok:
                    raise RuntimeError("`true` failed in the docker sandbox")

            def bare():
                if box.container.exec_run(["true"]).exit_code != 0:
                    raise RuntimeError("docker exec true failed")

            samples = paired(ours, bare, repeats, calls)
    return Ratio(name, samples, 1.2, "lower", DOCKER_DEF)


def ratios(quick: bool = False) -> list[Ratio]:
    repeats, calls = (5, 5) if quick else (11, 10)
    return [bwrap_ratio(repeats, calls), docker_ratio(repeats, calls)]


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_backend(backend: str, repeat: int = 5) -> dict[str, float]:
    env = gym.make("clbench/CodeRepair-v4", backend=backend).unwrapped
    try:
        obs, info = env.reset(seed=0)
        sandbox = env._sandbox
        issue = env._issue
        results = {
            "command": median_time(lambda: sandbox.run("true"), repeat * 4),
            "sandbox": median_time(lambda: env.open_sandbox(env._checkout(issue), issue.repo).close(), repeat),
            "reset": median_time(lambda: env.reset(options={"instance": 0, "stateless": True}), repeat),
        }
        oracle = make_agent("oracle", env)

        def solve():
            o, i = env.reset(options={"instance": 0, "stateless": True})
            env.step(oracle.act(o, i))

        results["oracle issue (reset + fix + evaluation)"] = median_time(solve, repeat)
        return results
    finally:
        env.close()


def main(quick: bool = False) -> list[Ratio]:
    rows: dict[str, dict[str, float]] = {}
    if bwrap_works()[0]:
        rows["bwrap"] = bench_backend("bwrap")
    from clbench.env import load_task_spec
    from clbench.sandbox import Runtime

    images = [r["image"] for r in load_task_spec("coderepair")["repos"].values()]
    if all(docker_ready(Runtime(image=i))[0] for i in images):
        rows["docker"] = bench_backend("docker")
    for backend, results in rows.items():
        for name, seconds in results.items():
            print(f"{backend:7s} {name:42s} median {seconds * 1000:9.1f} ms")
    if len(rows) == 2:
        for name in rows["bwrap"]:
            print(f"ratio docker/bwrap {name:31s} {rows['docker'][name] / rows['bwrap'][name]:6.2f}")
    out = ratios(quick)
    print(table(out))
    return out


if __name__ == "__main__":
    from _ratio import run_script

    run_script(main, __doc__)
