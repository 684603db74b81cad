"""The 40 questions (tasks/dbexplore/questions.yaml), answer parsing and grading.

Answers are never stored: `Question.answer` runs the canonical SQL on a connection the agent
does not use. Grading: integers exact, floats within max(tolerance, 0.1% relative), text case-
and space-insensitive.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache

from clbench.env import load_task_spec

ANSWER_TYPES = ("int", "float", "text")
REL_TOL = 0.001  # 0.1%: tight enough that no question accepts another question's answer


@dataclass(frozen=True)
class Question:
    qid: str
    release: int
    text: str
    answer_type: str
    tolerance: float
    sql: str
    facts: tuple[str, ...]

    def describe_type(self) -> str:
        if self.answer_type == "int":
            return "int (exact)"
        if self.answer_type == "float":
            return f"float (graded within max({self.tolerance:g}, 0.1% relative))"
        return "text (case- and space-insensitive)"

    def answer(self, con):
        """The true answer, computed from the canonical SQL on `con` (never the agent's connection)."""
        rows = con.execute(self.sql).fetchall()
        if len(rows) != 1 or len(rows[0]) != 1 or rows[0][0] is None:
            raise RuntimeError(f"question {self.qid}: canonical SQL must give one non-NULL value, got {rows[:3]}")
        value = rows[0][0]
        if self.answer_type == "int":
            return int(value)
        if self.answer_type == "float":
            return float(value)
        return str(value)

    def parse(self, raw) -> int | float | str:
        """The agent's answer as a value of the answer type; ValueError says what is wrong."""
        text = str(raw).strip().strip("`").strip()
        if self.answer_type == "text":
            text = " ".join(text.strip("'\"").split())
            if not text:
                raise ValueError("the answer is empty")
            return text
        number = text.replace(",", "").replace("$", "").strip("'\"")
        try:
            value = float(number)
        except ValueError:
            raise ValueError(f"expected a number ({self.answer_type}), got {text[:80]!r}") from None
        if not math.isfinite(value):
            raise ValueError("the answer must be a finite number")
        if self.answer_type == "int":
            if value != int(value):
                raise ValueError(f"expected an integer, got {text[:80]!r}")
            return int(value)
        return value

    def is_correct(self, given, truth) -> bool:
        if self.answer_type == "int":
            return int(given) == int(truth)
        if self.answer_type == "float":
            return abs(float(given) - float(truth)) <= max(self.tolerance, REL_TOL * abs(float(truth)))
        return _norm(str(given)) == _norm(str(truth))


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", text).casefold()


@cache
def load_questions() -> tuple[dict[str, Question], dict[str, str]]:
    """({question id: Question}, {fact id: description}) from the packaged questions.yaml."""
    data = load_task_spec("dbexplore", "questions")
    facts = dict(data["facts"])
    questions = {}
    for q in data["questions"]:
        if q["answer_type"] not in ANSWER_TYPES:
            raise ValueError(f"{q['id']}: answer_type must be one of {ANSWER_TYPES}")
        unknown = set(q["facts"]) - set(facts)
        if unknown:
            raise ValueError(f"{q['id']}: unknown facts {sorted(unknown)}")
        questions[q["id"]] = Question(q["id"], int(q["release"]), " ".join(q["text"].split()), q["answer_type"],
                                      float(q.get("tolerance", 0.0)), q["sql"], tuple(q["facts"]))
    return questions, facts
