"""`icl`: full in-context memory, every earlier instance's transcript in the prompt."""
from __future__ import annotations

from clbench.agents.llm.memory.base import EpisodeLog, newest_within, prompt_counter


class InContextMemory(EpisodeLog):
    """All earlier transcripts as conversation before the current instance; when they no longer
    fit in the model's context window the oldest instances are dropped first, whole."""

    name = "icl"
    description = "every earlier instance's transcript in the prompt; the oldest dropped first at the context limit"
    bounded = False

    def history(self, budget: int) -> list[dict]:
        return newest_within(self.episodes, budget, prompt_counter(self.model))
