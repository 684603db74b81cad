"""MemoryProbe-v2 speed: conversation generation, question replay and one stateful rollout per
memory strategy on the default schedule (medians of a few repeats, ratios to truncation), plus
each strategy's accuracy breakdown (explicit vs implicit, depth quartiles) over 5 rollouts, and
episodes per second of sync(8) and async(8) vector envs against one env (issue 31).

    python benchmarks/bench_memoryprobe.py
"""
from __future__ import annotations

import statistics
import time

import gymnasium as gym

import clbench  # noqa: F401
from clbench.agent import make_agent
from clbench.envs.memoryprobe.breakdown import accuracy_breakdown, breakdown_text, depth_edges
from clbench.envs.memoryprobe.questions import build_questions

ENV = "clbench/MemoryProbe-v2"
STRATEGIES = ["truncation", "sliding-summary", "memory-bank", "file-state", "oracle"]


def rollout(env, name: str, seed: int) -> list[dict]:
    """One stateful rollout; returns the final infos."""
    agent = make_agent(name, env, seed=seed)
    obs, info = env.reset(seed=seed)
    finals = []
    for pos in range(len(env.order)):
        if pos:
            obs, info = env.reset()
        obs, reward, _, _, info = env.step(agent.act(obs, info))
        agent.end_instance(reward, info)
        finals.append(info)
    return finals


def median_time(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def vector_speed(n: int = 8, steps: int = 96) -> dict[str, float]:
    """Episodes (sessions) per second summed over sub-envs: one env, sync(n), async(n)."""
    def one() -> float:
        env = gym.make(ENV, cycle=True)
        env.reset(seed=0)
        start = time.perf_counter()
        for _ in range(steps):
            _, _, term, trunc, _ = env.step("ANSWER Q1: unknown")
            if term or trunc:
                env.reset()
        rate = steps / (time.perf_counter() - start)
        env.close()
        return rate

    def vec(mode: str) -> float:
        kw = {"vector_kwargs": {"shared_memory": False}} if mode == "async" else {}
        envs = gym.make_vec(ENV, n, vectorization_mode=mode, cycle=True, **kw)
        envs.reset(seed=0)
        start = time.perf_counter()
        for _ in range(steps // n * 2):
            envs.step(["ANSWER Q1: unknown"] * n)  # every step ends a session; autoreset moves on
        rate = (steps // n * 2) * n / 2 / (time.perf_counter() - start)  # half the steps are autoresets
        envs.close()
        return rate

    return {"single": one(), f"sync({n})": vec("sync"), f"async({n})": vec("async")}


def main() -> None:
    rates = vector_speed()
    for name, rate in rates.items():
        print(f"vector env {name:9s} {rate:8.1f} episodes/s ({rate / rates['single']:.2f}x one env)")
    t_make = median_time(lambda: gym.make(ENV).unwrapped, repeats=3)
    env = gym.make(ENV).unwrapped
    order = [slot.instance_id for slot in env.schedule.order(1)]
    t_questions = median_time(lambda: build_questions(env.conversation, order, env.spec_data["questions"]))
    print(f"generate conversation ({env.total_tokens} tokens): {t_make * 1e3:.1f} ms median")
    print(f"replay questions of one rollout order: {t_questions * 1e3:.1f} ms median")
    times = {name: median_time(lambda name=name: rollout(env, name, 0)) for name in STRATEGIES}
    for name, t in times.items():
        print(f"stateful rollout, {name:16s} {t * 1e3:7.1f} ms median ({t / times['truncation']:.2f}x truncation)")
    results = {name: [i for seed in range(5) for i in rollout(env, name, seed)] for name in STRATEGIES}
    edges = depth_edges([o for infos in results.values() for i in infos for o in i["details"]["question_outcomes"]])
    print("accuracy over 5 rollouts, depth quartile edges " + ", ".join(f"{e:.0f}" for e in edges) + " tokens:")
    for name, infos in results.items():
        print(breakdown_text(name, accuracy_breakdown(infos, edges)))


if __name__ == "__main__":
    main()
