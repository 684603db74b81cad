"""Scripted memory strategies for MemoryProbe-v2 (no model calls).

All four strategies read a session, answer its recall questions from what they carry plus the
session in view, then commit the session to memory. What they carry between sessions is held
to the same budget: 15% of the conversation's tokens (parsed from the brief). Extraction is
rule-based: `[FACT] key: value` lines are read exactly; facts said in passing go through a few
sentence patterns that miss some phrasings and cut some values short (fallible on purpose).
Questions are matched to stored keys exactly, else by string similarity, so a missing key can
be answered with its near-identical twin's value (the confusable-pair failure).

- `TruncationAgent`: keeps the raw transcript's last `budget` tokens; older sessions are gone.
- `SlidingSummaryAgent`: a raw window (half the budget) plus an extractive summary (the other
  half) of salient sentences that slid out of the window, oldest dropped first.
- `MemoryBankAgent`: four typed banks (config, decision, measurement, entity) of key = value
  entries, a quarter of the budget each, FIFO eviction; an update moves its entry to the back.
- `FileStateAgent`: facts written to one JSON file per category in the agent's own temporary
  directory (removed with the agent); answers read only the matching entries back into context.
- `MemoryProbeReference`: the file-state strategy with a complete reader, exact keys only.
- `MemoryProbeOracle`: knows every fact.

Every strategy supports the lifecycle shocks through `memory_event`: "flush" (drop everything),
"recompact" (force the strategy's compaction) and "partial-reset" (drop `fraction` of it), and
`state_dict` / `load_state_dict` for resumable runs, and `freeze_at=K`: from rollout position K on
it still answers from memory and the session in view but commits nothing more to memory.
"""
from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import tempfile
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clbench.agent import Agent
from clbench.envs.memoryprobe.text import count_tokens, normalize_key, values_match
from clbench.envs.memoryprobe.vocabulary import IMPLICIT_ADD, IMPLICIT_REF, IMPLICIT_SET, QUESTIONS

# ---------------------------------------------------------------- reading observations
_BUDGET = re.compile(r"Memory budget: (\d+) tokens")
_SESSION = re.compile(r"^=== conversation: session \d+ ===\n(.*?)\n=== end of session \d+ ===$",
                      re.DOTALL | re.MULTILINE)
_QUESTION = re.compile(r"^Q\d+ \[([A-Za-z0-9_-]+)\] (.*)$", re.MULTILINE)
_FORMS = [re.compile("^" + re.escape(t).replace(re.escape("{key}"), "(?P<key>.+)") + "$") for t in QUESTIONS.values()]


def parse_observation(observation: str) -> tuple[str, list[tuple[str, str]]]:
    """(the session's conversation text, [(qid, asked key)])."""
    m = _SESSION.search(observation)
    text = m.group(1) if m else ""
    questions = []
    for qid, question in _QUESTION.findall(observation):
        key = next((f.match(question).group("key") for f in _FORMS if f.match(question)), question)
        questions.append((qid, key))
    return text, questions


def reply(answers: dict[str, str | None], qids: list[str]) -> str:
    return "\n".join(f"ANSWER {q}: {answers.get(q) or 'unknown'}" for q in qids) or "ANSWER none: unknown"


# ---------------------------------------------------------------- rule-based extraction
@dataclass(frozen=True)
class Fact:
    key: str
    op: str  # set | add | ref (value: the key whose value this key takes)
    value: str


_EXPLICIT = re.compile(r"^\[FACT\]\s*(?P<key>[^:\n]+?)\s*:\s*(?P<add>\+)?(?P<value>[^\n]+?)\s*$")
_KEY = r"(?P<key>[\w][\w\- ]*?)"
_END = r"(?=[.!?](?:\s|$)|,|;|$)"
# The agent's own phrase patterns: they cover most, not all, ways of saying a fact in passing.
_IMPLICIT = [
    ("set", re.compile(rf"\bthe {_KEY} is now (?P<value>.+?){_END}", re.I)),
    ("set", re.compile(rf"\bset the {_KEY} to (?P<value>.+?)(?= after| on| for|{_END})", re.I)),
    ("set", re.compile(rf"\bthe {_KEY} was changed to (?P<value>\S+?)(?=[.!?](?:\s|$)|[,;\s]|$)", re.I)),
    ("set", re.compile(rf"\bthe {_KEY} should be (?P<value>.+?) from now on", re.I)),
    ("set", re.compile(rf"\bsettled on (?P<value>.+?) as the {_KEY}{_END}", re.I)),
    ("set", re.compile(rf"{_KEY} -> (?P<value>[^.]+)", re.I)),
    ("add", re.compile(rf"\badd another (?P<value>\d+) to the {_KEY}{_END}", re.I)),
    ("ref", re.compile(rf"^the {_KEY} is the same as the (?P<value>.+?)(?:, by the way)?{_END}", re.I)),
    ("add", re.compile(rf"\bthe {_KEY} (?:went up|grew) by (?P<value>\d+)", re.I)),
]
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+")
_SPEAKER = re.compile(r"^(?:User|Assistant):\s*")


def sentences(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        line = _SPEAKER.sub("", line.strip())
        out += [s for s in _SENTENCE_SPLIT.split(line) if s]
    return out


def _template_pattern(template: str) -> re.Pattern:
    """A sentence template of the public vocabulary as a regex capturing key and value."""
    slots = {"key": "(?P<key>.+?)", "value": "(?P<value>.+?)", "target": "(?P<value>.+?)", "person": r"\w+",
             "day": r"\w+"}
    parts = re.split(r"(\{\w+\})", template)
    body = "".join(slots[p[1:-1]] if p.startswith("{") else re.escape(p) for p in parts)
    return re.compile(f"^{body}$", re.I)


#: every way the conversation says a fact in passing (vocabulary.IMPLICIT_*), as regexes: the
#: complete reader of the reference agent
_TEMPLATES = ([("set", _template_pattern(t)) for t in IMPLICIT_SET] + [("add", _template_pattern(t)) for t in IMPLICIT_ADD]
              + [("ref", _template_pattern(t)) for t in IMPLICIT_REF])
_SAME_AS = re.compile(r"^same as (?:the )?(?P<target>.+)$", re.I)


def extract(text: str, complete: bool = False) -> list[Fact]:
    """Facts in `text`, in order: exact for [FACT] lines; the rest pattern-matched by the
    strategies' own fallible phrase patterns, or (`complete`) by every sentence template."""
    facts = []
    patterns = _TEMPLATES if complete else _IMPLICIT
    for sent in sentences(text):
        m = _EXPLICIT.match(sent)
        if m:
            same = _SAME_AS.match(m.group("value"))
            if same and not m.group("add"):
                facts.append(Fact(m.group("key"), "ref", same.group("target")))
            else:
                facts.append(Fact(m.group("key"), "add" if m.group("add") else "set", m.group("value")))
            continue
        for op, pat in patterns:
            m = pat.match(sent) if complete else pat.search(sent)
            if m:
                facts.append(Fact(m.group("key").strip(), op, m.group("value").strip()))
                break
    return facts


# ---------------------------------------------------------------- fact tables
def apply_fact(table: dict, fact: Fact, session: int) -> str | None:
    """Apply a set/add to `table` (normalised key -> entry); returns the key touched."""
    norm = normalize_key(fact.key)
    if not norm:
        return None
    if fact.op in ("set", "ref"):
        table.pop(norm, None)
        table[norm] = {"key": fact.key, "value": fact.value, "base": True, "session": session}
        if fact.op == "ref":  # answered by looking the other key up (see lookup)
            table[norm].update(value=f"same as the {fact.value}", ref=normalize_key(fact.value))
        return norm
    try:
        delta = int(fact.value)
    except ValueError:
        return None
    old = table.pop(norm, None)
    if old is not None and old["base"]:
        table[norm] = {**old, "value": str(int(old["value"]) + delta), "session": session}
    else:  # an increment without a known total: keep the partial sum, flagged
        partial = int(old["value"]) + delta if old else delta
        table[norm] = {"key": fact.key, "value": str(partial), "base": False, "session": session}
    return norm


def lookup(table: dict, key: str, threshold: float = 0.8, exact: bool = False, hops: int = 3) -> str | None:
    """The value of `key`: exact normalised match, else the most similar stored key. `exact`:
    only an exact match with a known base (no near-identical key, no partial running total). A key
    stored as taking another key's value is answered with that key's value (up to `hops` deep)."""
    norm = normalize_key(key)
    if exact:
        entry = table.get(norm)
        entry = entry if entry and entry["base"] else None
    elif norm in table:
        entry = table[norm]
    else:
        entry, score = None, threshold
        for k, candidate in table.items():
            s = difflib.SequenceMatcher(None, norm, k).ratio()
            if s > score:
                entry, score = candidate, s
    if entry is None:
        return None
    if entry.get("ref"):
        return lookup(table, entry["ref"], threshold, exact, hops - 1) if hops > 0 else None
    return entry["value"]


def resolve(facts: list[Fact], session: int = 0) -> dict:
    table: dict = {}
    for f in facts:
        apply_fact(table, f, session)
    return table


_ENTITY = re.compile(r"\b(owner|lead|manager|reviewer|contact|captain|steward)\b", re.I)
_MEASURE = re.compile(r"\b(latency|error rate|throughput|usage|utilisation|cold start|build time|coverage|used|"
                      r"closed|spend|fixed|done|delivered|logged)\b", re.I)
_DECISION = re.compile(r"\b(queue|database|framework|provider|cadence|style|platform|vendor|tool)\b", re.I)


def classify(key: str) -> str:
    """The typed bank a key belongs to, guessed from its words."""
    if _ENTITY.search(key):
        return "entity"
    if _MEASURE.search(key):
        return "measurement"
    if _DECISION.search(key):
        return "decision"
    return "config"


BANKS = ("config", "decision", "measurement", "entity")


# ---------------------------------------------------------------- the strategies
class MemoryStrategy(Agent):
    """Read a session, answer from memory + the session, commit the session to memory."""

    name = "memory-strategy"
    #: read facts said in passing with every sentence template (True) or the strategies' own
    #: fallible patterns (False)
    complete_reader = False
    #: answer only keys stored exactly, abstaining otherwise (True), or fall back to the most
    #: similar stored key, which can answer with a near-identical key's value (False)
    exact_keys = False

    def __init__(self, card, seed: int = 0, latent=None, budget_tokens: int | None = None,
                 freeze_at: int | None = None):
        super().__init__(card, seed=seed)
        #: from this rollout position on, sessions are no longer committed to memory (drift checks)
        self.freeze_at = freeze_at
        m = _BUDGET.search(card.brief)
        if budget_tokens is None and m is None:
            raise ValueError("no memory budget in the task brief; pass budget_tokens")
        self.budget = int(budget_tokens if budget_tokens is not None else m.group(1))
        self.rng = np.random.default_rng([seed, 4099])
        self.sessions = 0
        self._reply = ""

    def act(self, observation: str, info: dict) -> str:
        if info.get("step", 0) > 0 and self._reply:  # a retry: the same answers again
            return self._reply
        text, questions = parse_observation(observation)
        self.sessions += 1
        now = extract(text, self.complete_reader)
        answers = self.answer(self._probed(self.recall(now)), questions)
        self._reply = reply(answers, [q for q, _ in questions])
        if not self.frozen(info):
            self.commit(text, now)
        return self._reply

    def probe(self, mode: str, facts: list[dict]) -> None:
        """Probe ladder (clbench.probes) for the next answer only: `select` keeps, of the fact table
        the strategy recalls (its memory plus the session in view), the entries an oracle picks for
        the needed keys (P2: no interference from other entries); `gold` sets the needed facts on
        top (P3). Memory itself is not changed."""
        from clbench.probes import PROBE_MODES

        if mode not in PROBE_MODES:
            raise ValueError(f"probe mode must be one of {PROBE_MODES}, not {mode!r}")
        self._probe = (mode, list(facts))

    def _probed(self, table: dict) -> dict:
        probe, self._probe = getattr(self, "_probe", None), None
        if probe is None:
            return table
        mode, facts = probe
        if mode == "gold":
            table = dict(table)
            for f in facts:
                key, _, value = f["text"].partition(": ")
                apply_fact(table, Fact(key, "set", value), self.sessions)
            return table
        # the oracle picks, per needed fact, the entry under its key, or else an entry under a
        # similar key that holds its true value (what the strategy stored, but read back wrongly)
        keep = set()
        for f in facts:
            norm, value = normalize_key(f["key"]), f["text"].partition(": ")[2]
            names = [norm]
            if norm in table:
                keep.add(norm)
                if not table[norm].get("ref"):
                    continue
                names = [table[norm]["ref"]]  # a multi-hop entry: the entry of the key it follows
                keep.update(n for n in names if n in table)
            keep |= {k for k, e in table.items() if values_match(value, e["value"])
                     and max(difflib.SequenceMatcher(None, n, k).ratio() for n in names) > 0.6}
        return {k: e for k, e in table.items() if k in keep}

    def answer(self, table: dict, questions: list[tuple[str, str]]) -> dict[str, str | None]:
        return {qid: lookup(table, key, exact=self.exact_keys) for qid, key in questions}

    def recall(self, now: list[Fact]) -> dict:
        """The fact table in view: memory, then the current session's facts on top."""
        raise NotImplementedError

    def commit(self, text: str, now: list[Fact]) -> None:
        raise NotImplementedError

    def memory_event(self, event: str, **params) -> None:
        if event == "flush":
            self.flush()
        elif event == "recompact":
            self.recompact()
        elif event == "partial-reset":
            fraction = float(params.get("fraction", 0.5))
            if not 0.0 <= fraction <= 1.0:
                raise ValueError(f"partial-reset fraction must lie in [0, 1], got {fraction}")
            self.partial_reset(fraction)
        else:
            raise ValueError(f"unknown memory event {event!r}; known: flush, recompact, partial-reset")

    def _drop_mask(self, n: int, fraction: float) -> np.ndarray:
        """True for the items a partial reset drops: round(fraction * n) of n, chosen at random."""
        mask = np.zeros(n, dtype=bool)
        mask[self.rng.choice(n, size=int(round(fraction * n)), replace=False)] = True
        return mask

    def memory_tokens(self) -> int:
        """Tokens of what the strategy carries between sessions (files: what is on disk)."""
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError

    def recompact(self) -> None:
        raise NotImplementedError

    def partial_reset(self, fraction: float) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {"sessions": self.sessions, "rng": self.rng.bit_generator.state, "memory": self.memory_state()}

    def load_state_dict(self, state: dict) -> None:
        self.sessions = int(state["sessions"])
        self.rng.bit_generator.state = state["rng"]
        self.load_memory(state["memory"])

    def memory_state(self):
        raise NotImplementedError

    def load_memory(self, memory) -> None:
        raise NotImplementedError


def _keep_last(lines: list[str], budget: int) -> list[str]:
    """The longest suffix of `lines` within `budget` tokens."""
    total, start = 0, len(lines)
    while start > 0 and total + count_tokens(lines[start - 1]) <= budget:
        start -= 1
        total += count_tokens(lines[start])
    return lines[start:]


class TruncationAgent(MemoryStrategy):
    """Carries the last `budget` tokens of the raw transcript; recompaction halves it."""

    name = "truncation"

    def __init__(self, card, seed: int = 0, latent=None, budget_tokens: int | None = None,
                 freeze_at: int | None = None):
        super().__init__(card, seed=seed, budget_tokens=budget_tokens, freeze_at=freeze_at)
        self.lines: list[str] = []

    def recall(self, now):
        return resolve(extract("\n".join(self.lines), self.complete_reader) + now)

    def commit(self, text, now):
        self.lines = _keep_last(self.lines + text.splitlines(), self.budget)

    def memory_tokens(self):
        return sum(count_tokens(line) for line in self.lines)

    def flush(self):
        self.lines = []

    def recompact(self):
        self.lines = _keep_last(self.lines, self.budget // 2)

    def partial_reset(self, fraction):
        self.lines = self.lines[int(round(fraction * len(self.lines))):]  # the oldest part goes

    def memory_state(self):
        return {"lines": list(self.lines)}

    def load_memory(self, memory):
        self.lines = list(memory["lines"])


_SALIENT = re.compile(r"\[FACT\]|\d|->|(?<=\w )[A-Z][a-z]")


class SlidingSummaryAgent(MemoryStrategy):
    """A raw window of recent lines plus an extractive summary of what slid out, half the budget each."""

    name = "sliding-summary"

    def __init__(self, card, seed: int = 0, latent=None, budget_tokens: int | None = None,
                 freeze_at: int | None = None):
        super().__init__(card, seed=seed, budget_tokens=budget_tokens, freeze_at=freeze_at)
        self.window: list[str] = []
        self.summary: list[str] = []

    def recall(self, now):
        return resolve(extract("\n".join(self.summary + self.window), self.complete_reader) + now)

    def _summarize(self, lines: list[str]) -> None:
        # keep salient sentences (facts, numbers, names) verbatim; oldest summary lines go first
        self.summary += [s for s in sentences("\n".join(lines)) if _SALIENT.search(s)]
        self.summary = _keep_last(self.summary, self.budget - self.budget // 2)

    def commit(self, text, now):
        lines = self.window + text.splitlines()
        self.window = _keep_last(lines, self.budget // 2)
        self._summarize(lines[:len(lines) - len(self.window)])

    def memory_tokens(self):
        return sum(count_tokens(line) for line in self.window + self.summary)

    def flush(self):
        self.window, self.summary = [], []

    def recompact(self):
        lines, self.window = self.window, []
        self._summarize(lines)

    def partial_reset(self, fraction):
        self.summary = [s for s, drop in zip(self.summary, self._drop_mask(len(self.summary), fraction)) if not drop]
        self.window = self.window[int(round(fraction * len(self.window))):]

    def memory_state(self):
        return {"window": list(self.window), "summary": list(self.summary)}

    def load_memory(self, memory):
        self.window, self.summary = list(memory["window"]), list(memory["summary"])


def _entry_tokens(entry: dict) -> int:
    return count_tokens(f"[s{entry['session']}] {entry['key']} = {entry['value']}")


class MemoryBankAgent(MemoryStrategy):
    """Typed banks of key = value entries, a quarter of the budget each, first in first out."""

    name = "memory-bank"

    def __init__(self, card, seed: int = 0, latent=None, budget_tokens: int | None = None,
                 freeze_at: int | None = None):
        super().__init__(card, seed=seed, budget_tokens=budget_tokens, freeze_at=freeze_at)
        self.banks: dict[str, OrderedDict] = {b: OrderedDict() for b in BANKS}

    @property
    def capacity(self) -> int:
        return self.budget // len(BANKS)

    def recall(self, now):
        table: dict = {}
        for bank in self.banks.values():
            table.update(bank)
        for f in now:
            apply_fact(table, f, self.sessions)
        return table

    def _evict(self, capacity: int) -> None:
        for bank in self.banks.values():
            total = sum(_entry_tokens(e) for e in bank.values())
            while bank and total > capacity:
                _, entry = bank.popitem(last=False)
                total -= _entry_tokens(entry)

    def commit(self, text, now):
        for f in now:
            apply_fact(self.banks[classify(f.key)], f, self.sessions)
        self._evict(self.capacity)

    def memory_tokens(self):
        return sum(_entry_tokens(e) for bank in self.banks.values() for e in bank.values())

    def flush(self):
        self.banks = {b: OrderedDict() for b in BANKS}

    def recompact(self):
        self._evict(self.capacity // 2)

    def partial_reset(self, fraction):
        for name, bank in self.banks.items():
            mask = self._drop_mask(len(bank), fraction)
            self.banks[name] = OrderedDict((k, e) for (k, e), drop in zip(bank.items(), mask) if not drop)

    def memory_state(self):
        return {b: list(bank.items()) for b, bank in self.banks.items()}

    def load_memory(self, memory):
        self.banks = {b: OrderedDict((k, dict(e)) for k, e in memory.get(b, [])) for b in BANKS}


class FileStateAgent(MemoryStrategy):
    """Facts in JSON files (one per category) in the agent's own directory; only matches are read back."""

    name = "file-state"

    def __init__(self, card, seed: int = 0, latent=None, budget_tokens: int | None = None,
                 directory: str | None = None, freeze_at: int | None = None):
        super().__init__(card, seed=seed, budget_tokens=budget_tokens, freeze_at=freeze_at)
        if directory is None:
            directory = tempfile.mkdtemp(prefix="clbench-memoryprobe-")
            self._cleanup = weakref.finalize(self, shutil.rmtree, directory, True)
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        #: tokens of memory read back into context for the last answer (at most the budget)
        self.context_tokens = 0

    def _path(self, bank: str) -> Path:
        return self.dir / f"{bank}.json"

    def read(self, bank: str) -> dict:
        path = self._path(bank)
        return json.loads(path.read_text()) if path.exists() else {}

    def write(self, bank: str, table: dict) -> None:
        tmp = self._path(bank).with_suffix(".tmp")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
        os.replace(tmp, self._path(bank))

    def recall(self, now):
        # the files are searched like grep; only the entries answers use enter context (see answer)
        table: dict = {}
        for bank in BANKS:
            table.update(self.read(bank))
        for f in now:
            apply_fact(table, f, self.sessions)
        return table

    def answer(self, table, questions):
        answers = super().answer(table, questions)
        self.context_tokens = sum(count_tokens(f"{key} = {value}") for (_, key), value
                                  in zip(questions, answers.values()) if value is not None)
        return answers

    def commit(self, text, now):
        touched: dict[str, dict] = {}
        for f in now:
            bank = classify(f.key)
            table = touched.setdefault(bank, self.read(bank))
            apply_fact(table, f, self.sessions)
        for bank, table in touched.items():
            self.write(bank, table)

    def memory_tokens(self):
        return sum(_entry_tokens(e) for bank in BANKS for e in self.read(bank).values())

    def flush(self):
        for bank in BANKS:
            self._path(bank).unlink(missing_ok=True)

    def recompact(self):
        # files need no compaction to fit the budget: rewrite them canonically (lossless)
        for bank in BANKS:
            if self._path(bank).exists():
                self.write(bank, self.read(bank))

    def partial_reset(self, fraction):
        for bank in BANKS:
            table = self.read(bank)
            mask = self._drop_mask(len(table), fraction)
            self.write(bank, {k: e for (k, e), drop in zip(sorted(table.items()), mask) if not drop})

    def memory_state(self):
        return {bank: self.read(bank) for bank in BANKS if self._path(bank).exists()}

    def load_memory(self, memory):
        self.flush()
        for bank, table in memory.items():
            self.write(bank, table)


class MemoryProbeReference(FileStateAgent):
    """The reference agent: the file-state strategy with a reader of every phrasing the
    conversation uses (the public sentence templates) that answers exact keys only and abstains
    otherwise. Played stateless it answers exactly what the session in view states: the best a
    memoryless agent can do, since a guess loses in expectation (a wrong answer costs 1)."""

    name = "reference"
    complete_reader = True
    exact_keys = True


class MemoryProbeOracle(Agent):
    """Knows every fact: answers from the env's answer key."""

    name = "oracle"
    deterministic = True  # plays from its observations only: one stateless pass measures it
    privileged = True

    def act(self, observation: str, info: dict) -> str:
        answers = self.latent.answers(info["instance_id"])
        return reply(answers, list(answers))
