"""Seeded generation of the MemoryProbe conversation: sessions of team chat with planted facts.

Every number comes from tasks/memoryprobe/default.yaml. Sessions are generated in canonical order,
one variant (pressure preset) after another. Per session the preset's dials decide how many facts
are stated (`fact_density`), how many of them in passing rather than as a `[FACT]` line
(`implicit_ratio`), how many update an earlier key (`update_rate`, at most `chain_depth` updates a
key), how many introduce a key that takes an earlier key's value (`multi_hop_rate`: a `ref`
mention, the answer is the other key's current value, so two facts are needed), how many
near-identical twins of earlier keys appear (`confusable_pairs` per variant) and how many running
totals receive increments (`accumulators`). Every rollout plays the sessions in this
order (memoryprobe_env.Chronology); the truth of every question is replayed from the sessions
played so far (see questions.py).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from clbench.envs.memoryprobe import vocabulary as V
from clbench.envs.memoryprobe.text import count_tokens

CATEGORIES = ("config", "decision", "measurement", "entity")


@dataclass(frozen=True)
class FactKey:
    key: str
    category: str
    base: str  # the service or project name the key is built on
    shape: tuple  # (value kind, params) for drawing values
    accumulator: bool = False
    twin_of: str | None = None
    ref_to: str | None = None  # a multi-hop key: its value is this key's current value


@dataclass(frozen=True)
class Mention:
    """One statement of a fact in a session: `set` a value, `add` to a running total, or `ref`:
    the key takes the value of the key named by `value` (and follows it)."""

    key: str
    op: str
    value: str
    explicit: bool
    offset: int  # tokens before the mention in its session's text
    text: str


@dataclass(frozen=True)
class Session:
    instance_id: str
    variant: str
    text: str
    tokens: int
    mentions: tuple[Mention, ...]


@dataclass(frozen=True)
class Conversation:
    keys: dict[str, FactKey]
    sessions: tuple[Session, ...]

    @property
    def total_tokens(self) -> int:
        return sum(s.tokens for s in self.sessions)


def _pick(rng: np.random.Generator, items):
    return items[int(rng.integers(len(items)))]


def draw_value(rng: np.random.Generator, shape: tuple, avoid: str | None = None) -> str:
    """A value of the key's domain, different from `avoid` (the current value, for updates)."""
    kind, params = shape
    for _ in range(50):
        if kind == "int":
            lo, hi, step = params
            value = str(lo + step * int(rng.integers((hi - lo) // step + 1)))
        elif kind == "int_unit":
            lo, hi, step, unit, _ = params
            value = f"{lo + step * int(rng.integers((hi - lo) // step + 1))}{unit}"
        elif kind == "decimal_unit":
            lo, hi, unit = params
            value = f"{rng.uniform(lo, hi):.1f}{unit}"
        elif kind == "choice":
            value = _pick(rng, params)
        elif kind == "person":
            value = f"{_pick(rng, V.FIRST_NAMES)} {_pick(rng, V.LAST_NAMES)}"
        else:
            raise ValueError(f"unknown value kind {kind!r}")
        if value != avoid:
            return value
    raise RuntimeError(f"could not draw a new value for shape {shape}")


class KeyFactory:
    """Draws fresh fact keys per category (no key twice) and twins of existing ones."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.keys: dict[str, FactKey] = {}
        services, projects = list(V.SERVICE_TWINS), list(V.PROJECT_TWINS)
        self.pools = {
            "config": [(f"{s} {p}", s, (k, a)) for s in services for p, k, a in V.CONFIG_PARAMS],
            "measurement": [(f"{m} of {s}", s, (k, a)) for s in services for m, k, a in V.MEASUREMENT_METRICS],
            "decision": [(f"{t} for {p}", p, ("choice", opts)) for p in projects for t, opts in V.DECISION_TOPICS],
            "entity": [(f"{r} for {p}", p, ("person", ())) for p in projects for r in V.ENTITY_ROLES],
            "accumulator": [(f"{q} for {p}", p, ("int", (lo, hi, 1)), inc)
                            for p in projects for q, (lo, hi), inc in V.ACCUMULATORS],
        }
        self.increments: dict[str, tuple[int, int]] = {}

    def _take(self, pool: str):
        items = self.pools[pool]
        while items:
            item = items.pop(int(self.rng.integers(len(items))))
            if item[0] not in self.keys and not self._is_twin_name(item[0]):
                return item
        raise RuntimeError(f"ran out of {pool} keys; lower the fact density")

    def _is_twin_name(self, key: str) -> bool:
        twins = set(V.SERVICE_TWINS.values()) | set(V.PROJECT_TWINS.values())
        return any(t in key for t in twins)

    def new(self, category: str) -> FactKey:
        key, base, shape = self._take(category)
        fk = FactKey(key, category, base, shape)
        self.keys[key] = fk
        return fk

    def new_ref(self, candidates: list[FactKey]) -> FactKey | None:
        """A fresh key of the same kind of value as one of `candidates`, referring to it."""
        options = [fk for fk in candidates if not fk.accumulator and fk.ref_to is None]
        while options:
            target = options.pop(int(self.rng.integers(len(options))))
            pool = [i for i, item in enumerate(self.pools[target.category])
                    if item[2] == target.shape and item[0] not in self.keys and not self._is_twin_name(item[0])]
            if pool:
                key, base, shape = self.pools[target.category].pop(pool[int(self.rng.integers(len(pool)))])
                fk = FactKey(key, target.category, base, shape, ref_to=target.key)
                self.keys[key] = fk
                return fk
        return None

    def new_accumulator(self) -> FactKey:
        key, base, shape, inc = self._take("accumulator")
        fk = FactKey(key, "measurement", base, shape, accumulator=True)
        self.keys[key] = fk
        self.increments[key] = inc
        return fk

    def twin(self, candidates: list[FactKey]) -> FactKey | None:
        """A near-identical key (twin service or project name) of one of `candidates`."""
        twins = {**V.SERVICE_TWINS, **V.PROJECT_TWINS}
        has_twin = {fk.twin_of for fk in self.keys.values() if fk.twin_of}
        options = [fk for fk in candidates if not fk.accumulator and fk.twin_of is None
                   and fk.key not in has_twin and fk.base in twins]
        if not options:
            return None
        orig = _pick(self.rng, options)
        key = orig.key.replace(orig.base, twins[orig.base], 1)
        fk = FactKey(key, orig.category, twins[orig.base], orig.shape, twin_of=orig.key)
        self.keys[key] = fk
        return fk


def _fill(template: str, rng: np.random.Generator) -> str:
    slots = {
        "person": f"{_pick(rng, V.FIRST_NAMES)}", "project": _pick(rng, list(V.PROJECT_TWINS)),
        "service": _pick(rng, list(V.SERVICE_TWINS)), "day": _pick(rng, V.DAYS), "time": _pick(rng, V.TIMES),
        "num": str(int(rng.integers(2, 60))), "pr": str(int(rng.integers(1000, 9999))),
        "city": _pick(rng, V.CITIES), "food": _pick(rng, V.FOODS),
    }
    return template.format(**slots)


def say_fact(rng: np.random.Generator, key: str, op: str, value: str, explicit: bool) -> tuple[str, str]:
    """(lead-in or "", the sentence that states the fact)."""
    if explicit:
        line = {"add": V.EXPLICIT_ADD, "ref": V.EXPLICIT_REF}.get(op, V.EXPLICIT_SET)
        return _pick(rng, V.EXPLICIT_LEADINS), line.format(key=key, value=value, target=value)
    template = _pick(rng, {"add": V.IMPLICIT_ADD, "ref": V.IMPLICIT_REF}.get(op, V.IMPLICIT_SET))
    slots = {"key": key, "value": value, "target": value, "person": _pick(rng, V.FIRST_NAMES),
             "day": _pick(rng, V.DAYS)}
    sentence = template.format(**slots)
    return "", sentence[0].upper() + sentence[1:]


def render_session(rng: np.random.Generator, facts: list[tuple[str, str, str, bool]], exchanges: int,
                   instance_id: str, variant: str) -> Session:
    """Team chat of `exchanges` user/assistant turns with the facts said inside user turns."""
    users = [_fill(t, rng) for t in rng.choice(V.USER_FILLER, size=exchanges, replace=False)]
    assistants = [_fill(t, rng) for t in rng.choice(V.ASSISTANT_FILLER, size=exchanges, replace=False)]
    turn_of = [int(rng.integers(exchanges)) for _ in facts]
    lines: list[str] = []
    placed: list[tuple[int, int, str]] = []  # (fact index, line index, sentence)
    for turn in range(exchanges):
        user, fact_lines, in_user, lead = [users[turn]], [], [], ""
        for i, (key, op, value, explicit) in enumerate(facts):
            if turn_of[i] != turn:
                continue
            said_lead, sentence = say_fact(rng, key, op, value, explicit)
            if explicit:
                lead = lead or said_lead
                fact_lines.append((i, sentence))
            else:
                user.insert(int(rng.integers(len(user) + 1)), sentence)
                in_user.append((i, sentence))
        if lead:  # one lead-in ends the user's turn, then the pasted [FACT] lines
            user.append(lead)
        lines.append("User: " + " ".join(user))
        placed += [(i, len(lines) - 1, sentence) for i, sentence in in_user]
        for i, sentence in fact_lines:
            lines.append(sentence)
            placed.append((i, len(lines) - 1, sentence))
        lines.append("Assistant: " + assistants[turn])
    starts = np.cumsum([0] + [count_tokens(line) for line in lines])
    mentions = []
    for i, li, sentence in placed:
        key, op, value, explicit = facts[i]
        offset = int(starts[li]) + count_tokens(lines[li][:lines[li].index(sentence)])
        mentions.append(Mention(key, op, value, explicit, offset, sentence))
    text = "\n".join(lines)
    return Session(instance_id, variant, text, count_tokens(text), tuple(sorted(mentions, key=lambda m: m.offset)))


def generate(spec: dict, schedule: str) -> Conversation:
    """The conversation of `schedule` (a list of variants with a preset and a session count)."""
    rng = np.random.default_rng([int(spec["seed"]), zlib.crc32(schedule.encode())])
    presets, mix = spec["presets"], spec["category_mix"]
    cats = list(CATEGORIES)
    probs = np.array([mix[c] for c in cats], dtype=float)
    probs /= probs.sum()
    factory = KeyFactory(rng)
    current: dict[str, str] = {}  # canonical-order value, so updates really change the value
    updates: dict[str, int] = {}
    accumulators: list[FactKey] = []
    sessions: list[Session] = []
    for variant in spec["schedules"][schedule]:
        dials = presets[variant["preset"]]
        n = int(variant["sessions"])
        twin_sessions = set(rng.choice(n, size=min(n, int(dials["confusable_pairs"])), replace=False).tolist())
        acc_intro = int(rng.integers(max(1, n // 2)))  # new running totals start early in the variant
        for s in range(n):
            facts: list[tuple[str, str, str, bool]] = []
            earlier = [factory.keys[k] for k in current]
            for _ in range(int(dials["accumulators"]) if s == acc_intro else 0):
                fk = factory.new_accumulator()
                facts.append((fk.key, "set", draw_value(rng, fk.shape), False))
                current[fk.key] = facts[-1][2]
                accumulators.append(fk)
            started_now = {f[0] for f in facts}
            for fk in accumulators:
                if fk.key not in started_now and rng.random() < dials["accumulator_step"]:
                    lo, hi = factory.increments[fk.key]
                    delta = int(rng.integers(lo, hi + 1))
                    facts.append((fk.key, "add", str(delta), False))
                    current[fk.key] = str(int(current[fk.key]) + delta)
            n_facts = max(1, int(dials["fact_density"]) + int(rng.integers(-1, 2)))
            for slot in range(n_facts):
                fk = None
                if slot == 0 and s in twin_sessions:
                    fk = factory.twin(earlier)
                updatable = [k for k in earlier if not k.accumulator and k.ref_to is None
                             and updates.get(k.key, 0) < int(dials["chain_depth"])
                             and k.key not in {f[0] for f in facts}]
                if fk is None and earlier and rng.random() < dials.get("multi_hop_rate", 0.0):
                    ref = factory.new_ref([k for k in earlier if k.key not in {f[0] for f in facts}])
                    if ref is not None:
                        facts.append((ref.key, "ref", ref.ref_to, False))
                        current[ref.key] = current[ref.ref_to]
                        continue
                if fk is None and updatable and rng.random() < dials["update_rate"]:
                    fk = _pick(rng, updatable)
                    updates[fk.key] = updates.get(fk.key, 0) + 1
                elif fk is None:
                    fk = factory.new(cats[int(rng.choice(len(cats), p=probs))])
                value = draw_value(rng, fk.shape, avoid=current.get(fk.key))
                facts.append((fk.key, "set", value, False))
                current[fk.key] = value
            # explicit or implicit is decided per mention, after the content is fixed
            facts = [(k, op, v, bool(rng.random() >= dials["implicit_ratio"])) for k, op, v, _ in facts]
            order = rng.permutation(len(facts))
            facts = [facts[i] for i in order]
            iid = f"session-{len(sessions) + 1:02d}"
            sessions.append(render_session(rng, facts, int(dials["exchanges"]), iid, variant["name"]))
    return Conversation(dict(factory.keys), tuple(sessions))
