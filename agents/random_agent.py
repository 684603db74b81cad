"""The `random` agent: uniformly random tool calls drawn from the env's tool schemas.

It knows nothing and learns nothing: a floor for every task. Arguments are sampled from the
JSON schema of the chosen tool (numbers within stated bounds, booleans, enums, short strings,
arrays of up to five items), with its own seeded generator.
"""
from __future__ import annotations

import json
import string

import numpy as np

from clbench.agent import Agent

_WORDS = ["SELECT", "count", "1", "x", "id", "FROM", "value", "0", "true", "CALL", "ls", "help"]


def sample_from_schema(schema: dict, rng: np.random.Generator, depth: int = 0):
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = kind[int(rng.integers(len(kind)))]
    if "enum" in schema:
        return schema["enum"][int(rng.integers(len(schema["enum"])))]
    if kind == "object":
        props = schema.get("properties", {})
        return {k: sample_from_schema(v, rng, depth + 1) for k, v in props.items()}
    if kind == "array":
        n = int(rng.integers(schema.get("minItems", 0), min(schema.get("maxItems", 5), 5) + 1))
        items = schema.get("items", {"type": "string"})
        return [sample_from_schema(items, rng, depth + 1) for _ in range(n)]
    if kind in ("number", "integer"):
        lo = schema.get("minimum", 0)
        hi = schema.get("maximum", lo + 100)
        value = float(rng.uniform(lo, hi))
        return int(round(value)) if kind == "integer" else round(value, 3)
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "null":
        return None
    n = int(rng.integers(1, 4))
    return " ".join(_WORDS[int(rng.integers(len(_WORDS)))] for _ in range(n)) or string.ascii_letters[0]


class RandomAgent(Agent):
    name = "random"

    def __init__(self, card, seed: int = 0, latent=None):
        super().__init__(card, seed=seed)
        self.rng = np.random.default_rng([seed, 7919])

    def act(self, observation: str, info: dict) -> str:
        tools = self.card.tools
        if not tools:
            return "".join(self.rng.choice(list(string.ascii_letters), size=8))
        fn = tools[int(self.rng.integers(len(tools)))]["function"]
        return json.dumps({"tool": fn["name"], "arguments": sample_from_schema(fn["parameters"], self.rng)})
