"""The figures of a report, rendered in memory (PNG bytes), and where they are written."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from clbench.reporting import plots
from clbench.reporting.model import RunReport

PLOTS_DIR = "plots"
METRICS = ("normalized_reward", "normalized_gain")
METRIC_LABELS = {"normalized_reward": "normalized reward", "normalized_gain": "normalized gain"}


@dataclass
class Figures:
    per_task: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)
    pareto: dict[str, bytes] = field(default_factory=dict)

    def all(self) -> dict[str, bytes]:
        out = {name: data for figs in self.per_task.values() for name, data in figs.items()}
        out.update(self.pareto)
        return out


def cost_entries(report: RunReport) -> list[dict]:
    """Per (task, system) with costs: the cost per stateful rollout and the normalized metrics
    (clbench conventions when selected, else upstream)."""
    if "clbench" in report.conventions:
        values = {(t["task"], t["system"]): {m: t[m]["mean"] for m in METRICS} for t in report.task_results()}
    else:
        values = {(r["task"], r["system"]): {m: r[m]["mean"] for m in METRICS} for r in report.upstream["tasks"]}
    return [{"task": task, "system": system, "label": report.display_name(system), "cost": c["per_rollout"], **values[(task, system)]}
            for (task, system), c in sorted(report.costs.items()) if (task, system) in values]


def pareto_figures(entries: list[dict]) -> dict[str, bytes]:
    out = {}
    for metric in METRICS:
        panels = plots.pareto_panels(entries, metric)
        if panels:
            out[f"pareto-{metric.replace('_', '-')}-vs-cost.png"] = plots.png_bytes(
                plots.pareto(panels, METRIC_LABELS[metric]))
    return out


def render(report: RunReport) -> Figures:
    figs = Figures()
    for t in report.task_results():
        label = report.display_name(t["system"])
        key = (t["task"], t["system"])
        figs.per_task[key] = {
            plots.figure_name(t["task"], t["system"], "learning-curve"): plots.png_bytes(plots.learning_curve(t, label)),
            plots.figure_name(t["task"], t["system"], "cumulative-gain"): plots.png_bytes(
                plots.cumulative_gain(t, label, report.position_paired.get(key))),
        }
    figs.pareto = pareto_figures(cost_entries(report))
    return figs


def write(figs: Figures, out_dir: str | Path) -> list[Path]:
    return plots.write(figs.all(), out_dir)
