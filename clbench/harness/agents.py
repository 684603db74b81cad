"""Agents whose moves come over MCP: the runner's side of clbench.harness.bridge.

`BridgeAgent` (`clbench serve`): the instance is served on an MCP endpoint and whoever connects
plays it. `CommandAgent` (`--agent command`): the runner starts an external command per instance
(a harness such as Claude Code, Codex CLI or any MCP client), connected to that instance's
endpoint, with a time limit, and records its output, exit status and reported cost.

Stateful vs stateless, for a harness: a stateful rollout keeps one agent object, hence one home
folder (the harness's memory files, notes, config) across the whole schedule; the stateless pass
builds a fresh agent per instance, hence a fresh copy of the initial home folder. The harness runs
as the user, outside clbench's sandboxes (docs/harnesses.md), and receives only what the MCP tools
return.
"""
from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from clbench.agent import Agent, Usage
from clbench.harness.bridge import Bridge

#: a harness that makes no call for this long while its process is gone counts as finished
POLL = 0.05
#: home folders larger than this are not kept in the resumable state (the rollout restarts instead)
MAX_STATE_BYTES = 16 * 1024 * 1024
#: the harness's output kept per instance, per stream
KEEP_OUTPUT = 64 * 1024


#: one endpoint per task, transport and port in a process: the stateless pass builds an agent per
#: instance, and the URL a harness or a user was given must stay the same
_ENDPOINTS: dict[tuple, tuple] = {}


def _shared_bridge(card: dict, transport: str, port: int):
    key = (card.get("env_id"), transport, port)
    if key not in _ENDPOINTS:
        from clbench.harness.server import HttpServer, serve_stdio

        bridge = Bridge(card)
        _ENDPOINTS[key] = (bridge, HttpServer(bridge, port) if transport == "http" else serve_stdio(bridge))
    return _ENDPOINTS[key]


def close_endpoints(linger: float = 10.0) -> None:
    """Stop serving: a server is given `linger` seconds for its client to hang up after the last reply
    (an HTTP server then shuts down gracefully: replies in flight are sent)."""
    for _bridge, endpoint in _ENDPOINTS.values():
        if isinstance(endpoint, threading.Thread):
            endpoint.join(linger)
        else:
            endpoint.close(linger)
    _ENDPOINTS.clear()


class BridgeAgent(Agent):
    """Plays what arrives as MCP tool calls on a shared endpoint (`transport` "http" or "stdio").

    `wait` bounds how long one step waits for the next call (seconds); when it passes, the agent
    sends an empty reply (an invalid action), so an absent client ends the instance through the
    env's invalid-action cap, never by hanging the run.
    """

    name = "mcp"
    deterministic = True

    def __init__(self, card, seed: int = 0, latent=None, transport: str = "http", port: int = 0,
                 wait: float = 1800.0, **kwargs):
        super().__init__(card, seed=seed, latent=latent, **kwargs)
        if transport not in ("http", "stdio"):
            raise ValueError(f"transport must be http or stdio, not {transport!r}")
        self.wait = float(wait)
        self.bridge, self.endpoint = _shared_bridge(dict(card), transport, int(port))
        self._asked = False

    @property
    def url(self) -> str | None:
        return getattr(self.endpoint, "url", None)

    def begin_instance(self, observation: str, info: dict) -> None:
        self._asked = False
        self.bridge.open_instance(observation, info)

    def _next_call(self) -> tuple[str, dict] | None:
        return self.bridge.next_call(self.wait)

    def act(self, observation: str, info: dict) -> str:
        if self._asked:  # the observation answers the call that produced it
            self.bridge.answer(observation, info, done=False)
        call = self._next_call()
        self._asked = call is not None
        if call is None:
            return ""
        name, arguments = call
        return json.dumps({"tool": name, "arguments": arguments})

    def end_instance(self, reward: float, info: dict, observation: str = "") -> None:
        if self._asked:
            self.bridge.answer(observation, info, done=True, reward=reward)
        self._asked = False
        self.bridge.close_instance()


class CommandAgent(BridgeAgent):
    """Starts `cmd` per instance, connected to the instance's MCP endpoint over HTTP.

    Placeholders in `cmd` (each shell-quoted): {prompt} (the brief and the first observation),
    {prompt_file}, {mcp_url}, {mcp_config} (a JSON file in the `mcpServers` format most harnesses
    read), {home}, {instance_id}, {seed}. The command runs with `sh -c` in its home folder, with HOME
    set to it and CLBENCH_MCP_URL / CLBENCH_MCP_CONFIG in its environment.

    Options: `home` (a folder copied as the initial home; default empty), `timeout` (seconds per
    instance, default 900: the process group is killed and the instance ends through the env's
    invalid-action cap), `grace` (seconds the harness may take to exit after the instance ends,
    default 30), `max_cost` (USD per instance: a harness that reports more is recorded as over
    budget). The harness's stdout, stderr, exit status and reported cost/tokens are kept in the
    trajectory (`pop_trace`); cost and tokens are read from a final JSON object on stdout when the
    harness prints one (`total_cost_usd`/`cost_usd`/`cost`, `usage.input_tokens`/`output_tokens`).
    """

    name = "command"
    deterministic = False

    def __init__(self, card, seed: int = 0, latent=None, cmd: str = "", home: str = "", timeout: float = 900.0,
                 grace: float = 30.0, max_cost: float | None = None, port: int = 0, **kwargs):
        if not cmd.strip():
            raise ValueError("the command agent needs --agent-arg cmd='...' (see docs/harnesses.md)")
        super().__init__(card, seed=seed, latent=latent, transport="http", port=port, wait=float(timeout), **kwargs)
        self.cmd, self.timeout, self.grace = cmd, float(timeout), float(grace)
        self.max_cost = None if max_cost in (None, "") else float(max_cost)
        self.home = Path(tempfile.mkdtemp(prefix="clbench-home-"))
        if home:
            shutil.copytree(Path(home).expanduser(), self.home, dirs_exist_ok=True)
        self._proc: subprocess.Popen | None = None
        self._deadline = 0.0
        self._scratch: Path | None = None
        self._trace: dict | None = None
        self._usage: Usage | None = None

    # ------------------------------------------------------------------ the harness process
    def begin_instance(self, observation: str, info: dict) -> None:
        super().begin_instance(observation, info)
        self._scratch = Path(tempfile.mkdtemp(prefix="clbench-harness-"))
        prompt = f"{self.card.get('brief', '')}\n\n{observation}"
        prompt_file = self._scratch / "prompt.txt"
        prompt_file.write_text(prompt)
        config = self._scratch / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"clbench": {"type": "http", "url": self.url}}}, indent=1))
        values = {"prompt": prompt, "prompt_file": prompt_file, "mcp_url": self.url, "mcp_config": config,
                  "home": self.home, "instance_id": info.get("instance_id", ""), "seed": self.seed}
        try:
            command = self.cmd.format(**{k: shlex.quote(str(v)) for k, v in values.items()})
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"bad placeholder in the command agent's cmd ({exc}); the placeholders are "
                             f"{', '.join('{' + k + '}' for k in values)}") from None
        env = {**os.environ, "HOME": str(self.home), "CLBENCH_MCP_URL": self.url, "CLBENCH_MCP_CONFIG": str(config)}
        self._started = time.monotonic()
        self._deadline = self._started + self.timeout
        self._proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=self.home, env=env, stdin=subprocess.DEVNULL,
                                      stdout=open(self._scratch / "stdout", "wb"),
                                      stderr=open(self._scratch / "stderr", "wb"), start_new_session=True)
        self._trace = {"command": command, "home": str(self.home)}

    def _next_call(self) -> tuple[str, dict] | None:
        # wait for a call while the harness lives and its time lasts; a harness that is gone or out
        # of time gets empty replies, which end the instance through the env's invalid-action cap
        while True:
            left = self._deadline - time.monotonic()
            if left <= 0:
                self._trace.setdefault("timed_out", True)
                self._stop()
                return None
            call = self.bridge.next_call(min(left, 0.5))
            if call is not None:
                return call
            if self._proc.poll() is not None:
                call = self.bridge.next_call(POLL)  # a call sent just before it exited
                if call is None:
                    self._trace.setdefault("exited_early", True)
                return call

    def end_instance(self, reward: float, info: dict, observation: str = "") -> None:
        super().end_instance(reward, info, observation)
        if self._proc is None:
            return
        try:
            self._proc.wait(timeout=max(0.0, min(self.grace, self._deadline - time.monotonic() + self.grace)))
        except subprocess.TimeoutExpired:
            self._trace["killed_after_end"] = True
        self._stop()
        self._collect()

    def _stop(self) -> None:
        """End the harness and everything it started: SIGTERM to its process group (SIGKILL if the harness
        outlives 5 s), then SIGKILL to whatever is left of the group (a background child, which the harness's
        own exit does not end), waiting until it is gone."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=5)
                    break
                except subprocess.TimeoutExpired:
                    continue
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            time.sleep(0.01)

    def _collect(self) -> None:
        proc, scratch = self._proc, self._scratch
        self._proc = None
        out = (scratch / "stdout").read_bytes()
        err = (scratch / "stderr").read_bytes()
        self._trace.update(exit_status=proc.returncode, seconds=round(time.monotonic() - self._started, 3),
                           stdout=out[-KEEP_OUTPUT:].decode("utf-8", "replace"),
                           stderr=err[-KEEP_OUTPUT:].decode("utf-8", "replace"))
        self._usage = _reported_usage(out)
        if self._usage is not None and self.max_cost is not None and (self._usage.cost or 0.0) > self.max_cost:
            self._trace["over_budget"] = True
            self._usage.faults.append(f"the harness reported ${self._usage.cost:.4f}, over max_cost ${self.max_cost:g}")
        shutil.rmtree(scratch, ignore_errors=True)

    # ------------------------------------------------------------------ what the runner records
    def pop_trace(self) -> dict | None:
        trace, self._trace = self._trace, None
        return trace

    def pop_usage(self) -> Usage | None:
        usage, self._usage = self._usage, None
        return usage

    def state_dict(self) -> dict | None:
        """The home folder's files (base64), so an interrupted stateful rollout resumes with them."""
        files, size = {}, 0
        for path in sorted(p for p in self.home.rglob("*") if p.is_file() and not p.is_symlink()):
            data = path.read_bytes()
            size += len(data)
            if size > MAX_STATE_BYTES:
                return None
            files[str(path.relative_to(self.home))] = base64.b64encode(data).decode("ascii")
        return {"home": files}

    def load_state_dict(self, state: dict) -> None:
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        for name, data in state["home"].items():
            target = (self.home / name).resolve()
            if self.home.resolve() not in target.parents:
                raise ValueError(f"a home file outside the home folder: {name!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(base64.b64decode(data))

    def __del__(self):
        try:
            self._stop()
            shutil.rmtree(self.home, ignore_errors=True)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _reported_usage(stdout: bytes) -> Usage | None:
    """Cost and tokens from the last JSON object the harness printed (Claude Code's `--output-format
    json` and similar), or None when it printed none."""
    for line in reversed(stdout.decode("utf-8", "replace").strip().splitlines()[-50:]):
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        cost = next((data[k] for k in ("total_cost_usd", "cost_usd", "cost") if isinstance(data.get(k), (int, float))),
                    None)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        if cost is None and not usage:
            continue
        return Usage(calls=int(data.get("num_turns", 0) or 0), prompt_tokens=int(usage.get("input_tokens", 0) or 0),
                     completion_tokens=int(usage.get("output_tokens", 0) or 0),
                     cached_tokens=int(usage.get("cache_read_input_tokens", 0) or 0),
                     cost=None if cost is None else float(cost))
    return None
