"""Figures of a report (matplotlib, Agg backend, PNG).

Per task and system: the per-instance learning curve, stateful vs stateless (mean and min-max band
over rollouts, stateless paired to each rollout by instance id) with variant boundaries marked, and
the cumulative gain curve. Across systems, when costs exist: reward-vs-cost and gain-vs-cost
Pareto views (one panel per task plus the suite aggregate).
"""
from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from clbench.results import safe_name  # noqa: E402

STATEFUL, STATELESS, GAIN, UPSTREAM, SHOCK = "#1f77b4", "#ff7f0e", "#2ca02c", "#7f7f7f", "#d62728"
DPI = 110


def _arrays(stat: dict):
    return (np.asarray(stat["mean"], dtype=float), np.asarray(stat["min"], dtype=float),
            np.asarray(stat["max"], dtype=float))


def mark_variants(ax, curves: dict) -> None:
    """Dashed lines at variant boundaries and each variant's name above its block."""
    boundaries, variants = curves["boundaries"], curves["variants"]
    n = len(curves["positions"])
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    edges = list(boundaries) + [n]
    for i, start in enumerate(boundaries):
        if start > 0:
            ax.axvline(start - 0.5, color="black", linestyle="--", linewidth=0.9, alpha=0.6)
        mid = (start + edges[i + 1] - 1) / 2
        ax.text(mid, 1.01, str(variants[start]), transform=trans, ha="center", va="bottom", fontsize=7.5,
                rotation=0 if len(boundaries) <= 6 else 30)


def mark_shocks(ax, shocks: list[dict] | None) -> None:
    """Lifecycle shocks (clbench.shocks) as red dotted lines at the instance they precede."""
    for i, e in enumerate(shocks or []):
        ax.axvline(e["position"] - 0.5, color=SHOCK, linestyle=":", linewidth=1.3,
                   label="lifecycle shock" if i == 0 else None)


def _band(ax, x, stat: dict, color: str, label: str) -> None:
    mean, lo, hi = _arrays(stat)
    ax.fill_between(x, lo, hi, color=color, alpha=0.18, linewidth=0, label=f"{label}: min-max")
    ax.plot(x, mean, color=color, linewidth=1.4, label=f"{label}: mean")


def _finish(ax, fig: Figure, title: str) -> None:
    ax.set_title(title, fontsize=10, pad=18)
    ax.grid(alpha=0.25)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    # below the axes, so it never hides the curves
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, frameon=False)
    fig.tight_layout()


def learning_curve(t: dict, system_label: str | None = None) -> Figure:
    curves = t["curves"]
    x = np.asarray(curves["positions"])
    fig, ax = plt.subplots(figsize=(10, 4.6), dpi=DPI)
    _band(ax, x, curves["stateless"], STATELESS, "stateless")
    _band(ax, x, curves["stateful"], STATEFUL, "stateful")
    mark_variants(ax, curves)
    mark_shocks(ax, t.get("shocks"))
    ax.set_xlim(-0.5, len(x) - 0.5)
    ax.set_xlabel("position in rollout")
    ax.set_ylabel("instance reward")
    _finish(ax, fig, f"{t['task']} / {system_label or t['system']}: per-instance reward over "
                     f"{t['rollouts']} rollouts (stateless paired by instance id)")
    return fig


def cumulative_gain(t: dict, system_label: str | None = None, position_paired: list[float] | None = None) -> Figure:
    curves = t["curves"]
    x = np.asarray(curves["positions"])
    fig, ax = plt.subplots(figsize=(10, 4.6), dpi=DPI)
    _band(ax, x, curves["cumulative_gain"], GAIN, "paired by instance id")
    if position_paired is not None:
        ax.plot(x, position_paired, color=UPSTREAM, linestyle=":", linewidth=1.6,
                label="mean, paired by position (upstream)")
    ax.axhline(0, color="black", linewidth=0.8)
    mark_variants(ax, curves)
    mark_shocks(ax, t.get("shocks"))
    ax.set_xlim(-0.5, len(x) - 0.5)
    ax.set_xlabel("position in rollout")
    ax.set_ylabel("cumulative gain (stateful - stateless)")
    _finish(ax, fig, f"{t['task']} / {system_label or t['system']}: cumulative gain over {t['rollouts']} rollouts")
    return fig


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats (cost no higher and value no lower, one strictly)."""
    front = []
    for i, (c, v) in enumerate(points):
        dominated = any((c2 <= c and v2 >= v) and (c2 < c or v2 > v) for j, (c2, v2) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def pareto(panels: dict[str, dict], metric_label: str) -> Figure:
    """One panel per key: {"points": [{"label", "cost", "value" (a fraction)}], "front": bool}."""
    names = list(panels)
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), dpi=DPI, squeeze=False)
    for ax, name in zip(axes.flat, names):
        pts = panels[name]["points"]
        xy = [(p["cost"], 100 * p["value"]) for p in pts]
        ax.scatter([c for c, _ in xy], [v for _, v in xy], color=STATEFUL, zorder=3)
        for i, (p, (c, v)) in enumerate(zip(pts, xy)):
            ax.annotate(p["label"], (c, v), textcoords="offset points", xytext=(4, 4 if i % 2 == 0 else -10), fontsize=7)
        if panels[name]["front"] and len(xy) > 1:
            front = pareto_front(xy)
            ax.plot([xy[i][0] for i in front], [xy[i][1] for i in front], color=GAIN, linestyle="--",
                    linewidth=1, marker="o", markersize=11, markerfacecolor="none", label="Pareto front")
            ax.legend(fontsize=7, loc="lower right")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("USD per stateful rollout", fontsize=8)
        ax.set_ylabel(f"{metric_label} %", fontsize=8)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xlim(0, max(c for c, _ in xy) * 1.35 or 1.0)
        ax.margins(y=0.25)
        ax.grid(alpha=0.25)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.suptitle(f"{metric_label} vs cost (up and to the left is better)", fontsize=10)
    fig.tight_layout()
    return fig


def pareto_panels(entries: list[dict], metric: str) -> dict[str, dict]:
    """Panels from entries {"task", "system", "label", "cost", metric}. Several systems: one panel
    per task and one for the suite aggregate (mean metric, summed cost, systems with a cost on every
    task), each with its Pareto front. One system: a single panel with its tasks as points."""
    usable = [e for e in entries if e.get("cost") is not None and e.get(metric) is not None]
    labels = {e["label"] for e in entries}
    if not usable:
        return {}
    if len(labels) == 1:
        pts = [{"label": e["task"], "cost": e["cost"], "value": e[metric]} for e in usable]
        return {f"{next(iter(labels))}: tasks": {"points": pts, "front": False}}
    panels: dict[str, dict] = {}
    for e in usable:
        panels.setdefault(e["task"], {"points": [], "front": True})["points"].append(
            {"label": e["label"], "cost": e["cost"], "value": e[metric]})
    tasks = {e["task"] for e in entries}
    agg = []
    for label in sorted(labels):
        mine = [e for e in entries if e["label"] == label]
        if {e["task"] for e in mine} == tasks and all(e in usable for e in mine):
            agg.append({"label": label, "cost": sum(e["cost"] for e in mine),
                        "value": float(np.mean([e[metric] for e in mine]))})
    if len(tasks) > 1 and agg:
        panels["suite aggregate (summed cost)"] = {"points": agg, "front": True}
    return panels


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def figure_name(*parts: str) -> str:
    return "--".join(safe_name(p) for p in parts) + ".png"


def write(figures: dict[str, bytes], out_dir: str | Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in figures.items():
        path = out_dir / name
        path.write_bytes(data)
        paths.append(path)
    return paths
