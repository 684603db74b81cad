"""The measures of "ACC" (bounded memory control under long interactions) on MemoryProbe, computed
deterministically from what the env records for every answer (no judge needed: the env knows
what was said and when):

- hallucination rate: answers whose value was never stated anywhere in the conversation so far
  (`error == "unstated"`), over the answers given (abstentions excluded);
- drift rate: answers that give a value the key had earlier but no longer has (`superseded`: the
  current constraint contradicted by an outdated one), over the answers given;
- confusion rate: answers that give a value stated for another key (`other-key`);
- constraint retention over turns: of the questions about facts that were revised or that follow
  another fact (version chains, multi-hop), the share answered with the current value, per
  variant and by the age of the fact in sessions;
- memory footprint per turn: tokens the memory holds after each session (bounded or growing:
  the slope in tokens per session, the maximum against the budget) and its share of the prompt
  (memory in context / (memory in context + the session in view)); for model-backed agents, whose
  memory size the env cannot see, the prompt tokens of each turn's largest call (provider tokens).

Input: the per-session dicts of `clbench.diagnostics.play.play_rollout` (or result records, whose
`details.question_outcomes` carry the same outcomes; they have no footprint).
"""
from __future__ import annotations

import numpy as np

#: structures whose current value depends on a revision or on another fact
CONSTRAINTS = ("chain", "multi-hop")


def _outcomes(sessions: list[dict]) -> list[dict]:
    out = []
    for s in sessions:
        rows = s.get("outcomes") or (s.get("details") or {}).get("question_outcomes") or []
        out += [{**o, "position": s.get("position"), "variant": s.get("variant")} for o in rows]
    return out


def _rate(n: int, d: int) -> float | None:
    return n / d if d else None


def acc_measures(sessions: list[dict], budget: int | None = None) -> dict:
    rows = _outcomes(sessions)
    answered = [o for o in rows if o.get("verdict", "right" if o["correct"] else "wrong") != "abstained"]
    errors = [o.get("error") for o in answered if not o["correct"]]
    constraint = [o for o in rows if o["structure"] in CONSTRAINTS]
    by_variant = {}
    for o in constraint:
        by_variant.setdefault(o["variant"], []).append(o["correct"])
    by_age = {}
    for o in constraint:
        by_age.setdefault(int(o["age_sessions"]), []).append(o["correct"])
    result = {
        "questions": len(rows), "answered": len(answered),
        "abstention_rate": _rate(len(rows) - len(answered), len(rows)),
        "hallucination_rate": _rate(errors.count("unstated"), len(answered)),
        "drift_rate": _rate(errors.count("superseded"), len(answered)),
        "confusion_rate": _rate(errors.count("other-key"), len(answered)),
        "constraint_retention": _rate(sum(o["correct"] for o in constraint), len(constraint)),
        "constraint_questions": len(constraint),
        "constraint_retention_by_variant": {v: float(np.mean(c)) for v, c in by_variant.items()},
        "constraint_retention_by_age": {a: float(np.mean(c)) for a, c in sorted(by_age.items())},
    }
    memory = [s.get("memory_tokens") for s in sessions]
    if memory and all(m is not None for m in memory):
        t = np.arange(len(memory))
        slope = float(np.polyfit(t, memory, 1)[0]) if len(memory) > 1 else 0.0
        context = [s.get("context_tokens") if s.get("context_tokens") is not None else m
                   for s, m in zip(sessions, memory)]
        shares = [c / (c + (s.get("session_tokens") or 0)) if c + (s.get("session_tokens") or 0) else 0.0
                  for s, c in zip(sessions, context)]
        result["footprint"] = {
            "per_turn": [int(m) for m in memory], "max": int(max(memory)), "slope_per_turn": slope,
            "budget": budget, "bounded": None if budget is None else bool(max(memory) <= budget),
            "context_per_turn": [int(c) for c in context],
            "prompt_share_per_turn": [round(x, 4) for x in shares],
            "prompt_share_mean": float(np.mean(shares)),
        }
    prompts = [s.get("prompt_tokens") for s in sessions]
    if prompts and all(p is not None for p in prompts):
        slope = float(np.polyfit(np.arange(len(prompts)), prompts, 1)[0]) if len(prompts) > 1 else 0.0
        result["prompt_per_turn"] = {"per_turn": [int(p) for p in prompts], "max": int(max(prompts)),
                                     "slope_per_turn": slope}
    return result


def measures_table(results: dict[str, dict]) -> str:
    """One markdown row per system."""
    def f(x):
        return "n/a" if x is None else f"{x:.3f}"

    lines = ["| system | answered | hallucination rate | drift rate | confusion rate | constraint retention "
             "| footprint max (budget) | footprint slope / turn | memory share of prompt |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        fp = r.get("footprint") or {}
        if not fp and r.get("prompt_per_turn"):  # a model-backed agent: prompt tokens per turn instead
            fp = {**r["prompt_per_turn"], "budget": "prompt tokens"}
        lines.append(
            f"| {name} | {r['answered']}/{r['questions']} | {f(r['hallucination_rate'])} | {f(r['drift_rate'])} "
            f"| {f(r['confusion_rate'])} | {f(r['constraint_retention'])} ({r['constraint_questions']}) "
            f"| {fp.get('max', 'n/a')} ({fp.get('budget') or 'n/a'}) | {f(fp.get('slope_per_turn'))} "
            f"| {f(fp.get('prompt_share_mean'))} |")
    return "\n".join(lines)
