"""The figures of a report, rendered in memory (PNG bytes), and where they are written."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from clbench.reporting import plots
from clbench.reporting.model import RunReport
from clbench.reporting.tables import reward_unit

PLOTS_DIR = "plots"
METRICS = ("normalized_reward", "normalized_gain")
METRIC_LABELS = {"normalized_reward": "normalized reward", "normalized_gain": "normalized gain"}


@dataclass
class Figures:
    per_task: dict[str, dict[str, bytes]] = field(default_factory=dict)  # task -> name -> PNG
    pareto: dict[str, bytes] = field(default_factory=dict)

    def all(self) -> dict[str, bytes]:
        out = {name: data for figs in self.per_task.values() for name, data in figs.items()}
        out.update(self.pareto)
        return out


def cost_entries(report: RunReport) -> list[dict]:
    """Per (task, system) with costs: the cost per stateful rollout and the normalized metrics with
    their intervals (clbench conventions when selected, else upstream's point estimates)."""
    rows = report.task_results() if "clbench" in report.conventions else report.upstream["tasks"]
    values = {(r["task"], r["system"]): {**{m: r[m]["mean"] for m in METRICS},
                                         "ci": {m: r[m].get("ci") for m in METRICS}} for r in rows}
    return [{"task": task, "system": system, "label": report.display_name(system), "cost": c["per_rollout"],
             **values[(task, system)]}
            for (task, system), c in sorted(report.costs.items()) if (task, system) in values]


def report_aggregates(report: RunReport) -> dict[str, dict]:
    """Suite aggregates by display name (clbench conventions), for the Pareto views."""
    if "clbench" not in report.conventions:
        return {}
    return {report.display_name(s): a for s, a in report.clbench["aggregate"].items()}


def pareto_figures(entries: list[dict], aggregates: dict[str, dict] | None = None) -> dict[str, bytes]:
    out = {}
    for metric in METRICS:
        panels = plots.pareto_panels(entries, metric, aggregates)
        if panels:
            out[f"pareto-{metric.replace('_', '-')}-vs-cost.png"] = plots.png_bytes(
                plots.pareto(panels, METRIC_LABELS[metric]))
    return out


def render(report: RunReport) -> Figures:
    """Per task, every system of the run overlaid on one learning curve and one gain curve."""
    figs = Figures()
    by_task: dict[str, list[dict]] = {}
    for t in report.task_results():
        by_task.setdefault(t["task"], []).append(t)
    colors = plots.system_colors(report.display_name(t["system"]) for t in report.task_results())
    for task, ts in by_task.items():
        series = [(report.display_name(t["system"]), t) for t in ts]
        unit = reward_unit(task, report.metadata)
        systems = "+".join(t["system"] for t in ts)
        paired = report.position_paired.get((task, ts[0]["system"])) if len(ts) == 1 else None
        figs.per_task[task] = {
            plots.figure_name(task, systems, "learning-curve"): plots.png_bytes(
                plots.learning_curve(series, unit=unit, colors=colors)),
            plots.figure_name(task, systems, "cumulative-gain"): plots.png_bytes(
                plots.cumulative_gain(series, position_paired=paired, unit=unit, colors=colors)),
        }
    figs.pareto = pareto_figures(cost_entries(report), report_aggregates(report))
    return figs


def write(figs: Figures, out_dir: str | Path) -> list[Path]:
    return plots.write(figs.all(), out_dir)
