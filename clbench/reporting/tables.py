"""Report tables as data (title, headers, rows), rendered to markdown here and to HTML in html.py."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clbench.reporting.model import RunReport
from clbench.summary import HEADLINE, fmt, fmt_est, headline_rows, markdown_table, variant_rows


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    note: str = ""


def to_markdown(table: Table) -> str:
    parts = [f"### {table.title}", "", markdown_table(table.headers, table.rows)]
    if table.note:
        parts += ["", table.note]
    return "\n".join(parts)


def pm(e: dict | None, digits: int = 3) -> str:
    """mean +- standard error."""
    if not e or e.get("mean") is None:
        return "n/a"
    se = e.get("se")
    return f"{e['mean']:.{digits}f}" + (f" ± {se:.{digits}f}" if se is not None else "")


def headline(report: RunReport) -> Table:
    return Table("Headline metrics (clbench conventions)", HEADLINE, headline_rows(report.task_results()),
                 "Gains paired by instance id; [95% CI] = percentile bootstrap over rollouts.")


def variants(report: RunReport) -> list[Table]:
    return [Table(f"Per variant, {t['task']} / {t['system']}",
                  ["variant", "start", "instances", "stateful", "stateless", "gain"], variant_rows(t))
            for t in report.task_results()]


def shocks(t: dict) -> Table | None:
    if not t.get("shocks"):
        return None
    rows = [[str(e["position"]), ",".join(e["events"]), fmt(e["reward_before"]), fmt(e["reward_after"]),
             "never" if e["recovery_instances"] is None else str(e["recovery_instances"])] for e in t["shocks"]]
    return Table(f"Lifecycle shocks, {t['task']} / {t['system']}",
                 ["position", "events", "reward before", "reward after", "instances to recover"], rows)


def split(report: RunReport) -> Table:
    rows = [[t["task"], t["system"], fmt_est(t["normalized_gain"]), fmt_est(t["plasticity"]),
             fmt_est(t["stability"]), f"{t['split_window']:.2f}"] for t in report.task_results()]
    return Table("Stability/plasticity split of normalized gain",
                 ["task", "system", "normalized gain [95% CI]", "plasticity [95% CI]", "stability [95% CI]", "window"],
                 rows, "Plasticity: gain earned in the adaptation window after each variant boundary (first "
                       "`window` share of the variant's instances); stability: gain earned afterwards. "
                       "Both share normalized gain's denominator, so they add up to it.")


def aggregate(report: RunReport) -> Table | None:
    aggs = report.clbench["aggregate"]
    if not any(len(a["tasks"]) > 1 for a in aggs.values()):
        return None
    rows = [[report.display_name(s), str(len(a["tasks"])), fmt(a["normalized_reward"]), fmt(a["normalized_gain"]),
             fmt(a["plasticity"]), fmt(a["stability"])] for s, a in sorted(aggs.items())]
    return Table("Suite aggregate (clbench conventions)",
                 ["system", "tasks", "normalized reward", "normalized gain", "plasticity", "stability"], rows,
                 "Unweighted mean over the tasks present.")


def usage(report: RunReport) -> Table | None:
    rows = []
    for t in report.task_results():
        c = report.costs.get((t["task"], t["system"]))
        if c is None:
            continue
        tok = c.get("tokens_per_rollout") or {}
        rows.append([t["task"], t["system"], fmt(c["per_rollout"], 4), fmt(c["stateless_pass"], 4),
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
        rows.append([r["task"], report.display_name(r["system"]), str(r["rollouts"] or "-"), str(r["instances"]),
                     pm(r["cumulative_reward"]), fmt(r["baseline_sum"]), pm(r["cumulative_gain"]), fmt(r["top"]),
                     fmt(r["r_external"]), pm(r["normalized_reward"]), pm(r["normalized_gain"]), _match(r)])
    return Table("Per task (upstream conventions)",
                 ["task", "system", "K", "N", "cumulative reward ± SE", "baseline sum", "cumulative gain ± SE",
                  "N·r_max", "external ref", "normalized reward", "normalized gain", "published (reward ± SE / gain)"],
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
                 ["system", "tasks", "normalized reward %", "normalized gain %", "published (paper Table 1)"], rows)


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
        rows.append([t["task"], t["system"], pm(u.get("normalized_reward")), fmt_est(t["normalized_reward"]),
                     pm(u.get("normalized_gain")), fmt_est(t["normalized_gain"]), fmt(t["plasticity"]["mean"]),
                     fmt(t["stability"]["mean"]), fmt(gap), _scoring(report, t["task"], t["system"])])
    return Table("What changes under clbench's conventions",
                 ["task", "system", "norm. reward (upstream ± SE)", "norm. reward (clbench [95% CI])",
                  "norm. gain (upstream ± SE)", "norm. gain (clbench [95% CI])", "plasticity", "stability",
                  "max gap of gain curves", "instance scoring"], rows,
                 "Gap: largest difference between the mean cumulative gain curve paired by instance id and the "
                 "one paired by position (upstream's curves); final values agree, since sums do not depend on "
                 "pairing. Cohort scores are recomputed in signed bits from the outcome metadata.")


def markdown(report: RunReport, plots: list | None = None) -> str:
    """The report as markdown; with clbench conventions it starts with clbench.summary's tables."""
    from clbench.summary import metrics_markdown

    parts = []
    if "upstream" in report.conventions:
        parts += [to_markdown(upstream_tasks(report)), to_markdown(upstream_aggregate(report))]
    if "clbench" in report.conventions:
        if parts:
            parts.append("## clbench conventions\n")
        parts.append(metrics_markdown(report.clbench).rstrip("\n"))
        parts += [to_markdown(tb) for tb in (split(report), aggregate(report), usage(report)) if tb is not None]
    if len(report.conventions) == 2:
        parts.append(to_markdown(changes(report)))
    if plots:
        parts.append("Plots:\n" + "\n".join(f"- {p}" for p in plots))
    return "\n\n".join(parts) + "\n"
