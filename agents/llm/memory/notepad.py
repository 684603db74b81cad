"""`notepad`: notes the model rewrites after each instance, injected at the next one."""
from __future__ import annotations

from clbench.agents.llm.memory.base import Episode, Memory, keep_share

INSTRUCTIONS = (
    "You keep a notepad that is shown to you at the start of every later instance of this task. Rewrite it "
    "in full using the instance that just finished: keep what still holds, correct what was wrong, add what "
    "you learned (recurring structure, concrete values, what earned reward). Reply with the complete new "
    "notes only, at most {chars} characters."
)


class NotepadMemory(Memory):
    name = "notepad"
    description = "the model rewrites its notes after each instance; the notes are injected next time"

    def __init__(self, model, max_chars: int = 4000, **options):
        super().__init__(model, **options)
        if max_chars < 1:
            raise ValueError("max_chars must be >= 1")
        self.max_chars = int(max_chars)
        self.notes = ""

    def context(self, observation: str) -> str:
        return f"Your notes from earlier instances:\n{self.notes}" if self.notes else ""

    def update(self, episode: Episode) -> None:
        material = (f"Current notes:\n{self.notes or '(empty)'}\n\nThe instance that just finished:\n"
                    f"{episode.text(self.episode_chars)}")
        new = self.model.ask("notepad", INSTRUCTIONS.format(chars=self.max_chars), material)
        if new:
            self.notes = new.strip()[: self.max_chars]

    def forget(self, fraction, rng) -> None:
        self.notes = "\n".join(keep_share(self.notes.splitlines(), fraction, rng))

    def state_dict(self) -> dict:
        return {"notes": self.notes}

    def load_state_dict(self, state: dict) -> None:
        self.notes = state["notes"]
