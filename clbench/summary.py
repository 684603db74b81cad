"""Plain-text and markdown tables of run metrics."""
from __future__ import annotations

import sys


def fmt(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def fmt_est(e: dict, digits: int = 3) -> str:
    if e.get("mean") is None:
        return "n/a"
    lo, hi = e["ci"]
    return f"{e['mean']:.{digits}f} [{fmt(lo, digits)}, {fmt(hi, digits)}]"


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


HEADLINE = ["task", "system", "K", "mean r stateful", "mean r stateless", "r_max", "cumulative reward",
            "cumulative gain", "normalized gain [95% CI]", "normalized reward [95% CI]", "plasticity", "stability"]


def headline_rows(task_results: list[dict]) -> list[list[str]]:
    rows = []
    for t in task_results:
        rows.append([
            t["task"], t["system"], str(t["rollouts"]), fmt(t["mean_reward"]["mean"]), fmt(t["mean_reward_stateless"]),
            fmt(t["r_max"]), fmt_est(t["cumulative_reward"], 2), fmt_est(t["cumulative_gain"], 2),
            fmt_est(t["normalized_gain"]), fmt_est(t["normalized_reward"]), fmt(t["plasticity"]["mean"]),
            fmt(t["stability"]["mean"]),
        ])
    return rows


def variant_rows(t: dict) -> list[list[str]]:
    return [[v["variant"], str(v["start"]), str(v["instances"]), fmt(v["mean_reward_stateful"]),
             fmt(v["mean_reward_stateless"]), fmt(v["mean_gain"]), fmt(v.get("window_gain"))] for v in t["per_variant"]]


def metrics_markdown(result: dict, variants: bool = True) -> str:
    parts = [markdown_table(HEADLINE, headline_rows(result["tasks"]))]
    for system, agg in sorted(result["aggregate"].items()):
        if len(agg["tasks"]) > 1:
            parts.append(f"\nSuite aggregate for {system} over {len(agg['tasks'])} tasks: normalized gain "
                         f"{fmt(agg['normalized_gain'])}, normalized reward {fmt(agg['normalized_reward'])}")
    if variants:
        for t in result["tasks"]:
            parts.append(f"\nPer variant, {t['task']} / {t['system']}:\n")
            parts.append(markdown_table(["variant", "start", "instances", "stateful", "stateless", "gain",
                                         "gain in adaptation window"],
                                        variant_rows(t)))
            if t.get("shocks"):
                parts.append("\nLifecycle shocks:\n")
                parts.append(markdown_table(
                    ["position", "events", f"reward before", "reward after", "instances to recover"],
                    [[str(e["position"]), ",".join(e["events"]), fmt(e["reward_before"]), fmt(e["reward_after"]),
                      "never" if e["recovery_instances"] is None else str(e["recovery_instances"])]
                     for e in t["shocks"]]))
            usage = t.get("usage") or {}
            if usage.get("tokens") or usage.get("cost") is not None:
                tok = usage.get("tokens") or {}
                parts.append(f"\nTokens: prompt {tok.get('prompt', 0)}, completion {tok.get('completion', 0)}, "
                             f"cached {tok.get('cached', 0)}; cost {fmt(usage.get('cost'), 4)} USD")
    return "\n".join(parts) + "\n"


def print_markdown(text: str) -> None:
    """Rich rendering on a terminal; the plain markdown when not a TTY or when CI is set."""
    from clbench.progress import plain_output

    if plain_output() or not sys.stdout.isatty():
        print(text)
        return
    from rich.console import Console
    from rich.markdown import Markdown

    Console().print(Markdown(text))
