"""The one agent interface the runner uses for every agent, scripted or LLM.

    agent.begin_instance(observation, info)
    while not done: action = agent.act(observation, info); observation, ... = env.step(action)
    agent.end_instance(reward, info, observation)   # observation: the env's last, with the feedback

A stateful rollout keeps one agent object for the whole schedule; the stateless pass builds a
fresh agent for every instance. Agents that can be resumed implement `state_dict` /
`load_state_dict`. Agents that call models report usage through `pop_usage()`.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from clbench.env import SpecCard


class AgentCard(dict):
    """What an agent is shown (`env.agent_card`): brief, reward, feedback policy, action grammar,
    step budget, tools, instance count. A plain dict whose fields also read as attributes
    (`card.brief`), like the SpecCard that privileged agents get."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"the agent card has no field {name!r} (fields: {', '.join(self)}); "
                                 "agents are shown only the agent card") from None

    def __reduce__(self):
        return (AgentCard, (dict(self),))


def agent_card(env) -> AgentCard:
    """The card a non-privileged agent of `env` (a gym env or an unwrapped clbench env) is built with."""
    return AgentCard(env.unwrapped.agent_card)


@dataclass
class Usage:
    """Tokens and cost of the model calls an agent made (cost None when the price is unknown)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost: float | None = None
    errors: list[str] = field(default_factory=list)
    #: prompt tokens of the call that chose each action, in order (a memory's footprint over time)
    step_prompt: list[int] = field(default_factory=list)
    #: model misbehaviours the run survived (empty replies, malformed tool calls, failed memory updates)
    faults: list[str] = field(default_factory=list)

    def add(self, other: "Usage") -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        self.reasoning_tokens += other.reasoning_tokens
        if other.cost is not None:
            self.cost = (self.cost or 0.0) + other.cost
        self.errors.extend(other.errors)
        self.step_prompt.extend(other.step_prompt)
        self.faults.extend(other.faults)

    def tokens(self) -> dict[str, int]:
        return {"prompt": self.prompt_tokens, "completion": self.completion_tokens,
                "cached": self.cached_tokens, "reasoning": self.reasoning_tokens}


class Agent:
    """Base agent. Subclasses implement `act`; the other hooks are optional."""

    name = "agent"
    #: privileged agents (oracles) receive the env's latent structure as `latent`
    privileged = False
    #: True when play depends on the observations only, never on the seed: the runner then plays
    #: one stateless pass instead of one per rollout seed (clbench.runner.stateless_plan)
    deterministic = False

    def __init__(self, card: AgentCard | SpecCard, seed: int = 0, latent: Any = None, **kwargs):
        if kwargs:
            raise TypeError(f"{type(self).__name__} got unknown options: {sorted(kwargs)}")
        self.card = card
        self.seed = seed
        self.latent = latent

    #: scripted references' `freeze_at=K` (clbench drift-check): from rollout position K on the agent
    #: stops updating what it learned; None = it never stops
    freeze_at: int | None = None

    def frozen(self, info: dict) -> bool:
        """Whether `freeze_at` has been reached at the instance `info` describes."""
        return self.freeze_at is not None and info.get("position", 0) >= int(self.freeze_at)

    def begin_instance(self, observation: str, info: dict) -> None:
        """A new instance starts."""

    def act(self, observation: str, info: dict) -> str:
        raise NotImplementedError

    def end_instance(self, reward: float, info: dict, observation: str = "") -> None:
        """The instance ended with `reward` (info holds raw_metric, solved, ...). `observation` is
        the env's terminal observation: the score, its parts and the env's feedback as text."""

    def pop_usage(self) -> Usage | None:
        """Model usage since the last call (None for agents that call no model)."""
        return None

    def state_dict(self) -> dict | None:
        """JSON-serialisable state for resuming a stateful rollout, or None if unsupported."""
        return None

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot be resumed")

    def probe(self, mode: str, facts: list[dict]) -> None:
        """Probe ladder (clbench.probes): before the next instance, `select` (see only the parts
        of memory stating `facts`) or `gold` (`facts` injected). Memory agents implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not support the probe ladder")

    def memory_event(self, event: str, **params) -> None:
        """Lifecycle shocks (clbench.shocks). The generic fallback handles `flush` by turning
        this agent into a fresh one; agents with richer memory override this for the rest."""
        fresh = getattr(self, "_fresh", None)
        if event == "flush" and fresh is not None:
            new = fresh()
            new._fresh = fresh
            self.__dict__.clear()
            self.__dict__.update(new.__dict__)
            return
        raise NotImplementedError(f"{type(self).__name__} does not support memory event {event!r}")


def end_instance(agent: Agent, reward: float, info: dict, observation: str) -> None:
    """End an instance for `agent`, passing the terminal observation when its `end_instance` takes
    one: agents written against the two-argument hook keep working."""
    if _takes_observation(type(agent)):
        agent.end_instance(reward, info, observation)
    else:
        agent.end_instance(reward, info)


@cache
def _takes_observation(cls: type) -> bool:
    params = list(inspect.signature(cls.end_instance).parameters.values())[1:]  # after self
    return any(p.name == "observation" or p.kind is p.VAR_POSITIONAL for p in params) or len(params) >= 3


#: agents available for every env, by name -> "module:Class"
GENERIC_AGENTS = {
    "random": "clbench.agents.random_agent:RandomAgent",
    "llm": "clbench.agents.llm:LLMAgent",
    # agents whose moves arrive over MCP (clbench.harness; docs/harnesses.md)
    "mcp": "clbench.harness.agents:BridgeAgent",
    "command": "clbench.harness.agents:CommandAgent",
    # degenerate agents (clbench.agents.degenerate); `fixed:NAME` plays the env's fixed answer NAME
    "first-legal": "clbench.agents.degenerate:FirstLegal",
    "submit": "clbench.agents.degenerate:Submit",
    "empty": "clbench.agents.degenerate:Empty",
    "fixed": "clbench.agents.degenerate:Fixed",
}


def split_agent_name(name: str) -> tuple[str, dict]:
    """`fixed:NAME` -> ("fixed", {"answer": NAME}); any other name -> (name, {})."""
    head, sep, arg = name.partition(":")
    return (head, {"answer": arg}) if sep and head == "fixed" else (name, {})


def load_object(path: str):
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def agent_table(env_cls: type) -> dict[str, str]:
    """Every agent name usable on envs of `env_cls` -> "module:Class" (the env's own win)."""
    return {**GENERIC_AGENTS, **env_cls.agents}


def agent_names(env) -> list[str]:
    return sorted(agent_table(type(env.unwrapped)))


def make_agent(name: str, env, seed: int = 0, **kwargs) -> Agent:
    """Build agent `name` for `env` (a gym env or its unwrapped clbench env)."""
    base = env.unwrapped
    table = agent_table(type(base))
    name, extra = split_agent_name(name)
    kwargs = {**extra, **kwargs}
    if name not in table and ":" not in name:
        raise ValueError(f"unknown agent {name!r} for {base.env_id}; available: {', '.join(sorted(table))}")
    cls = load_object(table.get(name, name))
    latent = base.latent() if cls.privileged else None
    # agents see the agent card only; privileged agents (oracles) may read the spec card too
    card = base.spec_card if cls.privileged else agent_card(base)

    def fresh():
        return cls(card, seed=seed, latent=latent, **kwargs)

    agent = fresh()
    agent._fresh = fresh  # lets the generic `flush` shock rebuild a memoryless agent
    return agent
