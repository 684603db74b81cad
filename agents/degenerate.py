"""Degenerate agents: policies that ignore what they observe.

docs/contract.md ("Honest scores") requires that none of them beats the task's stateless reference
(`r_reference`); tests/test_honest_scores.py plays them on every env and `clbench calibrate`
prints their means. Available for every env by name:

- `first-legal`: every step, the env's first tool with the least arguments its JSON schema
  admits (an enum's first value, the minimum number, empty lists and objects, strings of the
  minimum length).
- `submit`: every step, the tool that ends an instance (named `submit...` or `answer`) with the
  least arguments; an env without one (Poker: every action is a move) gets `first-legal`.
- `empty`: the empty reply every step.
- `fixed:NAME`: the same reply every step of every instance, taken from the env class's
  `degenerate_answers` (NAME -> raw reply; e.g. SpectrumMonitor's `everything`, the whole band).
"""
from __future__ import annotations

import json

from clbench.agent import Agent

#: the degenerate agents every env is checked against, by CLI name (fixed answers come per env)
NAMES = ("first-legal", "submit", "empty")


def least(schema: dict):
    """The least value a JSON schema admits (enough for the schemas of clbench's tools)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "string")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        return {p: least(schema["properties"].get(p, {})) for p in schema.get("required", [])}
    if kind == "array":
        return [least(schema.get("items", {})) for _ in range(int(schema.get("minItems", 0)))]
    if kind in ("number", "integer"):
        return schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "0" * int(schema.get("minLength", 0))


def tool_reply(tool: dict) -> str:
    fn = tool["function"]
    return json.dumps({"tool": fn["name"], "arguments": least(fn["parameters"])})


def fixed_answers(env_id: str) -> dict[str, str]:
    """The fixed replies an env declares as degenerate (`degenerate_answers` on its class)."""
    from clbench.registry import env_class

    return dict(env_class(env_id).degenerate_answers)


def degenerate_agents(env_id: str) -> list[str]:
    """CLI names of every degenerate agent for `env_id`."""
    return [*NAMES, *(f"fixed:{name}" for name in fixed_answers(env_id))]


class _Constant(Agent):
    """Replies `self.reply` every step, whatever it observes."""

    deterministic = True
    reply = ""

    def act(self, observation: str, info: dict) -> str:
        return self.reply


class FirstLegal(_Constant):
    name = "first-legal"

    def __init__(self, card, seed: int = 0, latent=None):
        super().__init__(card, seed=seed)
        if not card.tools:
            raise ValueError(f"{card.env_id} lists no tools: first-legal needs one")
        self.reply = tool_reply(card.tools[0])


class Submit(_Constant):
    name = "submit"

    def __init__(self, card, seed: int = 0, latent=None):
        super().__init__(card, seed=seed)
        ending = [t for t in card.tools
                  if t["function"]["name"].startswith("submit") or t["function"]["name"] == "answer"]
        self.reply = tool_reply((ending or card.tools)[0])


class Empty(_Constant):
    name = "empty"


class Fixed(_Constant):
    name = "fixed"

    def __init__(self, card, seed: int = 0, latent=None, answer: str = ""):
        super().__init__(card, seed=seed)
        answers = fixed_answers(card.env_id)
        if answer not in answers:
            raise ValueError(f"{card.env_id} declares no fixed answer {answer!r}; "
                             f"declared: {', '.join(sorted(answers)) or 'none'} (use fixed:NAME)")
        self.name = f"fixed:{answer}"
        self.reply = answers[answer]
