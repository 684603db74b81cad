"""What every memory system of the LLM agent shares: the episode record, the hooks, TF-IDF ranking.

A memory system shapes the prompt in up to three ways and learns after each instance:

    context(observation) -> str       text for the system prompt, fixed for the instance
    history(budget) -> list[dict]     earlier conversation (chat messages) placed before it
    tools() / call_tool(name, args)   agent-side tools (e.g. reading memory files) that the
                                      model may call before acting; they never reach the env
    update(episode)                   after an instance; may ask the model (those calls count)
    forget(fraction, rng)             drop that share of what is remembered (partial-reset shock)
    compact()                         force compaction where the memory has one (recompact shock)

`state_dict()` / `load_state_dict()` make a stateful rollout resumable. Model calls go through
a `MemoryModel` (see clbench.agents.llm.agent) that accounts their tokens and cost and turns a
failed call into None (a counted fault), so a memory update never ends a run.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from clbench.llm import messages_tokens


@dataclass
class Episode:
    """One finished instance as the agent lived it: (observation, action) steps, the reward and the
    env's terminal observation (`feedback`: the score, its parts and what the grader said)."""

    instance_id: str
    header: str
    steps: list[list[str]] = field(default_factory=list)
    reward: float = 0.0
    metric: dict | None = None
    feedback: str = ""

    def outcome(self) -> str:
        text = f"Outcome of {self.instance_id}: reward {self.reward:.4g}"
        if self.metric and self.metric.get("name") not in (None, "reward"):
            text += f" ({self.metric['name']} = {self.metric['value']:.4g})"
        if self.feedback:
            text += f"\nFeedback from the environment:\n{self.feedback}"
        return text

    def messages(self) -> list[dict]:
        """The episode as plain chat messages, closed by a user message with the outcome."""
        msgs = []
        for i, (obs, action) in enumerate(self.steps):
            msgs.append({"role": "user", "content": f"{self.header}\n{obs}" if i == 0 else obs})
            msgs.append({"role": "assistant", "content": action})
        msgs.append({"role": "user", "content": self.outcome()})
        return msgs

    def text(self, limit: int | None = None) -> str:
        """Readable transcript; past `limit` characters the middle is cut (start and end kept)."""
        parts = [self.header]
        for obs, action in self.steps:
            parts += [f"Observation:\n{obs}", f"Action:\n{action}"]
        parts.append(self.outcome())
        text = "\n".join(parts)
        if limit is not None and len(text) > limit:
            keep = max(0, limit - 60) // 2
            text = f"{text[:keep]}\n[... {len(text) - 2 * keep} characters cut ...]\n{text[-keep:]}"
        return text

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Episode":
        return cls(data["instance_id"], data["header"], [list(s) for s in data["steps"]], float(data["reward"]),
                   data.get("metric"), data.get("feedback", ""))  # states saved before feedback have none


class MemoryModel(Protocol):
    """The model calls a memory system may make (implemented by the agent, which counts them)."""

    brief: str

    def ask(self, kind: str, instructions: str, material: str) -> str | None: ...

    def ask_json(self, kind: str, instructions: str, material: str, schema: dict) -> dict | None: ...

    def embed(self, texts: list[str]) -> list[list[float]] | None: ...


class Memory:
    """The `none` memory: nothing carries over between instances (the stateless baseline)."""

    name = "none"
    description = "no memory: every instance starts from the task brief alone (stateless baseline)"
    #: whether the prompt footprint stays flat over the schedule
    bounded = True
    #: characters of an episode shown to the model in a memory update
    episode_chars = 12_000

    def __init__(self, model: MemoryModel, **options: Any):
        if options:
            raise TypeError(f"memory {self.name!r} got unknown options: {sorted(options)}")
        self.model = model

    def context(self, observation: str) -> str:
        return ""

    def history(self, budget: int) -> list[dict]:
        return []

    def tools(self) -> list[dict]:
        return []

    def call_tool(self, name: str, arguments: dict) -> str:
        raise KeyError(name)

    #: whether the memory also learns after every step (`observe_step`), not only per instance
    per_turn = False

    def observe_step(self, instance_id: str, header: str, observation: str, action: str, result: str) -> None:
        """One step of the current instance and the env's answer to it (memories with `per_turn`)."""

    def update(self, episode: Episode) -> None:
        """Learn from a finished instance."""

    def forget(self, fraction: float, rng: np.random.Generator) -> None:
        """Drop `fraction` of the remembered items, chosen at random (nothing to drop here)."""

    def compact(self) -> None:
        raise NotImplementedError(f"memory {self.name!r} has no compaction to force (recompact)")

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore from `state_dict()`."""

    def snapshot(self) -> str:
        """The whole state as text (transcripts show it before and after each update)."""
        return snapshot_text(self.state_dict())


def snapshot_text(obj) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False, default=str)


class EpisodeLog(Memory):
    """Base for memories that keep finished episodes verbatim (`self.episodes`, oldest first)."""

    def __init__(self, model: MemoryModel, **options: Any):
        super().__init__(model, **options)
        self.episodes: list[Episode] = []

    def update(self, episode: Episode) -> None:
        self.episodes.append(episode)

    def forget(self, fraction: float, rng: np.random.Generator) -> None:
        self.episodes = keep_share(self.episodes, fraction, rng)

    def state_dict(self) -> dict:
        return {"episodes": [e.to_dict() for e in self.episodes]}

    def load_state_dict(self, state: dict) -> None:
        self.episodes = [Episode.from_dict(e) for e in state["episodes"]]


def keep_share(items: list, fraction: float, rng: np.random.Generator) -> list:
    """`items` without a random `fraction` of them (rounded), in their order."""
    drop = int(round(len(items) * fraction))
    gone = set(rng.choice(len(items), size=drop, replace=False).tolist()) if drop else set()
    return [x for i, x in enumerate(items) if i not in gone]


def prompt_counter(model) -> Callable[[list[dict]], int]:
    """How the agent counts prompt tokens for its context budget (a tokenizer where the model's is
    known, else the estimate): memories that fill the context window count with it."""
    return getattr(model, "count_messages", None) or messages_tokens


def newest_within(episodes: list[Episode], budget: int, count: Callable[[list[dict]], int] = messages_tokens) -> list[dict]:
    """Messages of the newest whole episodes that fit in `budget` tokens, oldest first."""
    picked: list[list[dict]] = []
    used = 0
    for ep in reversed(episodes):
        msgs = ep.messages()
        cost = count(msgs)
        if used + cost > budget:
            break
        picked.append(msgs)
        used += cost
    return [m for msgs in reversed(picked) for m in msgs]


def tfidf_rank(query: str, docs: list[str], k: int) -> list[tuple[int, float]]:
    """Indices and cosine similarities of the `k` docs most similar to `query` (TF-IDF)."""
    if not docs or k <= 0:
        return []
    from sklearn.feature_extraction.text import TfidfVectorizer

    try:
        matrix = TfidfVectorizer(sublinear_tf=True).fit_transform([*docs, query])
    except ValueError:  # no word at all in the vocabulary
        return []
    sims = (matrix[:-1] @ matrix[-1].T).toarray().ravel()
    return _top(sims, k)


def cosine_rank(query: list[float], vectors: list[list[float]], k: int) -> list[tuple[int, float]]:
    """Indices and cosine similarities of the `k` vectors most similar to `query`."""
    if not vectors or k <= 0:
        return []
    mat = np.asarray(vectors, dtype=float)
    q = np.asarray(query, dtype=float)
    denom = np.linalg.norm(mat, axis=1) * (np.linalg.norm(q) or 1.0)
    sims = mat @ q / np.where(denom == 0, 1.0, denom)
    return _top(sims, k)


def _top(sims: np.ndarray, k: int) -> list[tuple[int, float]]:
    sims = np.asarray(sims, dtype=float)
    order = np.lexsort((np.arange(len(sims)), -sims))[:k]  # ties: older first, deterministic
    return [(int(i), float(sims[i])) for i in order]


def bullet_list(items: list[str], empty: str = "(none yet)") -> str:
    return "\n".join(f"- {x}" for x in items) if items else empty
