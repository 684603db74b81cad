"""CodeRepair-v4 and sandbox speed: medians of the operations a rollout repeats.

Prints, per available backend (bwrap, docker): a trivial command's round trip, a sandbox's
creation on the tablib checkout, an env reset, and a submission's evaluation (hidden tests in
a fresh checkout); and the docker/bwrap ratios. Run: python benchmarks/bench_coderepair.py
"""
from __future__ import annotations

import statistics
import time

import gymnasium as gym

import clbench  # noqa: F401
from clbench.agent import make_agent
from clbench.sandbox.bwrap import bwrap_works
from clbench.sandbox.select import docker_ready


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


def main() -> None:
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


if __name__ == "__main__":
    main()
