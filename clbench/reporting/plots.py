"""Figures of a report (matplotlib, Agg backend, PNG).

Per task, with every system of the run directory overlaid (one colour per system): the
per-instance learning curve, stateful (solid) vs stateless (dashed), mean over rollouts with its
95% CI band (stateless paired to each rollout by instance id), variant boundaries marked; and the
cumulative gain curve with its 95% CI band. Noisy per-instance rewards (Poker's chip results) are
shown as a rolling mean inside each variant. Across systems, when costs exist: reward-vs-cost and
gain-vs-cost Pareto views (one panel per task plus the suite aggregate), one colour per system,
95% CI whiskers.
"""
from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from clbench.results import safe_name  # noqa: E402

STATEFUL, STATELESS, GAIN, UPSTREAM, SHOCK = "#1f77b4", "#ff7f0e", "#2ca02c", "#7f7f7f", "#d62728"
DPI = 110
#: rolling-mean width (instances) for tasks whose per-instance reward is mostly luck
SMOOTH = {"BB per hand": 9}


def system_colors(labels) -> dict[str, str]:
    """One colour per system, stable across every figure of a report."""
    cmap = plt.get_cmap("tab10")
    return {label: matplotlib.colors.to_hex(cmap(i % 10)) for i, label in enumerate(sorted(set(labels)))}


def rolling(y, variants: list, width: int) -> np.ndarray:
    """Centred rolling mean of width `width`, never across a variant boundary."""
    y = np.asarray(y, dtype=float)
    if width <= 1:
        return y
    out = np.empty_like(y)
    start = 0
    for end in range(1, len(y) + 1):
        if end == len(y) or variants[end] != variants[start]:
            block = y[start:end]
            for i in range(len(block)):
                lo, hi = max(0, i - width // 2), min(len(block), i + width // 2 + 1)
                out[start + i] = np.nanmean(block[lo:hi])
            start = end
    return out


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


def _band(ax, x, stat: dict, color: str, label: str, smooth: int = 1, variants=None, dashed: bool = False) -> None:
    """Mean line and its 95% CI band (the bootstrap interval of the mean at each position)."""
    mean, lo, hi = (rolling(stat[k], variants, smooth) for k in ("mean", "lo", "hi"))
    ax.fill_between(x, lo, hi, color=color, alpha=0.09 if dashed else 0.2, linewidth=0,
                    label=f"{label}: 95% CI")
    ax.plot(x, mean, color=color, linewidth=1.5, linestyle="--" if dashed else "-", label=f"{label}: mean")


def _finish(ax, fig: Figure, title: str, ncol: int = 4) -> None:
    ax.set_title(title, fontsize=10, pad=18)
    ax.grid(alpha=0.25)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    # below the axes, so it never hides the curves
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=ncol, frameon=False)
    fig.tight_layout()


def _series(series, system_label: str | None, colors: dict | None) -> tuple[list[tuple[str, dict]], dict]:
    """(label, task result) pairs (a single task result stands for itself, named `system_label` if
    given) and a colour per label."""
    series = [(series.get("system"), series)] if isinstance(series, dict) else list(series)
    if system_label is not None and len(series) == 1:
        series = [(system_label, series[0][1])]
    return series, colors or system_colors(label for label, _ in series)


def learning_curve(series, system_label: str | None = None, unit: str = "reward", colors: dict | None = None) -> Figure:
    """Per-instance reward of one task; `series` is a task result or (label, task result) pairs."""
    series, colors = _series(series, system_label, colors)
    t0 = series[0][1]
    curves = t0["curves"]
    x = np.asarray(curves["positions"])
    smooth = SMOOTH.get(unit, 1)
    fig, ax = plt.subplots(figsize=(10, 4.8), dpi=DPI)
    for label, t in series:
        c = t["curves"]
        _band(ax, x, c["stateless"], colors[label], f"{label} stateless", smooth, c["variants"], dashed=True)
        _band(ax, x, c["stateful"], colors[label], f"{label} stateful", smooth, c["variants"])
    mark_variants(ax, curves)
    mark_shocks(ax, t0.get("shocks"))
    ax.set_xlim(-0.5, len(x) - 0.5)
    ax.set_xlabel("position in rollout (instance)")
    ax.set_ylabel(f"instance reward ({unit})" + (f"\nrolling mean over {smooth} instances" if smooth > 1 else ""))
    who = ", ".join(label for label, _ in series)
    _finish(ax, fig, f"{t0['task']} / {who}: per-instance reward, mean over {t0['rollouts']} rollouts "
                     f"(stateless paired by instance id)")
    return fig


def cumulative_gain(series, system_label: str | None = None, position_paired: list[float] | None = None,
                    unit: str = "reward", colors: dict | None = None) -> Figure:
    series, colors = _series(series, system_label, colors)
    t0 = series[0][1]
    curves = t0["curves"]
    x = np.asarray(curves["positions"])
    fig, ax = plt.subplots(figsize=(10, 4.8), dpi=DPI)
    for label, t in series:
        _band(ax, x, t["curves"]["cumulative_gain"], colors[label], f"{label}, paired by instance id")
    if position_paired is not None:
        ax.plot(x, position_paired, color=UPSTREAM, linestyle=":", linewidth=1.6,
                label="mean, paired by position (upstream)")
    ax.axhline(0, color="black", linewidth=0.8)
    mark_variants(ax, curves)
    mark_shocks(ax, t0.get("shocks"))
    ax.set_xlim(-0.5, len(x) - 0.5)
    ax.set_xlabel("position in rollout (instance)")
    ax.set_ylabel(f"cumulative gain ({unit}, summed)\nstateful - stateless")
    who = ", ".join(label for label, _ in series)
    _finish(ax, fig, f"{t0['task']} / {who}: cumulative gain over {t0['rollouts']} rollouts", ncol=3)
    return fig


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats (cost no higher and value no lower, one strictly)."""
    front = []
    for i, (c, v) in enumerate(points):
        dominated = any((c2 <= c and v2 >= v) and (c2 < c or v2 > v) for j, (c2, v2) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


LABEL_PT = 7  # label font size (points)


def label_points(ax, pts: list[dict], xy: list[tuple[float, float]]) -> None:
    """Each point's label right of its own point; a label that would overlap one already placed moves
    up or down a line at a time, with a leader line back to its point. Call after the layout is final."""
    renderer = ax.figure.canvas.get_renderer()
    step_pt = 1.3 * LABEL_PT
    placed = []
    for i in sorted(range(len(pts)), key=lambda i: -xy[i][1]):
        color = pts[i].get("color", STATEFUL)
        text = ax.annotate(pts[i]["label"], xy[i], textcoords="offset points", xytext=(7, 0), ha="left",
                           va="center", fontsize=LABEL_PT, color=color, zorder=4,
                           bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.75},
                           arrowprops={"arrowstyle": "-", "color": color, "linewidth": 0.6})
        for step in (0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5):
            text.xyann = (7, step * step_pt)
            box = Text.get_window_extent(text, renderer)  # the label alone, not its leader line
            if not any(box.overlaps(b) for b in placed):
                break
        placed.append(box)
        text.arrow_patch.set_visible(bool(step))  # a leader line only for a label moved off its point


def pareto(panels: dict[str, dict], metric_label: str) -> Figure:
    """One panel per key: {"points": [{"label", "cost", "value" (a fraction), "ci" (fractions or None),
    "color"}], "front": bool}. Every point carries its own label right beside it."""
    names = list(panels)
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.8 * cols, 4.0 * rows), dpi=DPI, squeeze=False)
    legend: dict[str, object] = {}
    labels = []
    for ax, name in zip(axes.flat, names):
        pts = panels[name]["points"]
        xy = [(p["cost"], 100 * p["value"]) for p in pts]
        if panels[name]["front"] and len(xy) > 1:
            front = pareto_front(xy)
            (line,) = ax.plot([xy[i][0] for i in front], [xy[i][1] for i in front], color="#555555", linestyle="--",
                              linewidth=1, zorder=1)
            legend["Pareto front"] = line
        for p, (c, v) in zip(pts, xy):
            ci = p.get("ci")
            yerr = None
            if ci and ci[0] is not None and ci[1] is not None:
                yerr = [[max(0.0, v - 100 * ci[0])], [max(0.0, 100 * ci[1] - v)]]
            handle = ax.errorbar([c], [v], yerr=yerr, fmt="o", color=p.get("color", STATEFUL), ecolor=p.get("color", STATEFUL),
                                 elinewidth=1.2, capsize=3, markersize=6, zorder=3)
            legend.setdefault(p.get("legend", p["label"]), handle)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("cost (USD per stateful rollout)", fontsize=8)
        ax.set_ylabel(f"{metric_label} (%)", fontsize=8)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xlim(0, max(c for c, _ in xy) * 1.45 or 1.0)
        ax.margins(y=0.25)
        ax.grid(alpha=0.25)
        ax.tick_params(labelsize=7)
        labels.append((ax, pts, xy))
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.suptitle(f"{metric_label} vs cost\n95% CI whiskers; up and to the left is better", fontsize=10)
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=min(4, len(legend)), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    for ax, pts, xy in labels:  # placed once the axes have their final size
        label_points(ax, pts, xy)
    return fig


def pareto_panels(entries: list[dict], metric: str, aggregates: dict[str, dict] | None = None) -> dict[str, dict]:
    """Panels from entries {"task", "system", "label", "cost", metric, "ci": {metric: [lo, hi]}}.

    Several systems: one panel per task and one for the suite aggregate (summed cost; the value and
    interval from `aggregates[label][metric]`, the suite aggregate estimate, when given), each with
    its Pareto front. One system: a single panel with its tasks as points. Colours are per system."""
    usable = [e for e in entries if e.get("cost") is not None and e.get(metric) is not None]
    labels = {e["label"] for e in entries}
    if not usable:
        return {}
    colors = system_colors(labels)

    def point(e: dict, label: str) -> dict:
        return {"label": label, "legend": e["label"], "color": colors[e["label"]], "cost": e["cost"],
                "value": e[metric], "ci": (e.get("ci") or {}).get(metric)}

    if len(labels) == 1:
        pts = [point(e, e["task"]) for e in usable]
        return {f"{next(iter(labels))}: tasks": {"points": pts, "front": False}}
    panels: dict[str, dict] = {}
    for e in usable:
        panels.setdefault(e["task"], {"points": [], "front": True})["points"].append(point(e, e["label"]))
    tasks = {e["task"] for e in entries}
    agg = []
    for label in sorted(labels):
        mine = [e for e in entries if e["label"] == label]
        agg_est = (aggregates or {}).get(label) or {}
        over = set(agg_est.get("tasks") or tasks)  # the aggregate's own tasks (shared by every system)
        mine = [e for e in mine if e["task"] in over]
        if {e["task"] for e in mine} == over and all(e in usable for e in mine):
            est = agg_est.get(metric) or {}
            value = est.get("mean", float(np.mean([e[metric] for e in mine])))
            if value is not None:
                agg.append({"label": label, "legend": label, "color": colors[label],
                            "cost": sum(e["cost"] for e in mine), "value": value, "ci": est.get("ci")})
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
