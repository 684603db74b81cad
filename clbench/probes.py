"""The oracle probe ladder: where does a memory agent's error come from?

For envs that know which latent facts an instance needs (`env.instance_facts(instance_id)`:
MemoryProbe-v1, DBExplore-v1), an LLM memory agent plays the same stateful rollouts three ways:

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

import re

PROBE_MODES = ("select", "gold")


def gold_facts(env, instance_id: str) -> list[dict]:
    """The needed facts of an instance as {"key", "text", "mentions"} (text = what to inject)."""
    base = env.unwrapped
    if not hasattr(base, "instance_facts"):
        raise ValueError(f"{base.env_id} does not expose instance_facts(); the probe ladder needs it")
    facts = []
    for f in base.instance_facts(instance_id):
        if isinstance(f, str):  # a fact id with a description table on the env (DBExplore)
            facts.append({"key": f, "text": getattr(base, "facts", {}).get(f, f), "mentions": []})
        else:
            facts.append({"key": f["key"], "text": f"{f['key']}: {f['value']}",
                          "mentions": [m["text"] for m in f.get("mentions", [])]})
    return facts


def _needles(facts: list[dict]) -> list[str]:
    needles = set()
    for f in facts:
        needles.add(f["key"].lower())
        needles.update(m.lower() for m in f.get("mentions", []) if m)
        # DBExplore fact ids look like g2.prc_cents: the table/column words are what memory mentions
        needles.update(w.lower() for w in re.findall(r"\b[a-z]+_g\d\b|\b[a-z]+\.[a-z_]+\b", f["text"]))
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
