"""The oracle probe ladder: where does a memory agent's error come from?

For envs that know which latent facts an instance needs (`env.instance_facts(instance_id)`:
MemoryProbe-v2, DBExplore-v3), an LLM memory agent plays the same stateful rollouts three ways:

- P1: as is;
- P2: an oracle selects, from the agent's *own* memory (its memory context and carried history),
  only the parts that state a needed fact, and the agent sees just those;
- P3: the gold facts are injected into the prompt next to the memory.

With mean rewards P1 <= P2 <= P3 <= r_max the error splits into write (P3 - P2: the agent never
stored what it needed), read (P2 - P1: it stored it but did not retrieve it) and utilization
(r_max - P3: it had the facts and still failed); shares are divided by r_max - P1 and sum to 1.
The facts reach the agent only through `agent.probe(mode, facts)`, called by the runner; they
are never in observations or in the info the agent sees.
"""
from __future__ import annotations

PROBE_MODES = ("select", "gold")


def gold_facts(env, instance_id: str) -> list[dict]:
    """The needed facts of an instance as {"key", "text", "mentions"} (text = what to inject,
    mentions = how a memory would state them), from the env's `instance_facts`."""
    base = env.unwrapped
    if not base.knows_facts():
        raise ValueError(f"{base.env_id} does not implement instance_facts(); the probe ladder needs it")
    return [{"key": f["key"], "text": f["text"], "mentions": [m["text"] for m in f["mentions"] if m.get("text")]}
            for f in base.instance_facts(instance_id)]


def _needles(facts: list[dict]) -> list[str]:
    needles = {f["key"].lower() for f in facts} | {m.lower() for f in facts for m in f["mentions"]}
    return [n for n in needles if len(n) >= 3]


def select_lines(text: str, facts: list[dict]) -> str:
    """The lines of `text` that state or name a needed fact (the oracle's selection)."""
    needles = _needles(facts)
    return "\n".join(line for line in text.splitlines() if any(n in line.lower() for n in needles))


def ladder(p1: float, p2: float, p3: float, r_max: float) -> dict:
    """Write / read / utilization shares of the error r_max - P1."""
    total = r_max - p1
    parts = {"write": p3 - p2, "read": p2 - p1, "utilization": r_max - p3}
    return {"P1": p1, "P2": p2, "P3": p3, "r_max": r_max, "error": total, **parts,
            "shares": {k: (v / total if total > 0 else None) for k, v in parts.items()}}
