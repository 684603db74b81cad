"""The shared shape of a terminal observation: the instance score, its parts, then the feedback.

Every env ends an instance with text an LLM can learn from (docs/contract.md, "Honest scores"): the
score as the reward field holds it, the parts it is computed from, and what a practitioner would
be told afterwards. What each env reveals, and why no more, is its docstring's "Feedback" section
and its spec card's `feedback` field.
"""
from __future__ import annotations

from collections.abc import Iterable


def format_score(reward: float) -> str:
    """The instance score as every terminal observation prints it."""
    return f"{float(reward):.4f}"


def score_report(reward: float, what: str, parts: Iterable[tuple[str, str]] = (),
                 feedback: Iterable[str] = ()) -> str:
    """`Instance score: S (what)`, one `- name: value` line per part, then the feedback lines."""
    lines = [f"Instance score: {format_score(reward)} ({what})"]
    lines += [f"- {name}: {value}" for name, value in parts]
    lines += list(feedback)
    return "\n".join(lines)
