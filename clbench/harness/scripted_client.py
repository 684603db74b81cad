"""A scripted harness: a real MCP client process that plays a clbench scripted agent over MCP.

It is what the tests use to check the MCP path end to end (the same rewards as the runner's own
run of that agent), and a small worked example of a harness that keeps memory in its home folder:

    python -m clbench.harness.scripted_client --url URL --agent reference [--home DIR] [--instances N]
    python -m clbench.harness.scripted_client --serve "clbench serve --env ID --transport stdio ..." ...

Per instance it opens a new MCP session, reads the agent card and the instance (resources
`clbench://agent-card`, `clbench://instance`), and turns each of the agent's text replies into a
call of the env's tools (parsed with the env's own grammar, as `env.step` would). With `--home`,
the agent's learned state is read from and written to `DIR/notes.json` around every instance: the
harness's memory lives in its home folder, so a stateful rollout (one home) can learn and the
stateless pass (a fresh home per instance) cannot. It prints one JSON line per instance.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from pathlib import Path

from clbench.agent import end_instance
from clbench.harness.bridge import END_NOTE

NOTES = "notes.json"


def _text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


class ScriptedHarness:
    def __init__(self, agent: str, seed: int, home: str | None, stateless: bool = False):
        self.agent_name, self.seed, self.stateless = agent, seed, stateless
        self.home = Path(home) if home else None
        self.card: dict | None = None
        self.calls = 0  # tool calls made in the current session
        self.agent = None
        self.env = None  # parses the agent's text replies into tool calls (the env's own grammar)

    def _build(self, instance_id: str) -> None:
        import gymnasium as gym

        import clbench  # noqa: F401 - registers the envs
        from clbench.agent import agent_table, load_object
        from clbench.registry import env_class
        from clbench.runner import stateless_agent_seed

        cls = load_object(agent_table(env_class(self.card["env_id"]))[self.agent_name])
        # seeded as the runner seeds that agent: the rollout seed, or per instance in the stateless pass
        seed = stateless_agent_seed(self.seed, instance_id) if self.stateless else self.seed
        self.agent = cls(self.card, seed=seed)
        if self.env is None:
            self.env = gym.make(self.card["env_id"]).unwrapped
        notes = self.home / NOTES if self.home else None
        if notes is not None and notes.is_file():
            self.agent.load_state_dict(json.loads(notes.read_text()))

    def _save(self) -> None:
        if self.home is not None:
            state = self.agent.state_dict()
            if state is not None:
                (self.home / NOTES).write_text(json.dumps(state))

    async def play_one(self, client) -> dict | None:
        """Play the open instance to its end; None when the server has no instance left."""
        if self.card is None:
            self.card = json.loads((await client.read_resource("clbench://agent-card")).contents[0].text)
        current = json.loads((await client.read_resource("clbench://instance")).contents[0].text)
        obs, info = current["observation"], current["info"]
        if not info:
            return None
        if self.agent is None or self.stateless:  # stateless: a fresh agent for every instance
            self._build(info["instance_id"])
        self.agent.begin_instance(obs, info)
        reward = 0.0
        while True:
            reply = self.agent.act(obs, info)
            call = self.env.parse_action(reply)
            self.calls += 1
            result = await client.call_tool(call.tool, call.arguments)
            obs, info = _text(result), dict(result.structured_content or {})
            if info.pop("done", False):
                break
        reward = float(info.get("instance_reward", 0.0))
        note = END_NOTE.format(reward=reward)
        obs = obs[: -len(note)] if obs.endswith(note) else obs
        end_instance(self.agent, reward, info, obs)
        self._save()
        return {"instance_id": info.get("instance_id"), "reward": reward}


async def main_async(args) -> int:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    if args.serve:
        words = shlex.split(args.serve)
        server = StdioServerParameters(command=words[0], args=words[1:])
    else:
        server = args.url
    harness = ScriptedHarness(args.agent, args.seed, args.home, stateless=args.stateless)
    played = 0
    if args.serve:  # stdio: one connection for the whole run (the server's process is the session)
        async with Client(server, cache=None) as client:
            while played < args.instances and (line := await harness.play_one(client)) is not None:
                print(json.dumps(line), flush=True)
                played += 1
    else:  # HTTP: a new session per instance
        while played < args.instances:
            line = await _session(lambda: Client(server, cache=None), harness)
            if line is None:
                break
            print(json.dumps(line), flush=True)
            played += 1
    return 0


async def _session(connect, harness: ScriptedHarness, tries: int = 5):
    """One instance in one session; a session that fails before its first tool call (the server busy
    or between instances) is opened again, since nothing was played yet."""
    for attempt in range(tries):
        harness.calls = 0
        try:
            async with connect() as client:
                return await harness.play_one(client)
        except Exception:  # noqa: BLE001 - the SDK reports transport failures as exception groups
            if harness.calls or attempt == tries - 1:
                raise
            await asyncio.sleep(0.5 * (attempt + 1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m clbench.harness.scripted_client", description=__doc__.split("\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="the MCP endpoint (streamable HTTP)")
    where.add_argument("--serve", help="a `clbench serve --transport stdio ...` command to start and talk to")
    p.add_argument("--agent", default="reference", help="the scripted agent that chooses the moves")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--home", help="keep the agent's learned state in this folder (notes.json)")
    p.add_argument("--instances", type=int, default=1,
                   help="instances to play at most (one session each over HTTP); it stops when the server has none left")
    p.add_argument("--stateless", action="store_true",
                   help="a fresh agent for every instance, seeded as the runner's stateless pass seeds it")
    return asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
