"""`acc`: the agent cognitive compressor, a bounded cognitive state that replaces itself.

After each instance (one turn of the task stream) the finished transcript is filed as an
artifact. Candidate artifacts are recalled from the store by TF-IDF similarity to that
transcript and the current state; a qualification gate lets through only those at least
`min_similarity` alike (at most `recall_k`). The model then compresses the previous state, the
qualified artifacts and the new transcript into a new Compressed Cognitive State (CCS) that
fully replaces the old one. The CCS is validated against a bounded JSON schema and its artifact
references must name stored artifacts: a state that fails either check is not committed (the
previous one stays), so unverified content never becomes persistent memory. Recalled artifacts
reach later prompts only through the compressed state, never verbatim.

Bounds. The ACC paper bounds what persists in the agent (the CCS, replaced, never appended to)
and what is recalled per turn (a few top-ranked artifacts); its external artifact store takes
every turn. Here the store is bounded too, so neither memory nor time grows with the run: at most
`max_artifacts` artifacts (default 64) of at most `artifact_chars` characters each. After each
update's commit (so the new state may cite any artifact it was shown), a store over the bound
evicts its oldest artifacts that the committed CCS does not cite in `artifact_refs` (the state's
evidence is kept, so its provenance stays checkable; a CCS cites at most 8, so a store of more
than 8 always has one to evict). Recall ranks the store with
an incremental TF-IDF index (`index.TfidfIndex`: a transcript is hashed once when filed and its
counts leave with it), the same scores as refitting TF-IDF over the store per update, at a cost
bounded by the store's bound. Artifact ids count up over the run (A1, A2, ...) and are never
reused, so a reference never points at a different artifact after an eviction.
"""
from __future__ import annotations

import json

from clbench.agents.llm.memory.base import Episode, Memory, bullet_list, keep_share, snapshot_text
from clbench.agents.llm.memory.index import TfidfIndex, features, joined

FIELDS = ("episodic_trace", "semantic_gist", "focal_entities", "relations", "goal", "constraints",
          "predictive_cue", "uncertainty", "artifact_refs")


def _text(n: int) -> dict:
    return {"type": "string", "maxLength": n}


def _list(items: int, chars: int, **extra) -> dict:
    return {"type": "array", "maxItems": items, "items": {"type": "string", "maxLength": chars, **extra}}


CCS_SCHEMA = {
    "type": "object",
    "required": list(FIELDS),
    "additionalProperties": False,
    "properties": {
        "episodic_trace": _list(8, 300),     # what happened, most recent turns
        "semantic_gist": _text(1200),         # the distilled understanding of the task so far
        "focal_entities": _list(16, 120),     # the things that matter (tables, channels, players, ...)
        "relations": _list(16, 240),          # how they relate
        "goal": _text(400),
        "constraints": _list(12, 240),        # rules learned, limits, what must not be done
        "predictive_cue": _text(400),         # what to expect or do next
        "uncertainty": _text(400),            # what is still unknown or doubtful
        "artifact_refs": _list(8, 12, pattern=r"^A\d+$"),  # stored artifacts the state rests on
    },
}
INSTRUCTIONS = (
    "You are the cognitive compressor of an agent. Produce its new Compressed Cognitive State (CCS): a bounded "
    "state that fully replaces the previous one. Keep only decision-relevant content; commit a fact from a "
    "recalled artifact only if the new transcript or the previous state supports it. Fields: episodic_trace "
    "(list, recent events), semantic_gist (distilled understanding), focal_entities (list), relations (list), "
    "goal, constraints (list), predictive_cue (what to expect or do next), uncertainty (what is unknown), "
    "artifact_refs (ids like \"A3\" of the artifacts below that the state rests on). Reply with the CCS as one "
    "JSON object with exactly these fields; respect the length limits of this JSON schema:\n"
    + json.dumps(CCS_SCHEMA)
)


class CognitiveCompressorMemory(Memory):
    name = "acc"
    description = ("agent cognitive compressor: a bounded, schema-validated cognitive state replaced after each "
                   "instance, fed by recalled artifacts through a qualification gate")

    def __init__(self, model, recall_k: int = 3, min_similarity: float = 0.1, artifact_chars: int = 4000,
                 per_turn: bool = False, max_artifacts: int = 64, **options):
        super().__init__(model, **options)
        max_refs = CCS_SCHEMA["properties"]["artifact_refs"]["maxItems"]
        if max_artifacts <= max_refs:
            raise ValueError(f"max_artifacts must exceed {max_refs} (the artifacts a state may cite)")
        self.max_artifacts = int(max_artifacts)
        # per_turn: the state is replaced after every step, as in the ACC paper's turn-level controller;
        # the default updates once per instance (one model call per instance instead of one per step)
        self.per_turn = bool(per_turn)
        self.recall_k, self.min_similarity = int(recall_k), float(min_similarity)
        self.artifact_chars = int(artifact_chars)
        self.state: dict | None = None
        self.artifacts: list[dict] = []  # {"id", "instance_id", "reward", "text"}; the store, never in the prompt
        self.index = TfidfIndex()  # the artifacts' texts by id, kept in step with self.artifacts
        self.next_id = 1
        self.rejected = 0  # states that failed the commit checks

    def context(self, observation: str) -> str:
        if not self.state:
            return ""
        s = self.state
        lines = ["Your cognitive state (compressed from all earlier instances):",
                 f"Goal: {s['goal']}", f"Gist: {s['semantic_gist']}",
                 "Recent episodes:\n" + bullet_list(s["episodic_trace"]),
                 "Focal entities:\n" + bullet_list(s["focal_entities"]),
                 "Relations:\n" + bullet_list(s["relations"]),
                 "Constraints:\n" + bullet_list(s["constraints"]),
                 f"Expect next: {s['predictive_cue']}", f"Uncertain: {s['uncertainty']}",
                 f"Based on artifacts: {', '.join(s['artifact_refs']) or 'none'}"]
        return "\n".join(lines)

    def qualified(self, query: str | dict[int, int]) -> list[dict]:
        """Recall candidates from the store and keep those that pass the qualification gate."""
        by_id = {a["id"]: a for a in self.artifacts}
        return [by_id[i] for i, sim in self.index.rank(query, self.recall_k) if sim >= self.min_similarity]

    def evict(self) -> None:
        """Back within the bound: evict the oldest artifacts the committed state does not cite."""
        cited = set(self.state["artifact_refs"]) if self.state else set()
        while len(self.artifacts) > self.max_artifacts:
            gone = next(a for a in self.artifacts if a["id"] not in cited)
            self.artifacts.remove(gone)
            self.index.remove(gone["id"])

    def observe_step(self, instance_id: str, header: str, observation: str, action: str, result: str) -> None:
        """Per-turn mode: the step and the env's answer go through the same qualify-and-commit update."""
        self.update(Episode(instance_id, header, [[observation, action]], 0.0, None, feedback=f"Result: {result}"))

    def update(self, episode: Episode) -> None:
        text = episode.text(self.artifact_chars)
        counts = features(text)  # the query holds the transcript: its words are counted once
        # the query: the transcript, a newline and the state as JSON
        recalled = self.qualified(joined(counts, features(json.dumps(self.state))) if self.state else counts)
        artifact = {"id": f"A{self.next_id}", "instance_id": episode.instance_id,
                    "reward": episode.reward, "text": text}
        self.next_id += 1
        self.artifacts.append(artifact)
        self.index.add(artifact["id"], counts)
        material = "\n\n".join([
            f"Previous CCS:\n{json.dumps(self.state, indent=1) if self.state else '(none: this is the first turn)'}",
            "Recalled artifacts that passed the qualification gate:\n" + (
                "\n\n".join(f"[{a['id']}] {a['text']}" for a in recalled) or "(none)"),
            f"New transcript [{artifact['id']}]:\n{text}",
        ])
        new = self.model.ask_json("acc", INSTRUCTIONS, material, CCS_SCHEMA)
        known = {a["id"] for a in self.artifacts}
        if new is None or not set(new["artifact_refs"]) <= known:
            self.rejected += 1  # not committed: the previous state stays
        else:
            self.state = new
        self.evict()  # after the commit, so the new state may cite any artifact it was shown

    def forget(self, fraction, rng) -> None:
        """Lose a share of the artifact store and of every list in the state (refs stay valid)."""
        self.artifacts = keep_share(self.artifacts, fraction, rng)
        self._reindex()
        if self.state:
            known = {a["id"] for a in self.artifacts}
            for name in FIELDS:
                if isinstance(self.state[name], list):
                    self.state[name] = keep_share(self.state[name], fraction, rng)
            self.state["artifact_refs"] = [r for r in self.state["artifact_refs"] if r in known]

    def state_dict(self) -> dict:
        return {"state": self.state, "artifacts": self.artifacts, "rejected": self.rejected, "next_id": self.next_id}

    def snapshot(self) -> str:
        """`snapshot_text(state_dict())`, the same text, with each stored artifact's text encoded once
        (artifacts never change once filed: encoding the whole store at every update was a third
        of this memory's own time per call)."""
        if not self.artifacts:
            return snapshot_text(self.state_dict())
        cache = getattr(self, "_encoded", {})
        self._encoded = {}
        for a in self.artifacts:  # as nested two deep at indent 1: two more spaces per line
            hit = cache.get(a["id"])
            self._encoded[a["id"]] = hit if hit is not None and hit[0] is a else \
                (a, "  " + snapshot_text(a).replace("\n", "\n  "))
        # a key's quotes are never escaped, so '"artifacts": []' is the key (sorted first), never a value
        rest = snapshot_text({**self.state_dict(), "artifacts": []})
        body = ",\n".join(self._encoded[a["id"]][1] for a in self.artifacts)
        return rest.replace('"artifacts": []', f'"artifacts": [\n{body}\n ]', 1)

    def load_state_dict(self, state: dict) -> None:
        self.state = state["state"]
        self.artifacts = [dict(a) for a in state["artifacts"]]
        self.rejected = int(state["rejected"])
        # states saved before ids were counted: the next id follows the store's newest
        self.next_id = int(state.get("next_id") or 1 + max((int(a["id"][1:]) for a in self.artifacts), default=0))
        self._reindex()
        self.evict()

    def _reindex(self) -> None:
        self.index = TfidfIndex()
        for a in self.artifacts:
            self.index.add(a["id"], a["text"])
