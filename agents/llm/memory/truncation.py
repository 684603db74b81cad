"""`truncation`: the most recent conversation only, cut to a fixed token window."""
from __future__ import annotations

from clbench.agents.llm.memory.base import Episode, EpisodeLog, prompt_counter
from clbench.llm import messages_tokens


class TruncationMemory(EpisodeLog):
    """One continuous conversation across instances, truncated from the front: only the newest
    messages that fit in `window_tokens` stay (cut at message boundaries, so an instance can be
    kept in part). The context-decay study's simplest harness; the footprint stays flat."""

    name = "truncation"
    description = "the conversation across instances cut to a fixed token window; older messages dropped"

    def __init__(self, model, window_tokens: int = 4000, **options):
        super().__init__(model, **options)
        if window_tokens < 1:
            raise ValueError("window_tokens must be >= 1")
        self.window_tokens = int(window_tokens)

    def history(self, budget: int) -> list[dict]:
        msgs = [m for ep in self.episodes for m in ep.messages()]
        limit, used, start = min(budget, self.window_tokens), 0, len(msgs)
        count = prompt_counter(self.model)
        while start > 0 and used + count(msgs[start - 1:start]) <= limit:
            start -= 1
            used += count(msgs[start:start + 1])
        while start < len(msgs) and msgs[start]["role"] != "user":  # a conversation resumes with the user
            start += 1
        return msgs[start:]

    def update(self, episode: Episode) -> None:
        super().update(episode)
        # keep only episodes that can still reach the window
        sizes = [messages_tokens(e.messages()) for e in self.episodes]
        while len(sizes) > 1 and sum(sizes[1:]) >= self.window_tokens:
            sizes.pop(0)
            self.episodes.pop(0)
