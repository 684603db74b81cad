"""The 40 questions, answer parsing and grading.

The canonical world asks the questions of tasks/dbexplore/questions.yaml. Every other world asks
the same kinds of question (`world_questions`): each canonical question moved to the group that
plays its group's role in that world, with its brand, category, attribute, price threshold and
dates drawn anew. Answers are never stored: `Question.answer` compiles the question
(`logical.compile_sql`) against the world's true group map and runs it on a connection the agent
does not use. Grading: integers exact, floats within max(tolerance, 0.1% relative), text case-
and space-insensitive.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache

import numpy as np

from clbench.env import load_task_spec
from clbench.envs.dbexplore.logical import MONTHS, LogicalQuery, compile_sql, parse_question

ANSWER_TYPES = ("int", "float", "text")
REL_TOL = 0.001  # 0.1%: tight enough that no question accepts another question's answer


@dataclass(frozen=True)
class Question:
    qid: str
    release: int
    text: str
    answer_type: str
    tolerance: float

    @property
    def logical(self) -> LogicalQuery:
        return parse_question(self.text)

    def sql(self, maps: dict) -> str:
        """The SQL computing the true answer, given the true group maps of the question's release."""
        q = self.logical
        return compile_sql(q, maps[q.group])

    def describe_type(self) -> str:
        if self.answer_type == "int":
            return "int (exact)"
        if self.answer_type == "float":
            return f"float (graded within max({self.tolerance:g}, 0.1% relative))"
        return "text (case- and space-insensitive)"

    def answer(self, con, maps: dict):
        """The true answer, computed on `con` (never the agent's connection) from the true group maps."""
        rows = con.execute(self.sql(maps)).fetchall()
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
def load_questions() -> dict[str, Question]:
    """{question id: Question} of the canonical world (the packaged questions.yaml)."""
    data = load_task_spec("dbexplore", "questions")
    questions = {}
    for q in data["questions"]:
        if q["answer_type"] not in ANSWER_TYPES:
            raise ValueError(f"{q['id']}: answer_type must be one of {ANSWER_TYPES}")
        questions[q["id"]] = Question(q["id"], int(q["release"]), " ".join(q["text"].split()), q["answer_type"],
                                      float(q.get("tolerance", 0.0)))
    for q in questions.values():
        q.logical  # noqa: B018 - every question must be in the question language
    return questions


_PHRASE = re.compile(r"\b(office products|electronics products|musical instruments products|electronics|"
                     r"musical instruments)\b")


def _median_price(cfg: dict) -> float:
    return float(np.median([v for top in cfg["taxonomy"].values() for v in top.values()]))


def _nice(x: float) -> str:
    """Two significant digits, as a person would write a price threshold."""
    return f"{float(f'{x:.2g}'):g}"


def _remap(q: Question, spec: dict, perm: dict, rng: np.random.Generator) -> str:
    """The text of canonical question `q` in a world whose groups play roles by `perm`."""
    names = {spec["groups"][g]["name"]: g for g in spec["groups"]}
    src = names[q.logical.group]
    dst = perm[src]
    cs, cd = spec["groups"][src], spec["groups"][dst]
    target = cd["name"]
    text = _PHRASE.sub(lambda m: (target if target.endswith("products") else target + " products")
                       if m.group(1).endswith("products") else target, q.text)
    text = text.replace("an office products product", "an office product").replace(
        "an musical instruments product", "a musical instruments product")
    if m := re.search(r"brand '([^']+)'", text):
        rank = cs["brands"].index(m.group(1))
        new = cd["brands"][int(np.clip(rank + rng.integers(-2, 3), 0, 9))]
        text = text.replace(m.group(0), f"brand '{new}'")
    if m := re.search(r"'([^']+)' category", text):
        tops = list(cd["taxonomy"])
        leaves = [leaf for top in cd["taxonomy"].values() for leaf in top]
        pool = tops if m.group(1) in cs["taxonomy"] else leaves
        text = text.replace(m.group(0), f"'{pool[int(rng.integers(len(pool)))]}' category")
    if m := re.search(r"attribute '([^']+)' set to '([^']+)'", text):
        keys = [k for k, a in cd["attributes"].items() if "only_top" not in a]
        key = keys[int(rng.integers(len(keys)))]
        values = cd["attributes"][key]["values"]
        text = text.replace(m.group(0), f"attribute '{key}' set to '{values[int(rng.integers(len(values)))]}'")
    ratio = _median_price(cd) / _median_price(cs)
    text = re.sub(r"\$(\d+(?:\.\d+)?)", lambda m: "$" + _nice(float(m.group(1)) * ratio), text)
    text = re.sub(r"\b(20\d\d)\b", lambda m: str(int(np.clip(int(m.group(1)) + rng.integers(-1, 2), 2008, 2018))), text)
    month = re.compile(r"\b(" + "|".join(MONTHS) + r")\b", re.IGNORECASE)
    return month.sub(lambda m: MONTHS[int(rng.integers(12))].capitalize(), text)


def world_questions(spec: dict, world: dict, rng: np.random.Generator) -> dict[str, Question]:
    """The canonical questions moved into `world` (same ids, kinds, answer types and releases)."""
    out = {}
    for qid, q in load_questions().items():
        out[qid] = Question(qid, q.release, _remap(q, spec, world["perm"], rng), q.answer_type, q.tolerance)
        out[qid].logical  # noqa: B018 - the drawn text stays in the question language
    return out


def question_facts(q: Question, maps: dict) -> list[tuple[str, str, list[str]]]:
    """(key, text, mentioned names) of the latent facts question `q` depends on, from the true maps."""
    lq = q.logical
    m = maps[lq.group]
    g = lq.group
    facts = [(f"{g}.tables", f"{g}: items in {m['items']}, reviews in {m['reviews']}", [m["items"], m["reviews"]])]
    if lq.entity == "reviews":
        facts.append((f"{g}.review_live", f"{g}: a review is not soft-deleted where {m['review_live']}", [m["reviews"]]))
    else:
        facts.append((f"{g}.item_live", f"{g}: an item is not soft-deleted where {m['item_live']}", [m["items"]]))
    if lq.needs_price:
        facts.append((f"{g}.price", f"{g}: the price in dollars is {m['price']}", [m["items"]]))
    if lq.needs_verified:
        facts.append((f"{g}.verified", f"{g}: a review is verified where {m['verified']}", [m["reviews"]]))
    if lq.needs_dates:
        facts.append((f"{g}.dates", f"{g}: review year {m['year']}, month {m['month']}", [m["reviews"]]))
    if lq.fiscal:
        facts.append((f"{g}.fiscal", f"{g}: the fiscal year starts in month {m['fiscal_start']} and is named by the "
                      f"calendar year it ends in (its intake report {m['intake']} lines up under it)",
                      [m["reviews"], m["intake"]]))
    if lq.needs_category:
        c = m["category"]
        where = c.get("table") or c.get("column")
        facts.append((f"{g}.category", f"{g}: categories in {where}", [where]))
    if lq.attribute is not None:
        facts.append((f"{g}.attributes", f"{g}: attributes in {m['attributes']['table']}", [m["attributes"]["table"]]))
    return facts

