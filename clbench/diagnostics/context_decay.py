"""Context decay: the protocol of "Measuring Context Decay in Long-Running Agent Harnesses"
run with clbench's scripted memory strategies (agents/memoryprobe.py), no model calls.

Protocol (the paper's numbers, clbench's conversation text):
- a synthetic conversation of L turns (L in 50, 100, 200, 500, 1000; one turn = one user or
  assistant message of MemoryProbe's team chat), needles planted in 10% of the turns, half of
  them implicit (said in passing with one of MemoryProbe's sentence templates), half explicit
  (a `[FACT] key: value` line); every needle has its own key (no updates, no twins, no totals);
- the strategies read the conversation in sessions of `session_turns` turns under a memory
  budget of 15% of the conversation's tokens, and after the last turn every needle is asked once
  (a final observation with no conversation in view: only memory answers);
- 5 trials (conversation seeds) per length.

Metrics per run: retrieval accuracy (the needle's value answered, clbench's value match), by
needle type, by depth quartile (the needle's turn position: early 0-25% of the conversation ...
late 75-100%, as the paper bins), compression ratio = conversation tokens / context tokens and
information density = needles retrieved per 1,000 context tokens, where context tokens are the
memory tokens that enter the prompt to answer: the carried transcript (truncation), window plus
summary (sliding summary), the banks (memory banks), the entries read back from the files
(file-backed state; what sits on disk is reported apart as `stored_tokens`).

    from clbench.diagnostics.context_decay import run_sweep, summarize, markdown
    print(markdown(summarize(run_sweep())))

`clbench context-decay` prints the tables; docs/memory-diagnostics.md puts them next to the paper's.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clbench.envs.memoryprobe import vocabulary as V
from clbench.envs.memoryprobe.generator import CATEGORIES, KeyFactory, _fill, draw_value, say_fact
from clbench.envs.memoryprobe.text import count_tokens, values_match

LENGTHS = (50, 100, 200, 500, 1000)
NEEDLE_DENSITY = 0.10
IMPLICIT_RATIO = 0.50
BUDGET_FRACTION = 0.15
TRIALS = 5
SEED = 42
STRATEGIES = ("truncation", "sliding-summary", "memory-bank", "file-state")
QUARTILES = ("early (0-25%)", "mid-early (25-50%)", "mid-late (50-75%)", "late (75-100%)")
#: the paper's headline table (Context Decay Benchmark, section 4): mean RA, explicit, implicit,
#: compression, density, and accuracy by length 50/100/200/500/1000 and by depth bin
PAPER = {
    "file-state": {"name": "File-Backed Persistent State", "accuracy": 0.886, "explicit": 1.000, "implicit": 0.742,
                   "compression": 39.6, "density": 233.89, "by_length": [0.920, 0.880, 0.870, 0.892, 0.868],
                   "by_quartile": [0.850, 0.827, 0.812, 0.835]},
    "memory-bank": {"name": "Structured Memory Banks", "accuracy": 0.793, "explicit": 0.975, "implicit": 0.585,
                    "compression": 23.5, "density": 123.19, "by_length": [0.760, 0.780, 0.820, 0.824, 0.782],
                    "by_quartile": [0.791, 0.731, 0.772, 0.690]},
    "sliding-summary": {"name": "Sliding Window + Summary", "accuracy": 0.593, "explicit": 0.735, "implicit": 0.461,
                        "compression": 11.7, "density": 45.95, "by_length": [0.720, 0.500, 0.600, 0.600, 0.544],
                        "by_quartile": [0.542, 0.453, 0.520, 0.660]},
    "truncation": {"name": "Naive Truncation", "accuracy": 0.143, "explicit": 0.119, "implicit": 0.179,
                   "compression": 6.9, "density": 6.59, "by_length": [0.160, 0.120, 0.130, 0.176, 0.128],
                   "by_quartile": [0.000, 0.000, 0.000, 0.570]},
}


@dataclass(frozen=True)
class Needle:
    turn: int
    key: str
    value: str
    category: str
    implicit: bool


def conversation(length: int, seed: int) -> tuple[list[str], list[Needle]]:
    """`length` turns (alternating user and assistant messages; [FACT] lines follow their
    message) and the needles planted in them."""
    rng = np.random.default_rng([SEED, length, seed])
    factory = KeyFactory(rng)
    n_needles = max(1, int(length * NEEDLE_DENSITY))
    at = set(rng.choice(length, size=n_needles, replace=False).tolist())
    turns, needles = [], []
    for i in range(length):
        user = i % 2 == 0
        filler = _fill(str(rng.choice(V.USER_FILLER if user else V.ASSISTANT_FILLER)), rng)
        text = ("User: " if user else "Assistant: ") + filler
        if i in at:
            fk = factory.new(CATEGORIES[int(rng.integers(len(CATEGORIES)))])
            value = draw_value(rng, fk.shape)
            implicit = bool(rng.random() < IMPLICIT_RATIO)
            _, sentence = say_fact(rng, fk.key, "set", value, not implicit)
            text = f"{text} {sentence}" if implicit else f"{text}\n{sentence}"
            needles.append(Needle(i, fk.key, value, fk.category, implicit))
        turns.append(text)
    return turns, needles


class _Card:
    """The little of an agent card the scripted strategies read (their budget is passed)."""

    brief = ""


def _observation(n: int, text: str, questions: list[tuple[str, str]]) -> str:
    lines = [f"=== conversation: session {n} ===", text, f"=== end of session {n} ==="]
    lines += [f"Q{i + 1} [{qid}] {q}" for i, (qid, q) in enumerate(questions)]
    return "\n".join(lines)


def _context_tokens(agent) -> tuple[int, int]:
    """(tokens of memory in the prompt when answering, tokens the strategy stores)."""
    stored = agent.memory_tokens()
    return (agent.context_tokens if hasattr(agent, "context_tokens") else stored), stored


def run_one(strategy: str, length: int, trial: int, session_turns: int = 10) -> dict:
    """One strategy on one conversation: per-needle outcomes and the context measures."""
    from clbench.agent import load_object
    from clbench.envs.memoryprobe.memoryprobe_env import MemoryProbeEnv
    from clbench.envs.memoryprobe.vocabulary import QUESTIONS

    turns, needles = conversation(length, trial)
    total = sum(count_tokens(t) for t in turns)
    budget = int(BUDGET_FRACTION * total)
    agent = load_object(MemoryProbeEnv.agents[strategy])(_Card(), seed=trial, budget_tokens=budget)
    n = 0
    for start in range(0, length, session_turns):
        n += 1
        agent.act(_observation(n, "\n".join(turns[start:start + session_turns]), []), {"step": 0, "position": n})
    questions = [(f"n{i + 1}", QUESTIONS[x.category].format(key=x.key)) for i, x in enumerate(needles)]
    reply = agent.act(_observation(n + 1, "", questions), {"step": 0, "position": n + 1})
    answers = dict(line[len("ANSWER "):].split(": ", 1) for line in reply.splitlines() if ": " in line)
    context, stored = _context_tokens(agent)
    outcomes = [{"correct": values_match(x.value, answers.get(qid, "")), "implicit": x.implicit,
                 "quartile": min(3, int(4 * x.turn / length)), "category": x.category}
                for (qid, _), x in zip(questions, needles)]
    found = sum(o["correct"] for o in outcomes)
    return {"strategy": strategy, "length": length, "trial": trial, "total_tokens": total, "budget": budget,
            "context_tokens": context, "stored_tokens": stored, "needles": len(needles), "found": found,
            "accuracy": found / len(needles), "outcomes": outcomes,
            "compression": total / context if context else None,
            "density": 1000 * found / context if context else None}


def run_sweep(lengths=LENGTHS, trials: int = TRIALS, strategies=STRATEGIES, session_turns: int = 10) -> list[dict]:
    return [run_one(s, n, t, session_turns) for n in lengths for s in strategies for t in range(trials)]


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _acc(rows: list[dict], pick) -> float | None:
    """Mean over runs of the per-run accuracy of the outcomes `pick` selects (runs without any skipped)."""
    per_run = []
    for r in rows:
        sel = [o["correct"] for o in r["outcomes"] if pick(o)]
        if sel:
            per_run.append(sum(sel) / len(sel))
    return _mean(per_run)


def summarize(runs: list[dict]) -> dict[str, dict]:
    """Per strategy: the paper's table columns (means over runs, like the paper), by length and
    by depth quartile."""
    out = {}
    for s in dict.fromkeys(r["strategy"] for r in runs):
        rows = [r for r in runs if r["strategy"] == s]
        lengths = sorted({r["length"] for r in rows})
        out[s] = {
            "runs": len(rows),
            "accuracy": _mean(r["accuracy"] for r in rows),
            "std": float(np.std([r["accuracy"] for r in rows])),
            "explicit": _acc(rows, lambda o: not o["implicit"]),
            "implicit": _acc(rows, lambda o: o["implicit"]),
            "compression": _mean(r["compression"] for r in rows),
            "density": _mean(r["density"] for r in rows),
            "context_tokens": _mean(r["context_tokens"] for r in rows),
            "stored_tokens": _mean(r["stored_tokens"] for r in rows),
            "by_length": {n: _mean(r["accuracy"] for r in rows if r["length"] == n) for n in lengths},
            "by_quartile": [_acc(rows, lambda o, q=q: o["quartile"] == q) for q in range(4)],
        }
        out[s]["gap_pp"] = (None if out[s]["explicit"] is None or out[s]["implicit"] is None
                            else 100 * (out[s]["explicit"] - out[s]["implicit"]))
    return out


def _f(x, digits: int = 3, suffix: str = "") -> str:
    return "n/a" if x is None else f"{x:.{digits}f}{suffix}"


def markdown(summary: dict[str, dict], paper: bool = True) -> str:
    """The tables of docs/memory-diagnostics.md: clbench's numbers, with the paper's beside them."""
    def side(ours, theirs, digits=3, suffix=""):
        return f"{_f(ours, digits, suffix)} ({_f(theirs, digits, suffix)})" if paper else _f(ours, digits, suffix)

    lines = ["| strategy | retrieval accuracy | explicit | implicit | gap (pp) | compression | density / 1k ctx tokens |",
             "|---|---|---|---|---|---|---|"]
    for s, row in summary.items():
        p = PAPER.get(s, {})
        p_gap = 100 * (p["explicit"] - p["implicit"]) if p else None
        lines.append(f"| {s} | {side(row['accuracy'], p.get('accuracy'))} | {side(row['explicit'], p.get('explicit'))} "
                     f"| {side(row['implicit'], p.get('implicit'))} | {side(row['gap_pp'], p_gap, 1)} "
                     f"| {side(row['compression'], p.get('compression'), 1, 'x')} "
                     f"| {side(row['density'], p.get('density'), 2)} |")
    lines += ["", "| depth (turn position) | " + " | ".join(summary) + " |", "|---|" + "---|" * len(summary)]
    for q, name in enumerate(QUARTILES):
        lines.append(f"| {name} | " + " | ".join(
            side(row["by_quartile"][q], PAPER.get(s, {}).get("by_quartile", [None] * 4)[q])
            for s, row in summary.items()) + " |")
    lengths = sorted({n for row in summary.values() for n in row["by_length"]})
    lines += ["", "| length (turns) | " + " | ".join(summary) + " |", "|---|" + "---|" * len(summary)]
    for n in lengths:
        cells = []
        for s, row in summary.items():
            p = PAPER.get(s, {}).get("by_length")
            theirs = p[LENGTHS.index(n)] if p and n in LENGTHS else None
            cells.append(side(row["by_length"].get(n), theirs))
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    fs, tr = summary.get("file-state"), summary.get("truncation")
    if fs and tr and fs["density"] and tr["density"]:
        lines += ["", f"density ratio file-state / truncation: {fs['density'] / tr['density']:.1f}x"
                      + (" (paper: 35.5x)" if paper else "")]
    if paper:
        lines.append("(paper's value in parentheses)")
    return "\n".join(lines)
