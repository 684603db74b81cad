"""Recall questions and their truth, replayed from the order in which the sessions are played.

MemoryProbe plays one chronology in every rollout (see memoryprobe_env.Chronology), so the
questions of a session, drawn from a generator keyed by the question seed and the session's
position, are the same in every rollout and in the stateless pass.

After session p of a rollout the state of every key is the replay of all mentions of sessions
0..p in that order: a `set` replaces the value, an `add` increases a running total set earlier, a
`ref` makes the key follow another key (multi-hop: its answer is the other key's current value,
and both facts are needed).
Questions ask about keys set so far, weighted by structure (plain, version chain, confusable
pair, accumulator, multi-hop) within a source session drawn uniformly (so depths spread over the whole
history), at most `max_current` of them about the session just played.

Depth of a question = tokens of conversation between the oldest mention needed to answer it (the
last `set`, plus every later `add` of a running total) and the end of session p.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clbench.envs.memoryprobe.generator import Conversation, Mention
from clbench.envs.memoryprobe.vocabulary import QUESTIONS


@dataclass(frozen=True)
class Need:
    """A mention needed for an answer, at its place in the rollout."""

    position: int
    instance_id: str
    mention: Mention


@dataclass(frozen=True)
class Question:
    qid: str
    key: str
    text: str
    category: str
    structure: str  # plain | chain | confusable | accumulator | multi-hop
    kind: str  # explicit (every needed mention is a [FACT] line) | implicit
    answer: str
    depth: int
    age_sessions: int
    needs: tuple[Need, ...]
    #: values the key had before its current one (earlier sets; a running total's earlier totals)
    earlier: tuple[str, ...] = ()

    def outcome(self, correct: bool, verdict: str = "", error: str = "") -> dict:
        """What reports need about an answered question (no answer value: info reaches agents).
        verdict: right | wrong | abstained; error (wrong answers): superseded | other-key | unstated."""
        return {"qid": self.qid, "key": self.key, "category": self.category, "structure": self.structure,
                "kind": self.kind, "depth": self.depth, "age_sessions": self.age_sessions, "correct": bool(correct),
                "verdict": verdict or ("right" if correct else "wrong"), "error": error}

    def fact(self) -> dict:
        """The latent fact behind the question with its value and the mentions that state it."""
        return {"qid": self.qid, "question": self.text, "key": self.key, "value": self.answer,
                "category": self.category, "structure": self.structure, "kind": self.kind,
                "mentions": [{"instance_id": n.instance_id, "position": n.position, "op": n.mention.op,
                              "value": n.mention.value, "explicit": n.mention.explicit, "text": n.mention.text}
                             for n in self.needs]}


class _KeyState:
    def __init__(self, accumulator: bool = False):
        self.accumulator = accumulator
        self.sets: list[Need] = []
        self.adds: list[Need] = []  # adds since the last set
        self.history: list[str] = []  # every value the key has had, oldest first

    def apply(self, need: Need) -> None:
        if need.mention.op in ("set", "ref"):
            self.sets.append(need)
            self.adds = []
        elif self.sets:  # an increment before any total is known has nothing to add to
            self.adds.append(need)
        else:
            return
        self.history.append(self.value(self.accumulator))

    def value(self, accumulator: bool) -> str:
        last = self.sets[-1].mention.value
        if not accumulator:
            return last
        return str(int(last) + sum(int(n.mention.value) for n in self.adds))

    def needs(self) -> tuple[Need, ...]:
        return (self.sets[-1], *self.adds)


@dataclass(frozen=True)
class _Candidate:
    key: str
    structure: str
    needs: tuple[Need, ...]
    answer: str
    earlier: tuple[str, ...] = ()


def build_questions(conv: Conversation, order: list[str], qspec: dict) -> list[list[Question]]:
    """Questions asked after each position of a rollout that plays sessions in `order`."""
    sessions = {s.instance_id: s for s in conv.sessions}
    starts = np.cumsum([0] + [sessions[i].tokens for i in order])
    states: dict[str, _KeyState] = {}
    out: list[list[Question]] = []
    for p, iid in enumerate(order):
        for m in sessions[iid].mentions:
            states.setdefault(m.key, _KeyState(conv.keys[m.key].accumulator)).apply(Need(p, iid, m))
        present = {k for k, st in states.items() if st.sets}
        cands = []
        for key, st in states.items():
            if not st.sets:
                continue
            fk = conv.keys[key]
            if st.sets[-1].mention.op == "ref":  # multi-hop: the referred key's current value
                target = states[st.sets[-1].mention.value]
                answer = target.value(False)
                earlier = tuple(dict.fromkeys(v for v in target.history[:-1] if v != answer))
                cands.append(_Candidate(key, "multi-hop", (st.sets[-1], *target.needs()), answer, earlier))
                continue
            if fk.accumulator:
                structure = "accumulator"
            elif fk.twin_of in present or any(conv.keys[o].twin_of == key for o in present):
                structure = "confusable"
            else:
                structure = "chain" if len(st.sets) > 1 else "plain"
            answer = st.value(fk.accumulator)
            earlier = tuple(dict.fromkeys(v for v in st.history[:-1] if v != answer))
            cands.append(_Candidate(key, structure, st.needs(), answer, earlier))
        chosen = sorted((cands[i] for i in _pick(cands, p, qspec)), key=lambda c: c.key)
        out.append([_question(conv, c, p, j, starts) for j, c in enumerate(chosen)])
    return out


def _pick(cands: list[_Candidate], p: int, qspec: dict) -> list[int]:
    """Spread questions over depth: pick a source session uniformly, then a key in it by weight."""
    rng = np.random.default_rng([int(qspec["seed"]), 0, p])  # the 0 keeps v0's canonical-order questions
    n_q = min(int(qspec["per_session"]), len(cands))
    source = [min(n.position for n in c.needs) for c in cands]
    current = [any(n.position == p for n in c.needs) for c in cands]
    quota = max(int(qspec["max_current"]), n_q - (len(cands) - sum(current)))
    chosen: list[int] = []
    while len(chosen) < n_q:
        room = sum(current[j] for j in chosen) < quota
        open_ = [i for i in range(len(cands)) if i not in chosen and (room or not current[i])]
        pos = rng.choice(sorted({source[i] for i in open_}))
        group = [i for i in open_ if source[i] == pos]
        w = np.array([float(qspec["weights"][cands[i].structure]) for i in group])
        chosen.append(group[int(rng.choice(len(group), p=w / w.sum()))])
    return chosen


def _question(conv: Conversation, c: _Candidate, p: int, j: int, starts) -> Question:
    fk = conv.keys[c.key]
    oldest = min(c.needs, key=lambda n: starts[n.position] + n.mention.offset)
    form = "accumulator" if fk.accumulator else fk.category
    return Question(
        qid=f"q{p + 1:02d}-{j + 1}", key=c.key, text=QUESTIONS[form].format(key=c.key), category=fk.category,
        structure=c.structure, kind="explicit" if all(n.mention.explicit for n in c.needs) else "implicit",
        answer=c.answer, depth=int(starts[p + 1] - starts[oldest.position] - oldest.mention.offset),
        age_sessions=p - oldest.position, needs=c.needs, earlier=c.earlier)
