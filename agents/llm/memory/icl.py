"""`icl`: full in-context memory, every earlier instance's transcript in the prompt."""
from __future__ import annotations

from clbench.agents.llm.memory.base import Episode, EpisodeLog, newest_within, prompt_counter


class InContextMemory(EpisodeLog):
    """All earlier transcripts as conversation before the current instance; when they no longer
    fit in the model's context window the oldest instances are dropped first, whole. The prompt
    grows until it reaches the window (by design); the store does not grow past it: after each
    instance the episodes that no longer fit in the largest history the agent can ever show (its
    context budget less the reply's tokens) are dropped, since no later prompt could hold them."""

    name = "icl"
    description = "every earlier instance's transcript in the prompt; the oldest dropped first at the context limit"
    bounded = False

    def history(self, budget: int) -> list[dict]:
        return newest_within(self.episodes, budget, prompt_counter(self.model))

    def update(self, episode: Episode) -> None:
        super().update(episode)
        limit = getattr(self.model, "history_limit", None)
        if limit is None:
            return
        count, used, keep = prompt_counter(self.model), 0, 0
        for ep in reversed(self.episodes):
            used += count(ep.messages())
            if used > limit:
                break
            keep += 1
        del self.episodes[: len(self.episodes) - keep]
