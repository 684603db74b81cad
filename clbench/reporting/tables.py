"""Every table of a run, in one place: the tables as data (Table: title, headers, rows, note), their
builders and their markdown and rich-terminal renderers; clbench.reporting.html renders the same
Table objects to HTML. One builder list, three renderers, so every format shows the same tables,
columns, units and system names, with the headline first.

- metrics_tables(result): the clbench-conventions tables of clbench.metrics.compute's result (what
  `clbench rollout` prints and the run card holds);
- report_tables(report): those plus the report-only tables (cost, upstream conventions, what changes)
  of a clbench.reporting.model.RunReport (`clbench report`, markdown, terminal and HTML).

Cheap to import (no numpy, rich or matplotlib at module level): command-line listings use its
markdown helpers.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clbench.reporting.model import RunReport

__all__ = ["Table", "fmt", "fmt_est", "pm", "markdown_table", "to_markdown", "display_name", "reward_unit",
           "metrics_tables", "report_tables", "metrics_markdown", "markdown", "print_tables", "print_metrics"]

HOW_TO_READ = """\
How to read this. Per instance t, gain g_t = r_sf,t - r_sl,t, the stateful reward minus the
stateless reward of the same instance (paired by instance id; r_sl,t = mean over stateless passes).
normalized gain = (mean r_sf - mean r_sl) / (r_max - mean r_sl): the share of the headroom left by
stateless play that the agent closed by learning (0 = no learning, 1 = reaches the oracle); it is
undefined when mean r_sl >= r_max. normalized reward = (mean r_sf - r_reference) / (r_max -
r_reference): 0 = the stateless reference agent, 1 = the oracle. stability + plasticity =
normalized gain (the paper's split): the part earned on the first instance of each variant, and the
rest; early + late gain = normalized gain too: the part earned in the adaptation window (the first
quarter of each variant), and the rest.
Cumulative reward and gain are sums over the instances of one rollout, in the task's reward unit.
[a, b] = 95% confidence interval from a paired bootstrap that resamples instances (one draw for both
modes), rollouts and stateless passes; an agent that cannot learn gets an interval containing 0.
Poker's r_max is itself a noisy oracle score, so its normalized numbers carry r_max's uncertainty too."""


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    note: str = ""
    #: the task a per-task table (per variant, lifecycle shocks) belongs to; None for tables over all tasks
    task: str | None = None


def fmt(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def fmt_est(e: dict | None, digits: int = 3) -> str:
    """mean [95% CI]; 'undefined' (the reason goes in the table's note)."""
    if not e or e.get("mean") is None:
        return "undefined" if e and e.get("undefined") else "n/a"
    lo, hi = e["ci"]
    return f"{e['mean']:.{digits}f} [{fmt(lo, digits)}, {fmt(hi, digits)}]"


def pm(e: dict | None, digits: int = 3) -> str:
    """mean +- standard error."""
    if not e or e.get("mean") is None:
        return "n/a"
    se = e.get("se")
    return f"{e['mean']:.{digits}f}" + (f" ± {se:.{digits}f}" if se is not None else "")


def display_name(meta: dict | None, system: str) -> str:
    """The one name a system goes by in every table and plot."""
    return (((meta or {}).get("systems") or {}).get(system) or {}).get("display_name") or system


def reward_unit(task: str, meta: dict | None = None) -> str:
    """The task's reward unit: the run metadata's (clbench's envs declare `reward_unit`, the run
    records it), else the original CL-Bench's for an imported task (clbench.upstream), else "reward"."""
    params = ((meta or {}).get("tasks") or {}).get(task) or {}
    if params.get("reward_unit"):
        return params["reward_unit"]
    from clbench import upstream

    return upstream.unit_of(task) or "reward"


# ----------------------------------------------------------------------------- clbench conventions
def _undefined_notes(result: dict, names: tuple[str, ...]) -> str:
    notes = sorted({f"{t['task']} / {display_name(result.get('metadata'), t['system'])}: {t[n]['undefined']}"
                    for t in result["tasks"] for n in names if t[n].get("undefined")})
    return (" Undefined: " + "; ".join(notes) + ".") if notes else ""


def _error_notes(result: dict) -> str:
    """What the headline's numbers stand on besides the agent's answers: instances that ended in an agent
    error (scored 0) and instances scored on a faulty model reply (a refusal, a cut-off or empty reply, ...)."""
    notes = []
    for t in result["tasks"]:
        e = t.get("errors") or {}
        who = f"{t['task']} / {display_name(result.get('metadata'), t['system'])}"
        if e.get("agent"):
            notes.append(f"{who}: {e['agent']} instances ended in an agent error and score 0")
        faults = e.get("model_faults")
        if faults:
            kinds = ", ".join(f"{k} x{c}" for k, c in list(faults["kinds"].items())[:4])
            notes.append(f"{who}: {faults['instances']} instances were scored on faulty model replies ({kinds})")
    return (" Errors: " + "; ".join(notes) + " (see the records' error and model_faults).") if notes else ""


def headline_table(result: dict) -> Table:
    meta = result.get("metadata")
    rows = [[t["task"], display_name(meta, t["system"]), fmt_est(t["normalized_gain"]), fmt_est(t["normalized_reward"])]
            for t in result["tasks"]]
    return Table("Headline (clbench conventions)",
                 ["task", "system", "normalized gain [95% CI] (fraction)", "normalized reward [95% CI] (fraction)"],
                 rows, "Fractions of the headroom: 0 = stateless play (gain) or the stateless reference (reward), "
                       "1 = the oracle." + _undefined_notes(result, ("normalized_gain",)) + _error_notes(result))


def aggregate_table(result: dict) -> Table | None:
    aggs = result["aggregate"]
    if not any(len(a["tasks"]) > 1 for a in aggs.values()):
        return None
    meta = result.get("metadata")
    rows = [[display_name(meta, s), str(len(a["tasks"])), fmt_est(a["normalized_gain"]), fmt_est(a["normalized_reward"]),
             fmt_est(a["stability"]), fmt_est(a["plasticity"])] for s, a in sorted(aggs.items())]
    left = sorted({t for a in aggs.values() for t in a.get("left_out", [])})
    return Table("Suite aggregate (clbench conventions)",
                 ["system", "tasks", "normalized gain [95% CI] (fraction)", "normalized reward [95% CI] (fraction)",
                  "stability [95% CI] (fraction)", "plasticity [95% CI] (fraction)"], rows,
                 "Unweighted mean over the tasks every system here has; the interval combines the tasks' bootstrap "
                 "replicates." + (f" Left out (not shared by every system): {', '.join(left)}." if left else ""))


def _r_max(t: dict) -> str:
    e = t.get("r_max_estimate")
    return fmt_est(e) if e else fmt(t["r_max"])


def rewards_table(result: dict) -> Table:
    meta = result.get("metadata")
    rows = [[t["task"], display_name(meta, t["system"]), reward_unit(t["task"], meta), str(t["rollouts"]),
             str(t.get("stateless_passes", 1)), str(t["instances"]), fmt_est(t["mean_reward"]),
             fmt(t["mean_reward_stateless"]), _r_max(t), fmt(t["r_reference"])] for t in result["tasks"]]
    return Table("Mean reward per instance",
                 ["task", "system", "reward unit", "rollouts K", "stateless passes P", "instances N",
                  "stateful [95% CI] (unit)", "stateless (unit)", "r_max (unit)", "r_reference (unit)"], rows,
                 "r_max = the oracle's mean, r_reference = the stateless reference agent's mean (default schedule); "
                 "an interval on r_max means the oracle's score is itself noisy.")


def sums_table(result: dict) -> Table:
    meta = result.get("metadata")
    rows = [[t["task"], display_name(meta, t["system"]), reward_unit(t["task"], meta),
             fmt_est(t["cumulative_reward"], 2), fmt_est(t["cumulative_gain"], 2)] for t in result["tasks"]]
    return Table("Cumulative reward and gain per rollout",
                 ["task", "system", "reward unit", "cumulative reward [95% CI] (unit)", "cumulative gain [95% CI] (unit)"],
                 rows, "Sums over the instances of one rollout, mean over rollouts.")


def split_table(result: dict) -> Table:
    meta = result.get("metadata")
    rows = [[t["task"], display_name(meta, t["system"]), fmt_est(t["normalized_gain"]), fmt_est(t["stability"]),
             fmt_est(t["plasticity"]), fmt(t.get("boundary_share")), fmt_est(t["early_gain"]),
             fmt_est(t["late_gain"]), f"{t['split_window']:.2f}"] for t in result["tasks"]]
    return Table("Stability/plasticity split of normalized gain",
                 ["task", "system", "normalized gain [95% CI] (fraction)", "stability [95% CI] (fraction)",
                  "plasticity [95% CI] (fraction)", "f_B (share)", "early gain [95% CI] (fraction)",
                  "late gain [95% CI] (fraction)", "window (share of variant)"],
                 rows, "The paper's split (CL-Bench, Appendix C): stability = gain on the first instance of each "
                       "variant (B, a share f_B of the instances: only what was carried over can help there), "
                       "plasticity = gain on every other instance (after in-variant feedback). The adaptation "
                       "window split: early gain = gain in the first `window` share of each variant's instances, "
                       "late gain = the rest. Every term shares normalized gain's denominator, so each pair adds "
                       "up to it." + _undefined_notes(result, ("stability",)))


def variant_table(result: dict, t: dict) -> Table:
    unit = reward_unit(t["task"], result.get("metadata"))
    rows = [[v["variant"], str(v["start"]), str(v["instances"]), fmt(v["mean_reward_stateful"]),
             fmt(v["mean_reward_stateless"]), fmt(v["mean_gain"]), fmt(v.get("window_gain"))] for v in t["per_variant"]]
    return Table(f"Per variant, {t['task']} / {display_name(result.get('metadata'), t['system'])}",
                 ["variant", "start position", "instances", f"stateful mean ({unit})", f"stateless mean ({unit})",
                  f"gain ({unit})", f"gain in adaptation window ({unit})"], rows, task=t["task"])


def shocks_table(result: dict, t: dict) -> Table | None:
    if not t.get("shocks"):
        return None
    unit = reward_unit(t["task"], result.get("metadata"))
    rows = [[str(e["position"]), ",".join(e["events"]), fmt(e["reward_before"]), fmt(e["reward_after"]),
             "never" if e["recovery_instances"] is None else str(e["recovery_instances"])] for e in t["shocks"]]
    return Table(f"Lifecycle shocks, {t['task']} / {display_name(result.get('metadata'), t['system'])}",
                 ["position", "events", f"reward before ({unit})", f"reward after ({unit})", "instances to recover"], rows,
                 task=t["task"])


def usage_line(t: dict) -> str | None:
    usage = t.get("usage") or {}
    if not (usage.get("tokens") or usage.get("cost") is not None):
        return None
    tok = usage.get("tokens") or {}
    caveats = [f"{usage['estimated_calls']} calls' tokens estimated (the endpoint reported no usage)"
               if usage.get("estimated_calls") else "",
               f"{usage['cache_hits']} calls answered from the response cache, not sent" if usage.get("cache_hits") else "",
               f"{fmt(usage['replaced_cost'], 4)} USD more on attempts played again (--resume)"
               if usage.get("replaced_cost") else ""]
    caveats = "; ".join(c for c in caveats if c)
    return (f"Tokens: prompt {tok.get('prompt', 0)}, completion {tok.get('completion', 0)}, cached "
            f"{tok.get('cached', 0)}; cost {fmt(usage.get('cost'), 4)} USD ({t['task']} / {t['system']})"
            + (f"; {caveats}" if caveats else ""))


def summary_tables(result: dict) -> list[Table]:
    """Headline first, then the suite aggregate, rewards, sums and the split."""
    return [tb for tb in (headline_table(result), aggregate_table(result), rewards_table(result), sums_table(result),
                          split_table(result)) if tb is not None]


def task_tables(result: dict) -> list[Table]:
    """Per (task, system): the per-variant table and, after lifecycle shocks, the shocks table."""
    out = []
    for t in result["tasks"]:
        out.append(variant_table(result, t))
        shocks = shocks_table(result, t)
        if shocks is not None:
            out.append(shocks)
    return out


def metrics_tables(result: dict, costs: Table | None = None) -> tuple[list[Table], list[str]]:
    """The tables of clbench.metrics.compute's result, headline first (`costs`, the report's cost
    table, goes before the per-task tables), and the free text after them."""
    tables = summary_tables(result) + ([costs] if costs is not None else []) + task_tables(result)
    return tables, [*filter(None, map(usage_line, result["tasks"])), HOW_TO_READ]


# ----------------------------------------------------------------------------- report-only tables
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
        rows.append([r["task"], report.display_name(r["system"]), reward_unit(r["task"], report.metadata),
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
    import numpy as np  # only reports of upstream imports get here

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
                     pm(u.get("normalized_gain")), fmt_est(t["normalized_gain"]), fmt(t["stability"]["mean"]),
                     fmt(t["plasticity"]["mean"]), fmt(gap), _scoring(report, t["task"], t["system"])])
    return Table("What changes under clbench's conventions",
                 ["task", "system", "norm. reward (upstream ± SE)", "norm. reward (clbench [95% CI])",
                  "norm. gain (upstream ± SE)", "norm. gain (clbench [95% CI])", "stability (fraction)",
                  "plasticity (fraction)", "max gap of gain curves (reward unit)", "instance scoring"], rows,
                 "Gap: largest difference between the mean cumulative gain curve paired by instance id and the "
                 "one paired by position (upstream's curves); final values agree, since sums do not depend on "
                 "pairing. Cohort scores are recomputed in signed bits from the outcome metadata.")


def report_tables(report: RunReport, plots: list | None = None) -> tuple[list[Table], list[str]]:
    """Every table of the report, headline first, and the free text after them."""
    tables, lines = [], []
    if "clbench" in report.conventions:
        tables, lines = metrics_tables(_result(report), usage(report))
    if "upstream" in report.conventions:
        tables += [upstream_tasks(report), upstream_aggregate(report)]
    if len(report.conventions) == 2:
        tables.append(changes(report))
    if plots:
        lines.append("Plots:\n" + "\n".join(f"- {p}" for p in plots))
    return tables, lines


# ----------------------------------------------------------------------------- markdown
def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(table: Table) -> str:
    parts = [f"### {table.title}", "", markdown_table(table.headers, table.rows)]
    if table.note:
        parts += ["", table.note]
    return "\n".join(parts)


def render_markdown(tables: list[Table], lines: list[str] = ()) -> str:
    """Tables, then free text, as one markdown document."""
    return "\n\n".join([*(to_markdown(tb) for tb in tables), *lines]) + "\n"


def metrics_markdown(result: dict) -> str:
    return render_markdown(*metrics_tables(result))


def markdown(report: RunReport, plots: list | None = None) -> str:
    return render_markdown(*report_tables(report, plots))


# ----------------------------------------------------------------------------- terminal
_BORDER = 3  # rich's box: "│ " before a column and " " after it


def _min_width(cells: list[str]) -> int:
    """Narrowest a column can get without splitting a number: its longest space-free token."""
    return max((len(tok) for c in cells for tok in re.split(r"\s+", str(c)) if tok), default=1)


def _keys_whole(table: Table, width: int, keys: int = 2) -> bool:
    """Whether the key columns (task, system) fit unwrapped next to the widest other column."""
    if len(table.headers) <= keys:
        return False
    full = sum(max(len(str(c)) for c in [r[j] for r in table.rows] + [table.headers[j]]) + _BORDER for j in range(keys))
    rest = max(_min_width([r[j] for r in table.rows] + [table.headers[j]]) for j in range(keys, len(table.headers)))
    return full + rest + _BORDER + 1 <= width


def column_groups(table: Table, width: int, keys: int = 2) -> list[list[int]]:
    """Split the columns into groups that each fit `width`, repeating the first `keys` columns."""
    keys = min(keys, len(table.headers))
    whole = _keys_whole(table, width, keys)  # then rich_tables never wraps them: they need their longest cell
    need = [(max(len(str(c)) for c in [r[j] for r in table.rows] + [table.headers[j]]) if j < keys and whole else
             _min_width([r[j] for r in table.rows] + [table.headers[j]])) + _BORDER for j in range(len(table.headers))]
    base = sum(need[:keys]) + 1
    groups, cur, used = [], [], base
    for j in range(keys, len(table.headers)):
        if cur and used + need[j] > width:
            groups.append(cur)
            cur, used = [], base
        cur.append(j)
        used += need[j]
    groups.append(cur)
    return [list(range(keys)) + g for g in groups]


def rich_tables(table: Table, width: int) -> list:
    """The table as rich Tables that fit `width` columns: cells wrap at spaces, never inside a number."""
    from rich import box
    from rich.table import Table as RichTable

    out = []
    groups = column_groups(table, width) if table.headers else [[]]
    whole = _keys_whole(table, width)
    for n, cols in enumerate(groups):
        title = table.title + (f" ({n + 1}/{len(groups)})" if len(groups) > 1 else "")
        rt = RichTable(title=title, box=box.SQUARE, title_justify="left", show_lines=False)
        for j in cols:
            numeric = j >= 2 and all(re.match(r"^[-\d\[]|^n/a$|^undefined$", str(r[j])) for r in table.rows)
            # rich never splits a word while the columns' longest words fit (column_groups sees to it)
            rt.add_column(table.headers[j], justify="right" if numeric else "left", overflow="fold",
                          no_wrap=j < 2 and whole)
        for r in table.rows:
            rt.add_row(*(str(r[j]) for j in cols))
        out.append(rt)
    return out


def terminal() -> bool:
    """Rich output only on a terminal and outside CI (plain lines otherwise)."""
    from clbench.progress import plain_output

    return not plain_output() and sys.stdout.isatty()


def print_tables(tables: list[Table], lines: list[str] = (), console=None) -> None:
    """Tables as rich tables fitting the console's width, then free text; markdown when not a terminal."""
    if console is None and not terminal():
        print(render_markdown(tables, lines), end="")
        return
    from rich.console import Console
    from rich.text import Text

    console = console or Console()
    for tb in tables:
        for rt in rich_tables(tb, console.width):
            console.print(rt)
        if tb.note:
            console.print(Text(tb.note, style="dim"))
        console.print()
    for line in lines:
        console.print(Text(line))


def print_metrics(result: dict, console=None) -> None:
    """The metrics of a run, headline first."""
    print_tables(*metrics_tables(result), console=console)
