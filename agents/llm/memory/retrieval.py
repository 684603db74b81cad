"""`retrieval`: memories extracted by the model, recalled by similarity to the new instance."""
from __future__ import annotations

from clbench.agents.llm.memory.base import Episode, Memory, bullet_list, cosine_rank, keep_share, tfidf_rank

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
    """A growing store of extracted memories (capped at `max_items`, oldest evicted). At the start
    of an instance the `top_k` most similar to its first observation are recalled: TF-IDF
    (scikit-learn) by default, or cosine similarity of vectors from the endpoint's embedding model
    `embedding_model` when given."""

    name = "retrieval"
    description = ("the model extracts memories after each instance; the top-k most similar are recalled "
                   "(TF-IDF or embeddings)")

    def __init__(self, model, top_k: int = 5, per_instance: int = 5, max_items: int = 1000, item_chars: int = 500,
                 embedding_model: str | None = None, **options):
        super().__init__(model, **options)
        if min(top_k, per_instance, max_items, item_chars) < 1:
            raise ValueError("top_k, per_instance, max_items and item_chars must be >= 1")
        self.top_k, self.per_instance, self.max_items = int(top_k), int(per_instance), int(max_items)
        self.schema = _schema(self.per_instance, int(item_chars))
        self.embedding_model = embedding_model
        self.items: list[dict] = []  # {"text", "source", "vector" (with embeddings)}

    def recall(self, query: str) -> list[dict]:
        ranked = None
        if self.embedding_model and self.items and all(it.get("vector") for it in self.items):
            vecs = self.model.embed([query])
            if vecs:
                ranked = cosine_rank(vecs[0], [it["vector"] for it in self.items], self.top_k)
        if ranked is None:  # TF-IDF by default, and when the embedding endpoint failed
            ranked = tfidf_rank(query, [it["text"] for it in self.items], self.top_k)
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
        self.items = (self.items + new)[-self.max_items:]

    def forget(self, fraction, rng) -> None:
        self.items = keep_share(self.items, fraction, rng)

    def state_dict(self) -> dict:
        return {"items": self.items}

    def load_state_dict(self, state: dict) -> None:
        self.items = [dict(it) for it in state["items"]]
