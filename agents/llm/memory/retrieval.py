"""`retrieval`: memories extracted by the model, recalled by similarity to the new instance."""
from __future__ import annotations

from clbench.agents.llm.memory.base import Episode, Memory, bullet_list, cosine_rank, keep_share
from clbench.agents.llm.memory.index import TfidfIndex

INSTRUCTIONS = (
    "Extract up to {n} short, self-contained memories from the instance that just finished that would help in "
    "later instances of this task (facts about the environment, concrete values, what worked, what failed). "
    "Later, the memories most similar to a new instance's first observation are shown to you. Reply with JSON: "
    '{{"memories": ["...", ...]}}'
)


def _schema(n: int, chars: int) -> dict:
    return {"type": "object", "required": ["memories"],
            "properties": {"memories": {"type": "array", "maxItems": n,
                                        "items": {"type": "string", "minLength": 1, "maxLength": chars}}}}


class RetrievalMemory(Memory):
    """A store of extracted memories, bounded: at most `max_items` (default 200: the memories of the
    last 40 instances at `per_instance` = 5; 1,000 before, which let a run's cost per call grow by
    half while the store filled) of at most `item_chars` characters; past the bound the oldest are
    evicted. At the start of an instance the `top_k` most similar to its first observation are
    recalled: TF-IDF by default (an incremental index, `index.TfidfIndex`: a memory is hashed once
    when stored, so a recall costs the store, never a refit), or cosine similarity of vectors from
    the endpoint's embedding model `embedding_model` when given."""

    name = "retrieval"
    description = ("the model extracts memories after each instance; the top-k most similar are recalled "
                   "(TF-IDF or embeddings)")

    def __init__(self, model, top_k: int = 5, per_instance: int = 5, max_items: int = 200, item_chars: int = 500,
                 embedding_model: str | None = None, **options):
        super().__init__(model, **options)
        if min(top_k, per_instance, max_items, item_chars) < 1:
            raise ValueError("top_k, per_instance, max_items and item_chars must be >= 1")
        self.top_k, self.per_instance, self.max_items = int(top_k), int(per_instance), int(max_items)
        self.schema = _schema(self.per_instance, int(item_chars))
        self.embedding_model = embedding_model
        self.items: list[dict] = []  # {"text", "source", "vector" (with embeddings)}
        self._reindex()

    def recall(self, query: str) -> list[dict]:
        ranked = None
        if self.embedding_model and self.items and all(it.get("vector") for it in self.items):
            vecs = self.model.embed([query])
            if vecs:
                ranked = cosine_rank(vecs[0], [it["vector"] for it in self.items], self.top_k)
        if ranked is None:  # TF-IDF by default, and when the embedding endpoint failed
            position = {key: i for i, key in enumerate(self._keys)}
            ranked = [(position[key], sim) for key, sim in self.index.rank(query, self.top_k)]
        return [self.items[i] for i, _ in ranked]

    def context(self, observation: str) -> str:
        hits = self.recall(observation)
        if not hits:
            return ""
        return "Memories recalled for this instance (most similar first):\n" + bullet_list(
            [f"[{h['source']}] {h['text']}" for h in hits])

    def update(self, episode: Episode) -> None:
        out = self.model.ask_json("retrieval", INSTRUCTIONS.format(n=self.per_instance),
                                  episode.text(self.episode_chars), self.schema)
        if not out:
            return
        new = [{"text": t.strip(), "source": episode.instance_id} for t in out["memories"] if t.strip()]
        if new and self.embedding_model:
            vecs = self.model.embed([n["text"] for n in new])
            for item, vec in zip(new, vecs or []):
                item["vector"] = vec
        for item in new:
            self.items.append(item)
            self._keys.append(self._next_key)
            self.index.add(self._next_key, item["text"])
            self._next_key += 1
        while len(self.items) > self.max_items:  # the bound: the oldest go
            self.items.pop(0)
            self.index.remove(self._keys.pop(0))

    def forget(self, fraction, rng) -> None:
        self.items = keep_share(self.items, fraction, rng)
        self._reindex()

    def _reindex(self) -> None:
        """The TF-IDF index of `self.items` (keys: positions at indexing, then counting up)."""
        self.index, self._keys = TfidfIndex(), list(range(len(self.items)))
        for key, item in zip(self._keys, self.items):
            self.index.add(key, item["text"])
        self._next_key = len(self.items)

    def state_dict(self) -> dict:
        return {"items": self.items}

    def load_state_dict(self, state: dict) -> None:
        self.items = [dict(it) for it in state["items"]][-self.max_items:]
        self._reindex()
