"""`playbook`: reflect, then curate a bullet playbook with delta edits (agentic context engineering).

After each instance a reflector call judges the transcript (what went right or wrong, which
playbook bullets helped or misled) and a curator call turns the reflection into delta
operations (ADD a bullet to a section, REMOVE one). Bullets carry helpful/harmful counters;
near-duplicates (TF-IDF cosine >= `dedup_threshold`, on an incremental index: a bullet is hashed
once when added) are not added twice, and past `max_bullets` (the bound, default 80) the bullet
with the worst helpful-minus-harmful score (oldest first) goes. Delta edits instead of
full rewrites keep detailed knowledge from collapsing into a short summary.
"""
from __future__ import annotations

import json

from clbench.agents.llm.memory.base import Episode, Memory, keep_share
from clbench.agents.llm.memory.index import TfidfIndex

REFLECT = (
    "You are the reflector. Study the instance that just finished, with the playbook the agent used. Diagnose "
    "what led to the reward: mistakes and their root causes, what worked, the key insight for later instances. "
    "Tag each playbook bullet that mattered as helpful or harmful. Reply with JSON: "
    '{"reflection": "...", "key_insight": "...", "bullet_tags": [{"id": "b-001", "tag": "helpful"}]}'
)
CURATE = (
    "You are the curator of the playbook. Turn the reflection into a few delta edits: ADD new, specific, "
    "actionable bullets (to a section such as strategies, facts, pitfalls) that are not already covered, and "
    "REMOVE bullets that proved wrong. Do not rewrite the playbook. Reply with JSON: "
    '{"operations": [{"type": "ADD", "section": "strategies", "content": "..."}, {"type": "REMOVE", "id": "b-003"}]}'
)
REFLECT_SCHEMA = {
    "type": "object", "required": ["reflection"],
    "properties": {
        "reflection": {"type": "string", "maxLength": 4000},
        "key_insight": {"type": "string", "maxLength": 1000},
        "bullet_tags": {"type": "array", "maxItems": 200, "items": {
            "type": "object", "required": ["id", "tag"],
            "properties": {"id": {"type": "string"}, "tag": {"enum": ["helpful", "harmful", "neutral"]}}}},
    },
}
CURATE_SCHEMA = {
    "type": "object", "required": ["operations"],
    "properties": {"operations": {"type": "array", "maxItems": 20, "items": {
        "type": "object", "required": ["type"],
        "properties": {"type": {"enum": ["ADD", "REMOVE"]}, "id": {"type": "string"},
                       "section": {"type": "string", "maxLength": 60},
                       "content": {"type": "string", "minLength": 1, "maxLength": 600}}}}},
}


class PlaybookMemory(Memory):
    name = "playbook"
    description = ("reflect on each instance, then curate a bullet playbook with delta edits "
                   "(agentic context engineering)")

    def __init__(self, model, max_bullets: int = 80, dedup_threshold: float = 0.9, **options):
        super().__init__(model, **options)
        if max_bullets < 1:
            raise ValueError("max_bullets must be >= 1")
        self.max_bullets = int(max_bullets)
        self.dedup_threshold = float(dedup_threshold)
        self.bullets: list[dict] = []  # {"id", "section", "content", "helpful", "harmful"}
        self.next_id = 1
        self.index = TfidfIndex()  # bullet contents by id, kept in step with self.bullets

    def render(self) -> str:
        sections: dict[str, list[str]] = {}
        for b in self.bullets:
            sections.setdefault(b["section"], []).append(
                f"[{b['id']}] (helpful {b['helpful']}, harmful {b['harmful']}) {b['content']}")
        return "\n".join(f"## {name}\n" + "\n".join(lines) for name, lines in sections.items())

    def context(self, observation: str) -> str:
        return f"Playbook (curated from earlier instances):\n{self.render()}" if self.bullets else ""

    def update(self, episode: Episode) -> None:
        playbook = self.render() or "(empty)"
        reflection = self.model.ask_json("playbook-reflect", REFLECT,
                                         f"Playbook:\n{playbook}\n\nInstance:\n{episode.text(self.episode_chars)}",
                                         REFLECT_SCHEMA)
        if not reflection:
            return
        by_id = {b["id"]: b for b in self.bullets}
        for tag in reflection.get("bullet_tags", []):
            if tag["id"] in by_id and tag["tag"] != "neutral":
                by_id[tag["id"]][tag["tag"]] += 1
        ops = self.model.ask_json("playbook-curate", CURATE,
                                  f"Playbook:\n{playbook}\n\nReflection:\n{json.dumps(reflection, indent=1)}",
                                  CURATE_SCHEMA)
        if ops:
            self._apply(ops["operations"])

    def _apply(self, operations: list[dict]) -> None:
        for op in operations:
            if op["type"] == "REMOVE":
                self.bullets = [b for b in self.bullets if b["id"] != op.get("id")]
                self.index.remove(op.get("id"))
                continue
            content = (op.get("content") or "").strip()
            if not content:
                continue
            best = self.index.rank(content, 1)
            if best and best[0][1] >= self.dedup_threshold:
                next(b for b in self.bullets if b["id"] == best[0][0])["helpful"] += 1  # the same lesson again:
                continue  # reinforce, do not repeat
            bullet = {"id": f"b-{self.next_id:03d}", "section": (op.get("section") or "general").strip(),
                      "content": content, "helpful": 0, "harmful": 0}
            self.bullets.append(bullet)
            self.index.add(bullet["id"], content)
            self.next_id += 1
        while len(self.bullets) > self.max_bullets:
            score = [b["helpful"] - b["harmful"] for b in self.bullets]
            self.index.remove(self.bullets.pop(min(range(len(score)), key=lambda i: (score[i], i)))["id"])

    def forget(self, fraction, rng) -> None:
        self.bullets = keep_share(self.bullets, fraction, rng)
        self._reindex()

    def _reindex(self) -> None:
        self.index = TfidfIndex()
        for b in self.bullets:
            self.index.add(b["id"], b["content"])

    def state_dict(self) -> dict:
        return {"bullets": self.bullets, "next_id": self.next_id}

    def load_state_dict(self, state: dict) -> None:
        self.bullets = [dict(b) for b in state["bullets"]]
        self.next_id = int(state["next_id"])
        self._reindex()
