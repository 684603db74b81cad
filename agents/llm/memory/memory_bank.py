"""`memory-bank`: typed stores of fixed capacity with first-in-first-out eviction."""
from __future__ import annotations

from clbench.agents.llm.memory.base import Episode, Memory, bullet_list, keep_share

#: bank -> (capacity, what goes in it)
BANKS = {
    "facts": (20, "stable facts about the environment, with concrete values"),
    "procedures": (10, "how to do things that worked"),
    "episodes": (10, "one line per notable instance: what happened and the reward"),
    "errors": (10, "mistakes made and how to avoid them"),
}
INSTRUCTIONS = (
    "Your memory has typed banks of fixed capacity; when a bank is full its oldest entry is evicted. Banks: {banks}. "
    "From the instance that just finished, write at most {n} new entries worth keeping. Reply with JSON: "
    '{{"entries": [{{"bank": "facts", "content": "..."}}, ...]}}'
)


class MemoryBankMemory(Memory):
    name = "memory-bank"
    description = "typed memory banks (facts, procedures, episodes, errors) with fixed capacity and FIFO eviction"

    def __init__(self, model, capacities: dict | None = None, per_instance: int = 6, entry_chars: int = 400, **options):
        super().__init__(model, **options)
        caps = {name: cap for name, (cap, _) in BANKS.items()}
        unknown = set(capacities or {}) - set(caps)
        if unknown:
            raise ValueError(f"unknown banks {sorted(unknown)}; banks: {', '.join(BANKS)}")
        caps.update({k: int(v) for k, v in (capacities or {}).items()})
        if min(caps.values()) < 1 or per_instance < 1:
            raise ValueError("bank capacities and per_instance must be >= 1")
        self.capacities = caps
        self.per_instance = int(per_instance)
        self.banks: dict[str, list[str]] = {name: [] for name in BANKS}
        self.schema = {"type": "object", "required": ["entries"], "properties": {"entries": {
            "type": "array", "maxItems": self.per_instance, "items": {
                "type": "object", "required": ["bank", "content"],
                "properties": {"bank": {"enum": list(BANKS)},
                               "content": {"type": "string", "minLength": 1, "maxLength": int(entry_chars)}}}}}}

    def context(self, observation: str) -> str:
        if not any(self.banks.values()):
            return ""
        banks = [f"{name} ({len(items)}/{self.capacities[name]}):\n{bullet_list(items)}"
                 for name, items in self.banks.items()]
        return "Your memory banks:\n" + "\n".join(banks)

    def update(self, episode: Episode) -> None:
        banks = "; ".join(f"{name} (capacity {self.capacities[name]}): {what}" for name, (_, what) in BANKS.items())
        out = self.model.ask_json("memory-bank", INSTRUCTIONS.format(banks=banks, n=self.per_instance),
                                  episode.text(self.episode_chars), self.schema)
        for entry in (out or {}).get("entries", []):
            bank = self.banks[entry["bank"]]
            bank.append(entry["content"].strip())
            del bank[: max(0, len(bank) - self.capacities[entry["bank"]])]  # FIFO eviction

    def forget(self, fraction, rng) -> None:
        self.banks = {name: keep_share(items, fraction, rng) for name, items in self.banks.items()}

    def compact(self) -> None:
        """Evict the oldest half of every bank."""
        self.banks = {name: items[len(items) // 2:] for name, items in self.banks.items()}

    def state_dict(self) -> dict:
        return {"banks": self.banks}

    def load_state_dict(self, state: dict) -> None:
        self.banks = {name: list(state["banks"].get(name, [])) for name in BANKS}
