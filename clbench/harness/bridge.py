"""An MCP server in front of the instance the runner is playing.

The runner keeps the env and its loop (records, trajectories, resume, workers all unchanged); the
bridge hands every MCP tool call to the runner as one action and the resulting observation back
as the tool's result. `BridgeAgent` (clbench.harness.agents) is the runner's side: its `act()`
waits for the next tool call. So an external harness is measured exactly like a built-in agent,
stateful and stateless, with instance boundaries set by the runner, not by the harness.

What a harness sees, and nothing else:
- the server's instructions: the agent card's brief, reward, feedback policy and action grammar;
- the tools: `env.unwrapped.tools`, the same JSON schemas a built-in agent gets;
- the prompt `instance` and the resource `clbench://instance`: the current instance's observation;
  the resource `clbench://agent-card`: the agent card as JSON;
- each tool result: the observation `env.step` returned (invalid calls get the env's own error
  text, marked `isError`), and `structuredContent` with the step's public info (`PUBLIC_INFO`).

The server runs in a daemon thread with its own event loop, over streamable HTTP on 127.0.0.1 or
over the process's stdio. Tool calls are served one at a time, in the order they arrive.
"""
from __future__ import annotations

import json
import math
import queue
import threading
import time
from dataclasses import dataclass, field

#: info keys a harness never receives: score details are for the records, and a variant's name
#: would say when the conditions change (an agent must notice that itself). The rest is what a
#: built-in agent gets too: position, step budget, the score at the end, and what the observation
#: shows in structured form (Poker's `table`)
PRIVATE_INFO = frozenset({"details", "variant", "variant_position"})
#: what a result says once the instance is over, after the env's terminal observation
END_NOTE = "\n[clbench] This instance is over (reward {reward:g}). Do not call more tools for it."
#: how long a prompt, resource or tool call waits for the runner to open the next instance
WAIT_FOR_INSTANCE = 60.0


def public_info(info: dict) -> dict:
    """The JSON-safe part of a step's info a harness receives (all but PRIVATE_INFO)."""
    keep = {k: v for k, v in info.items() if k not in PRIVATE_INFO}
    return json.loads(json.dumps(keep, default=str))


@dataclass
class Result:
    """The runner's answer to one tool call."""

    text: str
    info: dict
    done: bool
    error: bool = False
    reward: float | None = None


@dataclass
class _Call:
    name: str
    arguments: dict
    answer: "queue.Queue[Result]" = field(default_factory=lambda: queue.Queue(maxsize=1))


class Bridge:
    """The hand-off between MCP requests (server thread) and the runner's agent (runner thread)."""

    def __init__(self, card: dict):
        self.card = card
        self._calls: "queue.Queue[_Call]" = queue.Queue()
        self._serialize = threading.Lock()  # one tool call at a time
        self._state = threading.Condition()
        self._observation: str | None = None  # the open instance's first observation; None between instances
        self._info: dict = {}
        self._instance = 0  # counts opened instances, so a call never lands in the wrong one
        self._pending: _Call | None = None
        self.tool_names = {t["function"]["name"] for t in card.get("tools", [])}

    # ------------------------------------------------------------------ runner side
    def open_instance(self, observation: str, info: dict) -> None:
        with self._state:
            self._drain()
            self._observation, self._info = observation, public_info(info)
            self._instance += 1
            self._state.notify_all()

    def next_call(self, timeout: float) -> tuple[str, dict] | None:
        """The next tool call of the open instance, or None when none came within `timeout` s."""
        try:
            call = self._calls.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        self._pending = call
        return call.name, call.arguments

    def answer(self, observation: str, info: dict, done: bool, reward: float | None = None) -> None:
        """Answer the pending call with the step's observation (and the end of the instance if `done`)."""
        call, self._pending = self._pending, None
        if call is None:
            return
        text = observation + (END_NOTE.format(reward=reward or 0.0) if done else "")
        call.answer.put(Result(text, public_info(info), done,
                               error=observation.startswith("Invalid action"), reward=reward))

    def close_instance(self) -> None:
        with self._state:
            self._observation = None
            self._drain()
            self._state.notify_all()

    def _drain(self) -> None:
        """Answer calls left over from an instance that ended (the harness called after the end)."""
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                return
            call.answer.put(Result("This instance is over; no more actions are taken for it.", {}, True, error=True))

    # ------------------------------------------------------------------ server side (blocking; run in a worker thread)
    def current(self, wait: float = WAIT_FOR_INSTANCE) -> tuple[str, dict] | None:
        """The open instance's first observation and info, waiting up to `wait` s for one to open."""
        with self._state:
            self._state.wait_for(lambda: self._observation is not None, timeout=wait)
            return None if self._observation is None else (self._observation, dict(self._info))

    def call(self, name: str, arguments: dict, wait: float = math.inf) -> Result:
        """Submit one tool call and wait for its result (the runner steps the env in between)."""
        if name not in self.tool_names:
            known = ", ".join(sorted(self.tool_names))
            return Result(f"Invalid action: unknown tool {name!r}; the tools are: {known}", {}, False, error=True)
        with self._serialize:
            with self._state:
                if not self._state.wait_for(lambda: self._observation is not None, timeout=WAIT_FOR_INSTANCE):
                    return Result("No instance is open: the run is over or between instances.", {}, True, error=True)
                instance = self._instance
            call = _Call(name, dict(arguments or {}))
            self._calls.put(call)
            deadline = time.monotonic() + wait
            while True:
                try:
                    return call.answer.get(timeout=1.0)
                except queue.Empty:
                    with self._state:
                        moved_on = self._instance != instance or self._observation is None
                    if moved_on and call.answer.empty():
                        return Result("This instance is over; no more actions are taken for it.", {}, True,
                                      error=True)
                    if time.monotonic() > deadline:
                        return Result("The runner did not answer in time.", {}, False, error=True)
