"""clbench tasks over MCP (clbench.harness): `clbench serve` and the `command` agent, driven by a
real MCP client (the `mcp` SDK's, in a separate process) that plays the scripted reference.

The rewards must equal the runner's own reference run on the same instances, stateful and
stateless; a harness that keeps notes in its home folder gains stateful and not stateless.
"""
from __future__ import annotations

import asyncio
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

from clbench.agent import make_agent
from clbench.harness.server import free_port
from clbench.registry import clbench_env_ids
from clbench.rollout import run
from clbench.runner import RunConfig, play_instance

mcp = pytest.importorskip("mcp")
SLOW = os.environ.get("CLBENCH_SLOW") == "1"
PY = sys.executable


def env_id(task: str) -> str:
    """The newest registered version of `task` (the env helpers bump versions)."""
    ids = [i for i in clbench_env_ids() if i.split("/")[-1].rsplit("-v", 1)[0] == task]
    return max(ids, key=lambda i: int(i.rsplit("-v", 1)[1]))


#: (task, schedule) played over MCP by default; DBExplore's 40 questions join for `serve` (one client
#: process) and, with CLBENCH_SLOW=1, for the command agent (one harness process per instance)
SERVED = [("Poker", "short"), ("SpectrumMonitor", "short"), ("DBExplore", "default")]
#: one harness per instance is slow (a process each); Poker's schedule runs with CLBENCH_SLOW=1. Poker's
#: stateless reference already plays the calling station's exploit, so `short` (Mara, Quinn, Mara) leaves its
#: memory nothing to add; `drift_short` (Mara, then Mara changed) does: 3.66 stateful vs 2.56 stateless
COMMANDED = [pytest.param("Poker", "drift_short", marks=pytest.mark.slow), ("SpectrumMonitor", "short")] + \
    ([("DBExplore", "default")] if SLOW else [])


def rewards(out: Path) -> dict[tuple[str, str], float]:
    found = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        rec = json.loads(line)
        assert rec.get("error") is None, rec["error"]
        found[(rec["mode"], rec["instance_id"])] = rec["reward"]
    return found


def reference_run(tmp_path: Path, eid: str, schedule: str, mode: str) -> dict:
    out = tmp_path / f"ref-{mode}"
    run(RunConfig(env_id=eid, agent="reference", out=str(out), rollouts=1, mode=mode, workers=1,
                  env_kwargs={"schedule": schedule}), say=lambda m: None, quiet=True)
    return rewards(out)


def wait_for_port(port: int, server: subprocess.Popen, seconds: float = 120) -> None:
    """Until the server (which imports clbench and builds the env first) accepts connections."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, server.stderr.read()[-3000:]
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on port {port}")


def client_command(*args: str) -> list[str]:
    return [PY, "-m", "clbench.harness.scripted_client", *args]


@pytest.mark.parametrize("mode", ["stateful", "stateless"])
@pytest.mark.parametrize("task,schedule", SERVED)
def test_serve_over_http_gives_the_runner_reference_rewards(tmp_path, task, schedule, mode):
    eid = env_id(task)
    n = len(gym.make(eid, schedule=schedule).unwrapped.schedule)
    port = free_port()
    out = tmp_path / "served"
    server = subprocess.Popen([PY, "-m", "clbench", "serve", "--env", eid, "--env-arg", f"schedule={schedule}",
                               "--mode", mode, "--port", str(port), "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        args = ["--url", url, "--instances", str(n)] + (["--stateless"] if mode == "stateless" else [])
        wait_for_port(port, server)
        client = subprocess.run(client_command(*args), capture_output=True, text=True, timeout=900)
        if client.returncode != 0:
            server.kill()
            raise AssertionError(f"client: {client.stdout}\n{client.stderr[-2000:]}\nserver: {server.stderr.read()[-3000:]}")
        played = [json.loads(line) for line in client.stdout.splitlines()]
        assert len(played) == n
        server.wait(timeout=120)
    finally:
        server.kill()
    assert server.returncode == 0, server.stderr.read()[-3000:]
    served = rewards(out)
    assert served == reference_run(tmp_path, eid, schedule, mode)
    # what the client saw at each instance's end is the reward the runner recorded
    assert {line["instance_id"]: line["reward"] for line in played} == {k[1]: v for k, v in served.items()}


def test_stdio_server_offers_the_env_tools_brief_and_errors(tmp_path):
    """Over stdio: the tools are the env's own schemas, the brief is the instructions, a bad call gets
    the env's own error text, and nothing beyond the env's resources can be read."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    eid = env_id("Poker")
    env = gym.make(eid, schedule="short").unwrapped
    params = StdioServerParameters(command=PY, args=["-m", "clbench", "serve", "--env", eid, "--transport", "stdio",
                                                     "--env-arg", "schedule=short", "--out", str(tmp_path / "s")])
    bad = {"tool": "act", "arguments": {"move": "teleport"}}

    async def session():
        async with Client(params, cache=None) as client:
            tools = (await client.list_tools()).tools
            card = json.loads((await client.read_resource("clbench://agent-card")).contents[0].text)
            current = json.loads((await client.read_resource("clbench://instance")).contents[0].text)
            unknown = await client.call_tool("rm_rf", {})
            wrong = await client.call_tool(bad["tool"], bad["arguments"])
            try:
                await client.read_resource("file:///etc/passwd")
                host = "read"
            except Exception as exc:  # noqa: BLE001 - the SDK raises its own error type
                host = str(exc)
            return client.instructions, tools, card, current, unknown, wrong, host

    instructions, tools, card, current, unknown, wrong, host = asyncio.run(session())
    assert [(t.name, t.input_schema) for t in tools] == [(t["function"]["name"], t["function"]["parameters"])
                                                         for t in env.tools]
    assert card["brief"] in instructions and card["tools"] == env.tools
    obs, info = env.reset(seed=0)
    assert current["observation"] == obs and current["info"]["instance_id"] == info["instance_id"]
    assert unknown.is_error and "rm_rf" in unknown.content[0].text
    expected, *_ = env.step(json.dumps(bad))  # the same error a text action gets
    assert wrong.is_error and wrong.content[0].text == expected
    assert host != "read" and "unknown resource" in host


@pytest.mark.parametrize("task,schedule", COMMANDED)
def test_command_agent_gives_the_reference_rewards_and_learns_only_through_its_home(tmp_path, task, schedule):
    eid = env_id(task)
    cmd = " ".join(map(shlex.quote, client_command())) + " --url {mcp_url} --seed {seed} --home {home}"
    out = tmp_path / "cmd"
    run(RunConfig(env_id=eid, agent="command", out=str(out), rollouts=1, mode="both", workers=2,
                  env_kwargs={"schedule": schedule}, agent_kwargs={"cmd": cmd, "timeout": 600}),
        say=lambda m: None, quiet=True)
    got = rewards(out)
    want = {**reference_run(tmp_path, eid, schedule, "stateful"), **reference_run(tmp_path, eid, schedule, "stateless")}
    assert got == want
    # every instance's harness process is recorded: command, exit status, output
    trajectories = [json.loads(line) for f in (out / "trajectories").rglob("*.jsonl")
                    for line in f.read_text().splitlines()]
    harness = [t for t in trajectories if t.get("event") == "harness"]
    assert len(harness) == len(got) and all(h["exit_status"] == 0 and "reward" in h["stdout"] for h in harness)
    if task == "Poker":  # the opponents are learnable: notes in the home folder pay off stateful only
        mean = {m: sum(v for k, v in got.items() if k[0] == m) / len(got) * 2 for m in ("stateful", "stateless")}
        assert mean["stateful"] > mean["stateless"] + 1.0, mean


def test_a_harness_without_a_home_memory_gains_nothing(tmp_path):
    eid = env_id("Poker")
    cmd = " ".join(map(shlex.quote, client_command())) + " --url {mcp_url} --seed {seed}"
    out = tmp_path / "amnesiac"
    run(RunConfig(env_id=eid, agent="command", out=str(out), rollouts=1, mode="both", workers=2,
                  env_kwargs={"schedule": "short"}, agent_kwargs={"cmd": cmd}), say=lambda m: None, quiet=True)
    got = rewards(out)
    stateful = {iid: r for (mode, iid), r in got.items() if mode == "stateful"}
    stateless = {iid: r for (mode, iid), r in got.items() if mode == "stateless"}
    assert stateful == stateless


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie (killed, waiting for a reaper) is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.parametrize("cmd,flag", [("sleep 600 & echo $! > bg.pid; sleep 600", "timed_out"),
                                      ("exit 3", "exited_early")])
def test_a_harness_that_hangs_or_quits_loses_the_instance_not_the_run(cmd, flag):
    env = gym.make(env_id("Poker"), schedule="short")
    agent = make_agent("command", env, cmd=cmd, timeout=2, grace=1)
    obs, info = env.reset(seed=0)
    traj: list[dict] = []
    started = time.monotonic()
    outcome = play_instance(env, agent, obs, info, traj)
    assert outcome["error"] is None and outcome["reward"] <= 0 and time.monotonic() - started < 30
    (trace,) = [t for t in traj if t["event"] == "harness"]
    assert trace[flag] is True
    if flag == "timed_out":  # the whole process group went, background children included
        pid = int((agent.home / "bg.pid").read_text())
        assert not _alive(pid)
    else:
        assert trace["exit_status"] == 3


def test_the_command_agent_says_what_is_wrong_with_its_command():
    env = gym.make(env_id("Poker"), schedule="short")
    with pytest.raises(ValueError, match="needs --agent-arg cmd"):
        make_agent("command", env)
    agent = make_agent("command", env, cmd="harness {prompt} {nonsense}")
    obs, info = env.reset(seed=0)
    with pytest.raises(ValueError, match=r"bad placeholder.*\{mcp_config\}"):
        agent.begin_instance(obs, info)


def test_reported_cost_and_tokens_are_read_from_the_harness_output():
    from clbench.harness.agents import _reported_usage

    out = b'working...\n{"type": "result", "total_cost_usd": 0.0123, "num_turns": 4, ' \
          b'"usage": {"input_tokens": 1500, "output_tokens": 200, "cache_read_input_tokens": 1000}}\n'
    usage = _reported_usage(out)
    assert (usage.cost, usage.calls, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == \
        (0.0123, 4, 1500, 200, 1000)
    assert _reported_usage(b"no json here\n") is None


def test_home_folder_round_trips_through_the_resumable_state(tmp_path):
    env = gym.make(env_id("Poker"), schedule="short")
    agent = make_agent("command", env, cmd="true")
    (agent.home / "notes").mkdir()
    (agent.home / "notes" / "opponents.md").write_text("Mara folds to raises")
    state = json.loads(json.dumps(agent.state_dict()))
    other = make_agent("command", env, cmd="true")
    other.load_state_dict(state)
    assert (other.home / "notes" / "opponents.md").read_text() == "Mara folds to raises"
    with pytest.raises(ValueError, match="outside the home folder"):
        other.load_state_dict({"home": {"../escape": ""}})


INSPECTOR = Path(os.environ.get("CLBENCH_MCP_INSPECTOR", "/opt/mcp-inspector/node_modules/.bin/mcp-inspector"))


@pytest.mark.skipif(not INSPECTOR.exists(), reason=f"the official MCP Inspector CLI is not installed at {INSPECTOR} "
                    "(.ci/system-setup.sh installs it from npm)")
def test_the_official_mcp_inspector_cli_reads_and_calls_the_server(tmp_path):
    eid = env_id("Poker")
    env = gym.make(eid, schedule="short").unwrapped
    port = free_port()
    server = subprocess.Popen([PY, "-m", "clbench", "serve", "--env", eid, "--env-arg", "schedule=short",
                               "--port", str(port), "--out", str(tmp_path / "s"), "--wait", "30"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_port(port, server)

        def inspect(*args: str) -> dict:
            done = subprocess.run([str(INSPECTOR), "--cli", f"http://127.0.0.1:{port}/mcp", "--transport", "http",
                                   *args], capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr[-2000:]
            return json.loads(done.stdout)

        tools = inspect("--method", "tools/list")["tools"]
        assert [(t["name"], t["inputSchema"]) for t in tools] == [(t["function"]["name"], t["function"]["parameters"])
                                                                  for t in env.tools]
        assert {r["uri"] for r in inspect("--method", "resources/list")["resources"]} == \
            {"clbench://instance", "clbench://agent-card"}
        called = inspect("--method", "tools/call", "--tool-name", "act", "--tool-arg", "action=CALL")
        assert not called.get("isError") and called["structuredContent"]["step"] == 1
    finally:
        server.kill()
