"""The MCP path's per-call overhead: one tool call through `clbench serve` against one `env.step`.

    python benchmarks/bench_mcp.py [--quick]

Both sides play the same moves (the scripted reference's, on Poker's short schedule): the direct
side times `env.step(action)` in this process; the MCP side times `call_tool` from a real MCP
client (the `mcp` SDK, streamable HTTP on 127.0.0.1) to a `clbench serve` process whose runner
steps its env and answers. The difference is what the protocol, the HTTP round trip and the
hand-off to the runner cost per step. Medians and spread of per-call latencies; no target: a
harness's own model calls take seconds, so milliseconds here are for information.
"""
from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ratio import env_id, run_script  # noqa: E402


def _summary(name: str, ms: list[float]) -> str:
    ms = sorted(ms)
    p95 = ms[int(0.95 * (len(ms) - 1))]
    spread = 1.4826 * statistics.median(abs(x - statistics.median(ms)) for x in ms)
    return f"| {name} | {len(ms)} | {statistics.median(ms):.3f} | {spread:.3f} | {p95:.3f} |"


def direct(eid: str, rounds: int) -> list[float]:
    import gymnasium as gym

    import clbench  # noqa: F401
    from clbench.agent import end_instance, make_agent

    env = gym.make(eid, schedule="short")
    times = []
    for _ in range(rounds):
        agent = make_agent("reference", env, seed=0)
        obs, info = env.reset(seed=0)
        for pos in range(len(env.unwrapped.order)):
            if pos:
                obs, info = env.reset()
            agent.begin_instance(obs, info)
            while True:
                action = agent.act(obs, info)
                t = time.perf_counter()
                obs, reward, term, trunc, info = env.step(action)
                times.append((time.perf_counter() - t) * 1000)
                if term or trunc:
                    break
            end_instance(agent, reward, info, obs)
    return times


async def _over_mcp(url: str, instances: int, times: list[float]) -> None:
    from mcp import Client

    from clbench.harness.scripted_client import ScriptedHarness

    harness = ScriptedHarness("reference", 0, None)
    async with Client(url, cache=None) as client:
        original = client.call_tool

        async def timed(name, arguments):
            t = time.perf_counter()
            result = await original(name, arguments)
            times.append((time.perf_counter() - t) * 1000)
            return result

        client.call_tool = timed
        for _ in range(instances):
            await harness.play_one(client)


def over_mcp(eid: str, rounds: int) -> list[float]:
    import gymnasium as gym

    from clbench.harness.server import free_port

    n = len(gym.make(eid, schedule="short").unwrapped.schedule)
    times: list[float] = []
    for _ in range(rounds):
        port = free_port()
        with tempfile.TemporaryDirectory() as out:
            server = subprocess.Popen([sys.executable, "-m", "clbench", "serve", "--env", eid, "--port", str(port),
                                       "--env-arg", "schedule=short", "--out", out + "/run"],
                                      stderr=subprocess.DEVNULL)
            try:
                import socket

                while True:
                    with socket.socket() as s:
                        if s.connect_ex(("127.0.0.1", port)) == 0:
                            break
                    time.sleep(0.1)
                asyncio.run(_over_mcp(f"http://127.0.0.1:{port}/mcp", n, times))
                server.wait(timeout=60)
            finally:
                server.kill()
    return times


def main(quick: bool = False) -> None:
    eid = env_id("Poker")
    rounds = 1 if quick else 3
    mine, base = over_mcp(eid, rounds), direct(eid, rounds)
    print(f"{eid}, short schedule, {rounds} pass(es); per call, milliseconds\n")
    print("| path | calls | median | spread (1 sd) | p95 |\n|---|---|---|---|---|")
    print(_summary("env.step (direct)", base))
    print(_summary("MCP tool call via clbench serve (HTTP)", mine))
    print(f"\noverhead per call: {statistics.median(mine) - statistics.median(base):.3f} ms (median difference); "
          f"ratio {statistics.median(mine) / statistics.median(base):.1f}x")
    print(json.dumps({"mcp_ms": statistics.median(mine), "step_ms": statistics.median(base)}))


if __name__ == "__main__":
    run_script(main, __doc__)
