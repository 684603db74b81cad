"""Memory systems whose cost does not grow with the run: `python benchmarks/bench_memory.py [--full]`.

Every memory system of the LLM agent plays SpectrumMonitor ("short" schedule, `cycle=True`: the
scans repeat, the prompt of a bounded memory stays flat) against the local OpenAI-protocol server
of the tests (tests/openai_server.py, its scripted reference policy), started in a child process
so that its CPU time is not ours. Measured in this process:

- CPU per call: process CPU time spent inside the agent (begin_instance, act, end_instance and
  taking its transcript and usage; the env's steps excluded) over the `WINDOW` instances that end
  at instance n, divided by the model calls made in them (acting calls and memory-update calls);
- state size: bytes of the agent's `state_dict()` serialized as JSON at instance n;
- the bare SDK call: process CPU time per call of `openai.OpenAI(...).chat.completions.create(...)`
  sending the very requests the agent sent in its window (acting and memory-update calls, same
  messages and tools) to the same server again and reading the replies, right after the window.

Ratios (medians over independent repeats, spread = 1.4826 x MAD of the repeats):
  growth    = CPU per call at the last point / CPU per call at instance 50 (target <= 1.25:
              flat; icl's prompt grows by design until the context limit, so it is reported,
              not judged);
  vs SDK    = CPU per call at instance 200 / bare SDK CPU per call (target <= 1.5).
The default (quick) run stops at 200 instances (growth = 200 vs 50) with 2 repeats; `--full`
goes to 1,000 instances (growth = 1000 vs 50) with 3 repeats. `ratios()` returns the rows for
run_all.py: {"measure", "anchor", "value", "spread", "target", "definition"}.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV_ID, ENV_KWARGS = "clbench/SpectrumMonitor-v6", {"schedule": "short"}
WINDOW = 20  # instances per measurement window
GROWTH_TARGET, SDK_TARGET = 1.25, 1.5
SERVER = (
    "import sys, json\n"
    "from tests.openai_server import ScriptedServer, ReferencePolicy, _blocks, MEMORY_TASK\n"
    "class Policy(ReferencePolicy):\n"
    "    # the reference's reply to a block, computed once: the same scans come back (cycle=True), and\n"
    "    # replaying every carried block per call would make the server, not the agent, the bottleneck\n"
    "    cache = {}\n"
    "    def __call__(self, body):\n"
    "        system = body['messages'][0]['content'] or ''\n"
    "        blocks = [] if MEMORY_TASK.search(system) else _blocks(body['messages'])\n"
    "        if not blocks:\n"
    "            return super().__call__(body)\n"
    "        tools = sorted(t['function']['name'] for t in body.get('tools') or [])\n"
    "        key = json.dumps([blocks[-1], tools, 'read_memory_file' in system])\n"
    "        if key not in self.cache:\n"
    "            self.cache[key] = super().__call__(body)\n"
    "        return self.cache[key]\n"
    "kw = json.loads(sys.argv[2])\n"
    "with ScriptedServer(Policy(sys.argv[1], **kw)) as s:\n"
    "    print(s.base_url, flush=True)\n"
    "    sys.stdin.read()\n"
)


def systems() -> list[str]:
    from clbench.agents.llm import MEMORY_SYSTEMS

    return list(MEMORY_SYSTEMS)


class Server:
    """The scripted chat-completions server in a child process (its CPU is not ours)."""

    def __enter__(self) -> str:
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, ENV_ID, json.dumps(ENV_KWARGS)], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self.proc.stdout.readline().strip()

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def bare_sdk_cpu(base_url: str, calls: list[dict]) -> float:
    """CPU seconds per plain openai SDK call, sending the requests `calls` (messages, tools) again."""
    import openai

    sdk = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    cpu = 0.0
    for call in calls:
        kw = {"tools": call["tools"]} if call.get("tools") else {}
        t = time.process_time()
        reply = sdk.chat.completions.create(model="scripted", messages=call["messages"], temperature=0.0,
                                            max_tokens=2048, **kw)
        msg = reply.choices[0].message
        _ = (msg.content, msg.tool_calls, reply.usage.prompt_tokens)
        cpu += time.process_time() - t
    sdk.close()
    return cpu / max(len(calls), 1)


def measure(memory: str, base_url: str, points: list[int]) -> dict:
    """One run of `memory` to the last point: {n: {"cpu_per_call", "state_bytes", "sdk_cpu_per_call"}}."""
    import gymnasium as gym

    import clbench  # noqa: F401  registers the envs
    from clbench.agent import make_agent

    env = gym.make(ENV_ID, cycle=True, **ENV_KWARGS)
    agent = make_agent("llm", env, seed=0, memory=memory, model="scripted", base_url=base_url, backoff=0.01)
    out, cpu, calls, sent = {}, 0.0, 0, []
    obs, info = env.reset(seed=0)
    for i in range(points[-1]):
        if i:
            obs, info = env.reset()
        if any(i == p - WINDOW for p in points):
            cpu, calls, sent = 0.0, 0, []
        t = time.process_time()
        agent.begin_instance(obs, info)
        cpu += time.process_time() - t
        done = False
        while not done:
            t = time.process_time()
            action = agent.act(obs, info)
            cpu += time.process_time() - t
            obs, reward, term, trunc, info = env.step(action)
            done = term or trunc
        t = time.process_time()
        agent.end_instance(reward, info, obs)
        log = agent.pop_transcript()
        calls += agent.pop_usage().calls
        cpu += time.process_time() - t
        sent += [e for e in log if e.get("kind") == "call"]
        if i + 1 in points:
            out[i + 1] = {"cpu_per_call": cpu / max(calls, 1),
                          "state_bytes": len(json.dumps(agent.state_dict()).encode()),
                          "sdk_cpu_per_call": bare_sdk_cpu(base_url, sent)}
    env.close()
    return out


def spread(samples: list[float]) -> float:
    med = statistics.median(samples)
    return 1.4826 * statistics.median(abs(s - med) for s in samples) if len(samples) > 1 else 0.0


def run(quick: bool = True, only: list[str] | None = None, repeats: int | None = None) -> dict:
    """memory -> {"points", "runs": [measure(...) per repeat]}."""
    points = [50, 200] if quick else [50, 200, 1000]
    repeats = repeats or (2 if quick else 3)
    results = {m: {"points": points, "runs": []} for m in (only or systems())}
    with Server() as url:
        for _ in range(repeats):  # repeats interleave the systems, so a busy spell hits all alike
            for memory in results:
                results[memory]["runs"].append(measure(memory, url, points))
                print(f"{memory}: {json.dumps(results[memory]['runs'][-1])}", file=sys.stderr, flush=True)
    return results


def rows(results: dict) -> list[dict]:
    """The ratio rows (see the module docstring)."""
    from clbench.agents.llm import memory_class

    out = []
    for memory, res in results.items():
        last, runs = res["points"][-1], res["runs"]
        growth = [r[last]["cpu_per_call"] / r[50]["cpu_per_call"] for r in runs]
        vs_sdk = [r[200]["cpu_per_call"] / r[200]["sdk_cpu_per_call"] for r in runs]
        bounded = memory_class(memory).bounded
        out.append({"measure": f"memory {memory}: CPU per call growth", "anchor": f"instance {last} vs 50",
                    "value": statistics.median(growth), "spread": spread(growth), "samples": growth,
                    "target": GROWTH_TARGET if bounded else None,
                    "definition": (f"clbench CPU per model call (agent only, server and env excluded) over the "
                                   f"{WINDOW} instances ending at instance {last} / the same at instance 50; "
                                   "SpectrumMonitor short, cycle=True"
                                   + ("" if bounded else "; the prompt grows by design to the context limit"))})
        out.append({"measure": f"memory {memory}: CPU per call vs bare SDK", "anchor": "instance 200",
                    "value": statistics.median(vs_sdk), "spread": spread(vs_sdk), "samples": vs_sdk,
                    "target": SDK_TARGET,
                    "definition": (f"clbench CPU per model call over the {WINDOW} instances ending at instance 200 / "
                                   "CPU per call of a bare openai SDK chat.completions.create sending the same "
                                   "requests to the same server")})
    return out


def ratios(quick: bool = True) -> list[dict]:
    """Rows {"measure", "anchor", "value", "spread", "target", "definition"} for run_all.py."""
    return rows(run(quick=quick))


def growth_table(results: dict) -> str:
    points = next(iter(results.values()))["points"]
    head = " | ".join(f"CPU/call @{p} (ms)" for p in points) + " | " + \
        " | ".join(f"state @{p} (kB)" for p in points)
    lines = [f"| memory | {head} | SDK CPU/call @200 (ms) |", "|---" * (2 + 2 * len(points)) + "|"]
    for memory, res in results.items():
        runs = res["runs"]

        def med(p, key, scale):
            return statistics.median(r[p][key] for r in runs) * scale

        cells = [f"{med(p, 'cpu_per_call', 1e3):.2f}" for p in points] + \
                [f"{med(p, 'state_bytes', 1e-3):.1f}" for p in points]
        lines.append(f"| {memory} | {' | '.join(cells)} | {med(200, 'sdk_cpu_per_call', 1e3):.2f} |")
    return "\n".join(lines)


def ratio_table(rows_: list[dict]) -> str:
    lines = ["| measure | anchor | median | spread | target | verdict | definition |", "|---|---|---|---|---|---|---|"]
    for r in rows_:
        t = r["target"]
        verdict = "report" if t is None else "ok" if r["value"] <= t else \
            "within noise" if r["value"] <= t + r["spread"] else "MISS"
        lines.append(f"| {r['measure']} | {r['anchor']} | {r['value']:.3f} | {r['spread']:.3f} | "
                     f"{'-' if t is None else f'<= {t:g}'} | {verdict} | {r['definition']} |")
    return "\n".join(lines)


def main(quick: bool = True, only: list[str] | None = None) -> list[dict]:
    results = run(quick=quick, only=only)
    print(growth_table(results))
    print()
    out = rows(results)
    print(ratio_table(out))
    return out


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true", help="to 1,000 instances, 3 repeats (default: 200, 2 repeats)")
    p.add_argument("--memory", action="append", help="only this memory system (repeatable)")
    p.add_argument("--repeats", type=int, help="independent runs per memory (default 2 quick, 3 full)")
    p.add_argument("--json", help="also write the raw measurements here")
    args = p.parse_args()
    res = run(quick=not args.full, only=args.memory, repeats=args.repeats)
    print(growth_table(res))
    print()
    print(ratio_table(rows(res)))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
