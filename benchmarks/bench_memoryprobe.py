"""MemoryProbe-v2 speed: conversation generation, question replay and one stateful rollout per
memory strategy on the default schedule (medians of a few repeats, ratios to truncation), plus
each strategy's accuracy breakdown (explicit vs implicit, depth quartiles) over 5 rollouts.

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


def main() -> None:
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
