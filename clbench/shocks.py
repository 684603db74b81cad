"""Lifecycle shocks: maintenance events applied to a stateful agent's memory before an instance.

`--shock EVENT@K` (repeatable) applies EVENT before the instance at position K (0-based, as in
`info["position"]`) of every stateful rollout:

- `flush@K`: drop everything the agent remembers;
- `recompact@K`: force the memory's compaction (summarise, evict, rewrite);
- `partial-reset:F@K`: drop a fraction F (default 0.5) of the memory.

Agents implement `memory_event(event, **params)`; every agent supports `flush` through the
generic fallback in clbench.agent (a fresh agent's state), the others need the agent's own
implementation and fail clearly otherwise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

EVENTS = ("flush", "recompact", "partial-reset")
_SYNTAX = re.compile(r"^(flush|recompact|partial-reset)(?::([0-9.]+))?@(\d+)$")


@dataclass(frozen=True)
class Shock:
    event: str
    position: int
    fraction: float | None = None

    def params(self) -> dict:
        return {"fraction": self.fraction} if self.event == "partial-reset" else {}


def parse_shock(text: str) -> Shock:
    m = _SYNTAX.match(text.strip())
    if not m:
        raise ValueError(f"bad shock {text!r}: use flush@K, recompact@K or partial-reset[:FRACTION]@K")
    event, frac, pos = m.group(1), m.group(2), int(m.group(3))
    fraction = None
    if event == "partial-reset":
        fraction = float(frac) if frac else 0.5
        if not 0 < fraction <= 1:
            raise ValueError(f"partial-reset fraction must be in (0, 1], got {fraction}")
    elif frac:
        raise ValueError(f"{event} takes no fraction ({text!r})")
    return Shock(event, pos, fraction)


def apply_shocks(agent, shocks: list[str], position: int) -> list[dict]:
    """Apply the shocks due before `position`; returns what was applied (for the trajectory)."""
    applied = []
    for text in shocks or []:
        shock = parse_shock(text)
        if shock.position == position:
            agent.memory_event(shock.event, **shock.params())
            applied.append({"event": shock.event, "position": position, **shock.params()})
    return applied
