"""`clbench report` (markdown, JSON, self-contained HTML, plots) and `clbench compare`.

A real SpectrumMonitor run made with `clbench rollout`, plus hand-made run directories whose
numbers are worked out by hand (costs, several systems, permuted rollouts).
"""
from __future__ import annotations

import base64
import io
import json
import re
from html.parser import HTMLParser

import matplotlib.image as mpimg
import pytest

from clbench.cli import main
from clbench.reporting import figures, leaderboard, model, plots
from clbench.results import append_lines, write_json_atomic
from clbench.runcard import compute
from clbench.reporting.tables import metrics_markdown

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def spectrum_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "spectrummonitor"
    assert main(["rollout", "--env", "clbench/SpectrumMonitor-v6", "--agent", "reference", "--rollouts", "3",
                 "--out", str(out), "--quiet"]) == 0
    return out


def make_run(path, systems: dict[str, dict[str, float]], tasks=("t1", "t2"), cost=True):
    """systems: name -> {"sf": stateful reward, "sl": stateless reward, "cost": USD per instance}.
    Two instances per task; rollout 1 plays them in reverse order."""
    records = []
    for system, p in systems.items():
        for task in tasks:
            ids = [f"{task}-a", f"{task}-b"]
            extra = {"cost": p["cost"], "tokens": {"prompt": 100, "completion": 10}} if cost else {}
            for pos, iid in enumerate(ids):
                records.append({"task": task, "system": system, "mode": "stateless", "rollout": 0, "instance_id": iid,
                                "position": pos, "variant": "v", "reward": p["sl"], **extra})
            for k, order in enumerate([ids, ids[::-1]]):
                for pos, iid in enumerate(order):
                    records.append({"task": task, "system": system, "mode": "stateful", "rollout": k,
                                    "instance_id": iid, "position": pos, "variant": "v", "reward": p["sf"], **extra})
    write_json_atomic(path / "metadata.json", {
        "format": 1, "tasks": {t: {"r_max": 1.0, "r_reference": 0.2, "instances": 2} for t in tasks},
        "systems": {s: {"name": s, "agent": s, "display_name": s.upper()} for s in systems}})
    append_lines(path / "results.jsonl", records)
    return path


def test_markdown_report_keeps_the_summary_tables_and_adds_split_and_plots(spectrum_run, capsys):
    assert main(["report", str(spectrum_run), "--n-boot", "500"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(metrics_markdown(compute(spectrum_run, n_boot=500)).rstrip("\n"))
    assert "### Stability/plasticity split of normalized gain" in out
    assert "Cost and tokens" not in out  # scripted agents cost nothing
    listed = re.findall(r"^- (.+\.png)$", out, re.M)
    assert sorted(p.rsplit("/", 1)[1] for p in listed) == ["spectrummonitor--reference--cumulative-gain.png",
                                                            "spectrummonitor--reference--learning-curve.png"]
    for path in listed:
        img = mpimg.imread(path)
        assert img.shape[0] > 300 and img.shape[1] > 800
        assert img[..., :3].std() > 0.05  # not a blank canvas


def test_json_report_carries_the_metrics_and_conventions(spectrum_run, capsys):
    assert main(["report", str(spectrum_run), "--format", "json", "--no-plots", "--n-boot", "500"]) == 0
    data = json.loads(capsys.readouterr().out)
    ref = compute(spectrum_run, n_boot=500)
    assert data["conventions"] == ["clbench"] and "upstream" not in data
    assert data["tasks"][0]["normalized_gain"]["mean"] == pytest.approx(ref["tasks"][0]["normalized_gain"]["mean"])
    assert data["aggregate"] == json.loads(json.dumps(ref["aggregate"]))


def test_upstream_conventions_on_a_native_run_agree_with_clbench_means(spectrum_run):
    report = model.build(spectrum_run, conventions="both", n_boot=300)
    up = report.upstream["tasks"][0]
    t = report.task_results()[0]
    for m in ("normalized_gain", "normalized_reward", "cumulative_reward", "cumulative_gain"):
        assert up[m]["mean"] == pytest.approx(t[m]["mean"])
    # upstream's SE counts rollout-to-rollout noise only; clbench's also the sample of instances
    assert t["cumulative_reward"]["se"] > up["cumulative_reward"]["se"]
    # pairing by position changes the curve of permuted rollouts, never its final total
    assert report.position_paired[("spectrummonitor", "reference")][-1] == pytest.approx(t["curves"]["cumulative_gain"]["mean"][-1])


def test_html_report_is_self_contained(spectrum_run, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(spectrum_run), "--format", "html", "--out", str(out), "--n-boot", "300"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not re.search(r"""(src|href)=["'](?!data:)""", page)  # nothing fetched from elsewhere
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 2
    for b64 in images:
        raw = base64.b64decode(b64)
        assert raw.startswith(PNG) and mpimg.imread(io.BytesIO(raw)).shape[1] > 800
    assert "Stability/plasticity split" in page and "week-1" in page and "How to read this" in page


def test_learning_curve_marks_variant_boundaries_and_ci_bands(spectrum_run):
    t = compute(spectrum_run, n_boot=100)["tasks"][0]
    fig = plots.learning_curve([("ref", t)], unit="IoU")
    ax = fig.axes[0]
    vlines = sorted(line.get_xdata()[0] for line in ax.lines if line.get_color() == "black")
    assert vlines == [b - 0.5 for b in t["curves"]["boundaries"] if b > 0] == [29.5, 59.5]
    assert {tx.get_text() for tx in ax.texts} == set(t["curves"]["variants"]) and len(ax.texts) == 3
    means = [line for line in ax.lines if line.get_label() == "ref stateful: mean"]
    assert list(means[0].get_ydata()) == pytest.approx(t["curves"]["stateful"]["mean"])
    bands = [c.get_label() for c in ax.collections]
    assert bands == ["ref stateless: 95% CI", "ref stateful: 95% CI"]  # intervals, not min-max
    assert "IoU" in ax.get_ylabel()
    c = t["curves"]["stateful"]
    assert all(lo - 1e-9 <= m <= hi + 1e-9 for lo, m, hi in zip(c["lo"], c["mean"], c["hi"]))
    gain = plots.cumulative_gain(t, position_paired=[0.0] * len(t["curves"]["positions"])).axes[0]
    labels = [line.get_label() for line in gain.lines]
    assert "reference, paired by instance id: mean" in labels and "mean, paired by position (upstream)" in labels


def test_rolling_mean_stays_inside_variants():
    y = [0, 10, 0, 10, 100, 100, 100]
    v = ["a"] * 4 + ["b"] * 3
    assert plots.rolling(y, v, 3).tolist() == pytest.approx([5, 10 / 3, 20 / 3, 5, 100, 100, 100])
    assert plots.rolling(y, v, 1).tolist() == y


def test_pareto_front():
    pts = [(1.0, 10.0), (2.0, 5.0), (3.0, 20.0), (3.0, 15.0), (0.5, 1.0)]
    assert plots.pareto_front(pts) == [4, 0, 2]


def test_pareto_views_only_when_costs_exist(tmp_path):
    systems = {"cheap": {"sf": 0.5, "sl": 0.4, "cost": 0.01}, "dear": {"sf": 0.9, "sl": 0.3, "cost": 1.0}}
    report = model.build(make_run(tmp_path / "c", systems), n_boot=100)
    entries = figures.cost_entries(report)
    assert {(e["task"], e["label"]): e["cost"] for e in entries} == pytest.approx(
        {(t, s.upper()): 2 * p["cost"] for t in ("t1", "t2") for s, p in systems.items()})
    panels = plots.pareto_panels(entries, "normalized_gain")
    assert list(panels) == ["t1", "t2", "suite aggregate (summed cost)"]
    assert {p["label"]: p["cost"] for p in panels["suite aggregate (summed cost)"]["points"]} == pytest.approx(
        {"CHEAP": 0.04, "DEAR": 4.0})
    figs = figures.render(report)
    assert sorted(figs.pareto) == ["pareto-normalized-gain-vs-cost.png", "pareto-normalized-reward-vs-cost.png"]
    # both systems overlaid: one learning curve and one gain curve per task, plus two Pareto views
    assert all(data.startswith(PNG) for data in figs.all().values()) and len(figs.all()) == 2 * 2 + 2
    curve = plots.learning_curve([(report.display_name(t["system"]), t) for t in report.task_results()
                                  if t["task"] == "t1"]).axes[0]
    means = {line.get_label(): line.get_color() for line in curve.lines if line.get_label().endswith("stateful: mean")}
    assert sorted(means) == ["CHEAP stateful: mean", "DEAR stateful: mean"] and len(set(means.values())) == 2
    bare = model.build(make_run(tmp_path / "n", systems, cost=False), n_boot=100)
    assert figures.render(bare).pareto == {}


def test_compare_sorts_by_the_chosen_aggregate(tmp_path, capsys):
    # A: normalized reward (0.9-0.2)/0.8 = 0.875, gain (0.9-0.8)/0.2 = 0.5
    # B: normalized reward (0.6-0.2)/0.8 = 0.5,   gain (0.6-0.0)/1.0 = 0.6
    a = make_run(tmp_path / "a", {"A": {"sf": 0.9, "sl": 0.8, "cost": 0.1}})
    b = make_run(tmp_path / "b", {"B": {"sf": 0.6, "sl": 0.0, "cost": 0.1}})
    board = leaderboard.collect([a, b], sort="normalized_reward", n_boot=100)
    assert [s["system"] for s in board["systems"]] == ["A", "B"]
    assert board["systems"][0]["aggregate"]["normalized_reward"]["mean"] == pytest.approx(0.875)
    assert main(["compare", str(a), str(b), "--sort", "normalized_gain", "--n-boot", "100",
                 "--plots", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    # identical rollouts and instances: each cell's bootstrap CI collapses onto its mean
    assert rows[0].startswith("| 1 | B | 50.0 [50.0, 50.0] / 60.0 [60.0, 60.0] | 50.0 [50.0, 50.0] / 60.0 [60.0, 60.0] | "
                              "50.0 [50.0, 50.0] | 60.0 [60.0, 60.0] |")
    assert rows[1].startswith("| 2 | A | 87.5 [87.5, 87.5] / 50.0 [50.0, 50.0] |")
    assert (tmp_path / "p" / "pareto-normalized-gain-vs-cost.png").read_bytes().startswith(PNG)


def test_compare_rejects_the_same_system_and_task_twice(tmp_path, capsys):
    a = make_run(tmp_path / "a", {"A": {"sf": 0.9, "sl": 0.8, "cost": 0.1}})
    b = make_run(tmp_path / "b", {"A": {"sf": 0.6, "sl": 0.0, "cost": 0.1}}, tasks=("t2",))
    assert main(["compare", str(a), str(b)]) == 1
    assert "A / t2 appears in both" in capsys.readouterr().err


def test_conventions_auto_depends_on_where_the_results_came_from():
    imported = {"source": {"kind": "upstream-clbench-v1"}}
    assert model.resolve("auto", [{}]) == ("clbench",)
    assert model.resolve("auto", [imported, imported]) == ("upstream", "clbench")
    assert model.resolve("auto", [imported, {}]) == ("clbench",)
    assert model.resolve("upstream", [{}]) == ("upstream",)
    with pytest.raises(ValueError):
        model.resolve("paper", [{}])


class _HtmlTables(HTMLParser):
    """(title, headers, rows) of every table of an HTML page; a table's title is the h3 before it."""

    def __init__(self):
        super().__init__()
        self.tables, self._h3, self._title, self._cell, self._row = [], None, None, None, None

    def handle_starttag(self, tag, attrs):
        if tag == "h3":
            self._h3 = ""
        elif tag == "table":
            self.tables.append((self._title, [], []))
        elif tag == "tr":
            self._row = []
        elif tag in ("th", "td"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "h3":
            self._title, self._h3 = self._h3, None
        elif tag in ("th", "td"):
            (self.tables[-1][1] if tag == "th" else self._row).append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row:
            self.tables[-1][2].append(self._row)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        elif self._h3 is not None:
            self._h3 += data


def _markdown_tables(text: str) -> list[tuple]:
    """(title, headers, rows) of every `### title` table of a markdown report."""
    out = []
    for section in text.split("### ")[1:]:
        title, _, body = section.partition("\n")
        lines = [ln for ln in body.strip("\n").split("\n\n")[0].split("\n") if ln.startswith("|")]
        cells = [ln[2:-2].split(" | ") for ln in lines]
        out.append((title, cells[0], cells[2:]))
    return out


@pytest.mark.parametrize("kind", ["costed, both conventions", "shocks"])
def test_html_and_markdown_reports_show_the_same_tables(kind, tmp_path, capsys):
    if kind == "shocks":
        run = tmp_path / "run"
        assert main(["rollout", "--env", "clbench/SpectrumMonitor-v6", "--agent", "reference", "--rollouts", "2",
                     "--shock", "flush@10", "--out", str(run), "--quiet"]) == 0
        args = []
    else:
        run = make_run(tmp_path / "run", {"a": {"sf": 0.8, "sl": 0.4, "cost": 0.01},
                                          "b": {"sf": 0.6, "sl": 0.5, "cost": 0.002}})
        args = ["--conventions", "both"]
    capsys.readouterr()
    assert main(["report", str(run), "--no-plots", "--n-boot", "300", *args]) == 0
    md = _markdown_tables(capsys.readouterr().out)
    page = tmp_path / "report.html"
    assert main(["report", str(run), "--format", "html", "--out", str(page), "--no-plots", "--n-boot", "300", *args]) == 0
    parser = _HtmlTables()
    parser.feed(page.read_text())
    titles = [t for t, _, _ in md]
    assert titles[0] == "Headline (clbench conventions)" and len(md) >= 5
    assert any(t.startswith("Per variant, ") for t in titles)
    assert any(t.startswith("Lifecycle shocks, " if kind == "shocks" else "Cost and tokens") for t in titles)
    if kind != "shocks":
        assert "What changes under clbench's conventions" in titles
    # the same tables, cell for cell; HTML shows the per-task ones in its per-task section
    assert sorted(parser.tables) == sorted(md)
    assert [t for t in parser.tables if not t[0].startswith(("Per variant, ", "Lifecycle shocks, "))] == \
        [t for t in md if not t[0].startswith(("Per variant, ", "Lifecycle shocks, "))]
