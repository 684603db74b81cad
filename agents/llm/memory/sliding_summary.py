"""`sliding-summary`: a running summary of older instances plus the newest ones verbatim."""
from __future__ import annotations

from clbench.agents.llm.memory.base import Episode, EpisodeLog, keep_share, newest_within
from clbench.llm import messages_tokens

INSTRUCTIONS = (
    "Older parts of your conversation are being folded into a running summary to save space. Merge the "
    "current summary and the transcripts below into one new summary of what matters for later instances: "
    "recurring structure, facts learned, what worked and what failed, with concrete values. Reply with the "
    "new summary only, at most {chars} characters."
)


class SlidingSummaryMemory(EpisodeLog):
    """The newest instances stay verbatim while they fit in `window_tokens`; when an instance
    pushes older ones out, the model folds them into a running summary (at most
    `summary_chars`), shown in the system prompt. Footprint: window + summary, flat."""

    name = "sliding-summary"
    description = ("newest instances verbatim within a token window; older ones folded into a running summary "
                   "by the model")

    def __init__(self, model, window_tokens: int = 3000, summary_chars: int = 3000, **options):
        super().__init__(model, **options)
        if window_tokens < 1 or summary_chars < 1:
            raise ValueError("window_tokens and summary_chars must be >= 1")
        self.window_tokens = int(window_tokens)
        self.summary_chars = int(summary_chars)
        self.summary = ""

    def context(self, observation: str) -> str:
        return f"Summary of earlier instances:\n{self.summary}" if self.summary else ""

    def history(self, budget: int) -> list[dict]:
        return newest_within(self.episodes, min(budget, self.window_tokens))

    def update(self, episode: Episode) -> None:
        super().update(episode)
        folded = []
        while len(self.episodes) > 1 and sum(messages_tokens(e.messages()) for e in self.episodes) > self.window_tokens:
            folded.append(self.episodes.pop(0))
        self._fold(folded)

    def compact(self) -> None:
        """Fold every verbatim instance into the summary now."""
        folded, self.episodes = self.episodes, []
        self._fold(folded)

    def forget(self, fraction, rng) -> None:
        super().forget(fraction, rng)
        self.summary = "\n".join(keep_share(self.summary.splitlines(), fraction, rng))

    def _fold(self, folded: list[Episode]) -> None:
        if not folded:
            return
        material = (f"Current summary:\n{self.summary or '(empty)'}\n\nTranscripts to fold in:\n\n"
                    + "\n\n".join(e.text(self.episode_chars) for e in folded))
        new = self.model.ask("sliding-summary", INSTRUCTIONS.format(chars=self.summary_chars), material)
        if new:  # on a failed call the old summary stays (the fault is counted by the agent)
            self.summary = new.strip()[: self.summary_chars]

    def state_dict(self) -> dict:
        return {**super().state_dict(), "summary": self.summary}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.summary = state["summary"]
