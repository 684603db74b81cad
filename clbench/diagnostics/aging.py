"""An aging card per run, in the spirit of AgingBench's AgingCard, for a memory agent on MemoryProbe:

- checkpoints: recall accuracy m(t) per session t (the aging curve), m0, m_final and the decay
  slope (least squares, accuracy per session);
- fidelity over time per probe family: accuracy per variant (time block) for each kind of question
  (plain recall; revision = version chains; interference = confusable pairs; accumulator = running
  totals; multi-hop = a fact that needs another one);
- retention by the age of the fact (sessions between the oldest needed mention and the question)
  and the half-life: the age at which it falls below half of its value at age 0 (linear
  interpolation between ages; None when it never does within the ages observed);
- maintenance: for each shock ("flush@K", "recompact@K", "partial-reset:F@K"), accuracy in the
  `window` sessions before K, after K (shocked) and after K without the shock (control), the
  delta (shocked minus control after K) and the recovery: sessions from K until the shocked
  run is back within `tolerance` of the control and stays there for `window` sessions;
- the probe ladder (clbench.probes): P1 (as is), P2 (oracle-selected memory), P3 (gold facts),
  and the write / read / utilization shares of the error with 95% bootstrap CIs (sessions
  resampled, paired across rungs).

    from clbench.diagnostics.aging import aging_card, card_markdown
    card = aging_card("clbench/MemoryProbe-v2", "memory-bank")

Deterministic for the scripted strategies (clbench.diagnostics.play).
"""
from __future__ import annotations

import numpy as np

from clbench.diagnostics.play import play_rollout

FAMILIES = {"plain": "plain recall", "chain": "revision", "confusable": "interference",
            "accumulator": "accumulator", "multi-hop": "multi-hop"}


def _accuracy(session: dict) -> float | None:
    o = session["outcomes"]
    return sum(x["correct"] for x in o) / len(o) if o else None


def curve(sessions: list[dict]) -> list[float]:
    return [_accuracy(s) for s in sessions]


def decay(sessions: list[dict]) -> dict:
    m = np.array([x if x is not None else np.nan for x in curve(sessions)], dtype=float)
    ok = ~np.isnan(m)
    t = np.arange(len(m))
    slope = float(np.polyfit(t[ok], m[ok], 1)[0]) if ok.sum() > 1 else None
    return {"m0": float(m[ok][0]) if ok.any() else None, "m_final": float(m[ok][-1]) if ok.any() else None,
            "decay_slope": slope, "checkpoints": [[int(i), None if np.isnan(v) else round(float(v), 4)]
                                                  for i, v in zip(t, m)]}


def retention_by_age(sessions: list[dict]) -> dict[int, dict]:
    ages: dict[int, list[bool]] = {}
    for s in sessions:
        for o in s["outcomes"]:
            ages.setdefault(int(o["age_sessions"]), []).append(bool(o["correct"]))
    return {a: {"n": len(v), "accuracy": float(np.mean(v))} for a, v in sorted(ages.items())}


def half_life(by_age: dict[int, dict]) -> float | None:
    """Sessions of age at which retention first falls below half of its value at age 0."""
    if 0 not in by_age or by_age[0]["accuracy"] <= 0:
        return None
    half = by_age[0]["accuracy"] / 2
    ages = sorted(by_age)
    for a, b in zip(ages, ages[1:]):
        fa, fb = by_age[a]["accuracy"], by_age[b]["accuracy"]
        if fb < half <= fa:
            return float(a + (fa - half) / (fa - fb) * (b - a))
    return None


def fidelity_by_family(sessions: list[dict]) -> dict[str, dict[str, dict]]:
    """family -> variant (in play order) -> {n, accuracy}."""
    variants = list(dict.fromkeys(s["variant"] for s in sessions))
    out = {}
    for structure, family in FAMILIES.items():
        row = {}
        for v in variants:
            sel = [o["correct"] for s in sessions if s["variant"] == v for o in s["outcomes"]
                   if o["structure"] == structure]
            row[v] = {"n": len(sel), "accuracy": float(np.mean(sel)) if sel else None}
        out[family] = row
    return out


def maintenance(control: list[dict], shocked: list[dict], position: int, window: int = 4,
                tolerance: float = 0.05) -> dict:
    c, s = curve(control), curve(shocked)

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return float(np.mean(xs)) if xs else None

    before = mean(c[max(0, position - window):position])
    after, control_after = mean(s[position:position + window]), mean(c[position:position + window])
    def close(i):
        return s[i] is not None and c[i] is not None and s[i] >= c[i] - tolerance

    # the first session from which the shocked run stays within tolerance of the control for
    # `window` sessions (or to the end)
    recovery = next((j for j in range(len(s) - position)
                     if all(close(i) for i in range(position + j, min(len(s), position + j + window)))), None)
    return {"before": before, "after": after, "control_after": control_after,
            "delta": None if after is None or control_after is None else after - control_after,
            "recovery_sessions": recovery}


def ladder_shares(p1: list[float], p2: list[float], p3: list[float], r_max: float, n_boot: int = 2000,
                  seed: int = 0) -> dict:
    """P1/P2/P3 means and the write/read/utilization shares with 95% bootstrap CIs (paired sessions)."""
    from clbench.probes import ladder

    a, b, c = (np.asarray(x, dtype=float) for x in (p1, p2, p3))
    point = ladder(a.mean(), b.mean(), c.mean(), r_max)
    rng = np.random.default_rng(seed)
    boots = {k: [] for k in ("write", "read", "utilization")}
    for _ in range(n_boot):
        i = rng.integers(0, len(a), len(a))
        shares = ladder(a[i].mean(), b[i].mean(), c[i].mean(), r_max)["shares"]
        for k in boots:
            if shares[k] is not None:
                boots[k].append(shares[k])
    point["ci"] = {k: ([float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] if v else None)
                   for k, v in boots.items()}
    return point


def aging_card(env_id: str, agent: str, env_kwargs: dict | None = None, shocks: list[str] | None = None,
               window: int = 4, n_boot: int = 2000, agent_kwargs: dict | None = None) -> dict:
    from clbench.diagnostics.acc_measures import acc_measures
    from clbench.runner import make_env
    from clbench.shocks import parse_shock

    env = make_env(env_id, **(env_kwargs or {}))
    try:
        base = env.unwrapped
        n, r_max, budget = len(base.schedule), base.r_max, getattr(base, "budget_tokens", None)
        if shocks is None:  # one of each kind where the second variant starts
            k = next((p for v, p in base.schedule.variant_starts().items() if p > 0), n // 2)
            shocks = [f"flush@{k}", f"recompact@{k}", f"partial-reset:0.5@{k}"]
    finally:
        env.close()
    kw = {"agent_kwargs": agent_kwargs}
    p1 = play_rollout(env_id, agent, env_kwargs, **kw)
    p2 = play_rollout(env_id, agent, env_kwargs, probe="select", **kw)
    p3 = play_rollout(env_id, agent, env_kwargs, probe="gold", **kw)
    by_age = retention_by_age(p1)
    card = {
        "card_type": "clbench.AgingCard", "env_id": env_id, "agent": agent, "env_kwargs": env_kwargs or {},
        "sessions": n, "headline": {"metric_name": "recall_accuracy", **decay(p1), "half_life": half_life(by_age)},
        "retention_by_age": by_age, "fidelity_by_family": fidelity_by_family(p1),
        "maintenance": {spec: maintenance(p1, play_rollout(env_id, agent, env_kwargs, shocks=[spec], **kw),
                                          parse_shock(spec).position, window) for spec in shocks},
        "probe_ladder": ladder_shares([s["reward"] for s in p1], [s["reward"] for s in p2],
                                      [s["reward"] for s in p3], float(r_max if r_max is not None else 1.0),
                                      n_boot=n_boot),
        "acc": acc_measures(p1, budget),
    }
    return card


def _f(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def card_markdown(card: dict) -> str:
    h = card["headline"]
    lines = [f"## Aging card: {card['agent']} on {card['env_id']}", "",
             f"m0 {_f(h['m0'])} | m_final {_f(h['m_final'])} | decay slope {_f(h['decay_slope'], 4)} per session "
             f"| half-life (fact age) {_f(h['half_life'], 1)} sessions", ""]
    fam = card["fidelity_by_family"]
    variants = list(next(iter(fam.values())))
    lines += ["| probe family | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants)]
    for name, row in fam.items():
        lines.append(f"| {name} | " + " | ".join(f"{_f(row[v]['accuracy'])} (n={row[v]['n']})" for v in variants) + " |")
    lines += ["", "| shock | before | after | control after | delta | recovery (sessions) |", "|---|---|---|---|---|---|"]
    for spec, m in card["maintenance"].items():
        rec = "never" if m["recovery_sessions"] is None else str(m["recovery_sessions"])
        lines.append(f"| {spec} | {_f(m['before'])} | {_f(m['after'])} | {_f(m['control_after'])} "
                     f"| {_f(m['delta'])} | {rec} |")
    pl = card["probe_ladder"]
    lines += ["", "| P1 | P2 | P3 | write share | read share | utilization share |", "|---|---|---|---|---|---|"]

    def share(k):
        ci = pl["ci"][k]
        return f"{_f(pl['shares'][k])}" + (f" [{_f(ci[0])}, {_f(ci[1])}]" if ci else "")
    lines.append(f"| {_f(pl['P1'])} | {_f(pl['P2'])} | {_f(pl['P3'])} | {share('write')} | {share('read')} "
                 f"| {share('utilization')} |")
    return "\n".join(lines)
