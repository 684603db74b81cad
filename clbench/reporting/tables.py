"""Report tables as data (title, headers, rows): clbench.summary's builders for the clbench
conventions plus the report-only tables (cost, upstream conventions, what changes); rendered to
markdown here and to HTML in html.py."""
from __future__ import annotations

import numpy as np

from clbench import summary as S
from clbench.reporting.model import RunReport
from clbench.summary import Table, fmt, fmt_est, to_markdown

__all__ = ["Table", "to_markdown", "markdown", "pm"]


def pm(e: dict | None, digits: int = 3) -> str:
    """mean +- standard error."""
    if not e or e.get("mean") is None:
        return "n/a"
    se = e.get("se")
    return f"{e['mean']:.{digits}f}" + (f" ± {se:.{digits}f}" if se is not None else "")


def _result(report: RunReport) -> dict:
    return {**report.clbench, "metadata": report.metadata}


def usage(report: RunReport) -> Table | None:
    rows = []
    for t in report.task_results():
        c = report.costs.get((t["task"], t["system"]))
        if c is None:
            continue
        tok = c.get("tokens_per_rollout") or {}
        rows.append([t["task"], report.display_name(t["system"]), fmt(c["per_rollout"], 4), fmt(c["stateless_pass"], 4),
                     *(f"{tok[k]:,.0f}" if k in tok else "n/a" for k in ("prompt", "completion", "cached", "reasoning"))])
    if not rows:
        return None
    return Table("Cost and tokens", ["task", "system", "USD per stateful rollout", "USD stateless pass",
                                     "prompt tok/rollout", "completion tok/rollout", "cached tok/rollout",
                                     "reasoning tok/rollout"], rows)


def _match(row: dict) -> str:
    pub = row.get("published")
    if not pub:
        return ""
    got = (row["cumulative_reward"]["mean"], row["cumulative_reward"]["se"], row["cumulative_gain"]["mean"])
    want = (pub["cumulative_reward"], pub["se"], pub["cumulative_gain"])
    ok = all(g is not None and round(g, 3) == round(w, 3) for g, w in zip(got, want))
    return f"{pub['cumulative_reward']:.3f} ± {pub['se']:.3f} / {pub['cumulative_gain']:.3f} " + ("(match)" if ok else "(DIFFERS)")


def upstream_tasks(report: RunReport) -> Table:
    rows = []
    for r in report.upstream["tasks"]:
        rows.append([r["task"], report.display_name(r["system"]), S.reward_unit(r["task"], report.metadata),
                     str(r["rollouts"] or "-"), str(r["instances"]),
                     pm(r["cumulative_reward"]), fmt(r["baseline_sum"]), pm(r["cumulative_gain"]), fmt(r["top"]),
                     fmt(r["r_external"]), pm(r["normalized_reward"]), pm(r["normalized_gain"]), _match(r)])
    return Table("Per task (upstream conventions)",
                 ["task", "system", "reward unit", "K", "N", "cumulative reward ± SE (unit)", "baseline sum (unit)",
                  "cumulative gain ± SE (unit)", "N·r_max (unit)", "external ref (unit)", "normalized reward (fraction)",
                  "normalized gain (fraction)", "published (reward ± SE / gain)"],
                 rows, "Per-rollout sums of the upstream instance rewards; ± = standard error stdev/sqrt(K) over "
                       "rollouts. Rows without K come from a manifest headline (no per-instance artifact).")


def upstream_aggregate(report: RunReport) -> Table:
    rows = []
    for s, a in sorted(report.upstream["aggregate"].items()):
        pub = a.get("published")
        rows.append([report.display_name(s), str(len(a["tasks"])), f"{100 * a['normalized_reward']:.1f}",
                     f"{100 * a['normalized_gain']:.1f}",
                     f"{100 * pub['normalized_reward']:.1f} / {100 * pub['normalized_gain']:.1f}" if pub else ""])
    return Table("Suite aggregate (upstream conventions)",
                 ["system", "tasks", "normalized reward (%)", "normalized gain (%)", "published (paper Table 1, %)"], rows)


def _curve_gap(report: RunReport, t: dict) -> float | None:
    pos = report.position_paired.get((t["task"], t["system"]))
    if pos is None:
        return None
    return float(np.max(np.abs(np.asarray(t["curves"]["cumulative_gain"]["mean"]) - np.asarray(pos))))


def _scoring(report: RunReport, task: str, system: str) -> str:
    sources = {r.get("reward_source") for r in report.records if r["task"] == task and r["system"] == system}
    return "signed bits (upstream: clamped skill score)" if "signed_bits" in sources else "same"


def changes(report: RunReport) -> Table:
    """Upstream vs clbench conventions on the same records."""
    up = {(r["task"], r["system"]): r for r in report.upstream["tasks"]}
    rows = []
    for t in report.task_results():
        u = up.get((t["task"], t["system"]), {})
        gap = _curve_gap(report, t)
        rows.append([t["task"], report.display_name(t["system"]), pm(u.get("normalized_reward")),
                     fmt_est(t["normalized_reward"]),
                     pm(u.get("normalized_gain")), fmt_est(t["normalized_gain"]), fmt(t["plasticity"]["mean"]),
                     fmt(t["stability"]["mean"]), fmt(gap), _scoring(report, t["task"], t["system"])])
    return Table("What changes under clbench's conventions",
                 ["task", "system", "norm. reward (upstream ± SE)", "norm. reward (clbench [95% CI])",
                  "norm. gain (upstream ± SE)", "norm. gain (clbench [95% CI])", "plasticity (fraction)",
                  "stability (fraction)", "max gap of gain curves (reward unit)", "instance scoring"], rows,
                 "Gap: largest difference between the mean cumulative gain curve paired by instance id and the "
                 "one paired by position (upstream's curves); final values agree, since sums do not depend on "
                 "pairing. Cohort scores are recomputed in signed bits from the outcome metadata.")


def report_tables(report: RunReport, plots: list | None = None) -> tuple[list[Table], list[str]]:
    """Every table of the report, headline first, and the free text after them."""
    tables, lines = [], []
    if "clbench" in report.conventions:
        result = _result(report)
        tables += S.summary_tables(result) + [tb for tb in (usage(report),) if tb is not None] + S.task_tables(result)
        lines += [*filter(None, map(S.usage_line, result["tasks"])), S.HOW_TO_READ]
    if "upstream" in report.conventions:
        tables += [upstream_tasks(report), upstream_aggregate(report)]
    if len(report.conventions) == 2:
        tables.append(changes(report))
    if plots:
        lines.append("Plots:\n" + "\n".join(f"- {p}" for p in plots))
    return tables, lines


def markdown(report: RunReport, plots: list | None = None) -> str:
    tables, lines = report_tables(report, plots)
    return "\n\n".join([*(to_markdown(tb) for tb in tables), *lines]) + "\n"
