"""Reports as a person sees them: the HTML page (parsed, and screenshotted in a real headless
browser when chromium is installed) and the terminal tables at 80 and 120 columns."""
from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image as mpimg
import pytest
from matplotlib.text import Text
from rich.console import Console

from clbench.cli import main
from clbench.env import load_task_spec
from clbench.commands.suite import resolve_tasks
from clbench.reporting import figures, leaderboard, model
from clbench.runcard import compute
from clbench.reporting.tables import print_metrics, print_tables, summary_tables, task_tables
from tests.test_report import make_run

[POKER] = resolve_tasks(["Poker"])
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def two_systems(tmp_path_factory):
    """Real Poker records of two systems in one run directory."""
    out = tmp_path_factory.mktemp("view") / "poker"
    for agent in ("reference", "random"):
        assert main(["rollout", "--env", POKER, "--agent", agent, "--rollouts", "3", "--env-arg", "schedule=short",
                     "--workers", "1", "--quiet", "--out", str(out)]) == 0
    return out


class Page(HTMLParser):
    """Tables (headers and rows of cells), headings, images and text of an HTML page, in order."""

    def __init__(self):
        super().__init__()
        self.tables, self.images, self.order, self.text = [], [], [], []
        self._cell = None
        self._stack = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"headers": [], "rows": []})
            self.order.append(("table", len(self.tables) - 1))
        elif tag == "tr" and self.tables:
            self._row = []
        elif tag in ("th", "td"):
            self._cell = ""
        elif tag == "img":
            self.images.append(a.get("alt", ""))
        elif tag in ("h1", "h2", "h3") or (tag == "div" and a.get("id") == "how-to-read"):
            self.order.append((tag, a.get("id", "")))

    def handle_endtag(self, tag):
        if tag == "th":
            self.tables[-1]["headers"].append(self._cell.strip())
            self._cell = None
        elif tag == "td":
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr" and self.tables and getattr(self, "_row", None):
            self.tables[-1]["rows"].append(self._row)
            self._row = []

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        self.text.append(data)


def parse(page: str) -> Page:
    p = Page()
    p.feed(page)
    return p


def screenshot(page_path: Path, png: Path, height: int = 6000) -> None:
    profile = png.parent / f"profile-{png.stem}"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                    "--hide-scrollbars", f"--window-size=1500,{height}", f"--screenshot={png}", page_path.as_uri()],
                   check=True, capture_output=True, timeout=120)


def check_page(page: str) -> Page:
    p = parse(page)
    # headline first: the first table of the page holds normalized gain and reward with CIs
    first = p.tables[p.order[[k for k, _ in p.order].index("table")][1]]
    assert first["headers"][2:4] == ["normalized gain [95% CI] (fraction)", "normalized reward [95% CI] (fraction)"]
    kinds = [k for k, _ in p.order]
    assert kinds.index("div") == kinds.index("table") + 1  # the reading guide follows the headline
    for t in p.tables:  # a header for every column, a cell under every header
        assert t["headers"] and all(t["headers"]), t["headers"]
        assert all(len(r) == len(t["headers"]) for r in t["rows"]), t["headers"]
    text = " ".join(p.text)
    assert "(mean r_sf - mean r_sl) / (r_max - mean r_sl)" in text and "95% confidence interval" in text
    return p


def test_html_of_two_systems_has_headline_guide_units_and_overlaid_curves(two_systems, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(two_systems), "--format", "html", "--out", str(out), "--n-boot", "500"]) == 0
    p = check_page(out.read_text())
    variants = [t for t in p.tables if "gain in adaptation window (BB per hand)" in t["headers"]]
    assert len(variants) == 2  # one per system, every column headed, in the task's unit
    assert any("r_max (unit)" in t["headers"] and any("BB per hand" in c for r in t["rows"] for c in r)
               for t in p.tables)
    # r_max of Poker is shown with its own interval
    r_max_cells = [r[t["headers"].index("r_max (unit)")] for t in p.tables if "r_max (unit)" in t["headers"]
                   for r in t["rows"]]
    # (the short schedule's own r_max, calibrated for it: the default schedule's is never borrowed; on 12 hands
    # the oracle's interval may reach below 0)
    assert all(re.fullmatch(r"-?\d+\.\d{3} \[-?\d+\.\d+, -?\d+\.\d+\]", c) for c in r_max_cells), r_max_cells
    default_r_max = load_task_spec("poker")["r_max"]
    assert not any(c.startswith(f"{default_r_max:.3f}") for c in r_max_cells), (default_r_max, r_max_cells)
    # both systems on one learning curve and one gain curve
    assert p.images == ["poker--random_reference--learning-curve.png", "poker--random_reference--cumulative-gain.png"]
    if CHROMIUM is None:
        pytest.skip("chromium is not installed: HTML checked by parsing only (apt-get install chromium)")
    png = Path(os.environ.get("CLBENCH_SCREENSHOTS", tmp_path)) / "report-two-systems.png"
    screenshot(out, png)
    img = mpimg.imread(png)
    assert img.shape[1] == 1500 and img[..., :3].std() > 0.05


def test_html_of_costed_systems_shows_pareto_views(tmp_path):
    systems = {"cheap": {"sf": 0.5, "sl": 0.4, "cost": 0.01}, "mid": {"sf": 0.7, "sl": 0.4, "cost": 0.2},
               "dear": {"sf": 0.9, "sl": 0.3, "cost": 1.0}}
    run = make_run(tmp_path / "c", systems, tasks=("t1", "t2", "t3"))
    out = tmp_path / "cost.html"
    assert main(["report", str(run), "--format", "html", "--out", str(out), "--n-boot", "300"]) == 0
    p = check_page(out.read_text())
    assert "pareto-normalized-gain-vs-cost.png" in p.images
    usage = next(t for t in p.tables if "USD per stateful rollout" in t["headers"])
    assert {r[1] for r in usage["rows"]} == {"CHEAP", "MID", "DEAR"}  # display names, as everywhere
    if CHROMIUM is None:
        pytest.skip("chromium is not installed: HTML checked by parsing only (apt-get install chromium)")
    png = Path(os.environ.get("CLBENCH_SCREENSHOTS", tmp_path)) / "report-costs.png"
    screenshot(out, png, height=9000)
    assert mpimg.imread(png)[..., :3].std() > 0.05


def test_pareto_points_keep_their_own_labels_colours_and_whiskers(tmp_path):
    systems = {"cheap": {"sf": 0.5, "sl": 0.4, "cost": 0.01}, "dear": {"sf": 0.9, "sl": 0.3, "cost": 1.0}}
    report = model.build(make_run(tmp_path / "c", systems, tasks=("t1", "t2")), n_boot=200)
    from clbench.reporting import plots

    entries = figures.cost_entries(report)
    panels = plots.pareto_panels(entries, "normalized_gain", figures.report_aggregates(report))
    # crowd one panel: four labels on nearly the same spot must not overlap
    crowd = {"points": [{"label": f"system {i}", "legend": "CHEAP", "cost": 1.0 + 0.01 * i, "value": 0.3 + 0.001 * i}
                        for i in range(4)], "front": False}
    fig = plots.pareto({**panels, "crowd": crowd}, "normalized gain")
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        if not ax.get_visible() or not ax.texts:
            continue
        for text in ax.texts:  # each label is anchored on its own point, right of it
            own = [p for p in {**panels, "crowd": crowd}[ax.get_title()]["points"] if p["label"] == text.get_text()][0]
            assert text.xy == pytest.approx((own["cost"], 100 * own["value"])) and text.get_position()[0] > 0
        boxes = [Text.get_window_extent(t, renderer) for t in ax.texts]  # the labels, without leader lines
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:]), ax.get_title()
        assert "USD" in ax.get_xlabel() and "(%)" in ax.get_ylabel()
    legend = fig.legends[0]
    assert sorted(t.get_text() for t in legend.get_texts()) == ["CHEAP", "DEAR", "Pareto front"]
    # one colour per system, the same in every panel
    colours = {p["legend"]: p["color"] for panel in panels.values() for p in panel["points"]}
    assert len(set(colours.values())) == 2
    assert all(p["color"] == colours[p["legend"]] for panel in panels.values() for p in panel["points"])
    agg = panels["suite aggregate (summed cost)"]["points"]
    assert all(p["ci"] is not None for p in agg)


def numbers(tables) -> set[str]:
    return {tok for tb in tables for row in tb.rows for cell in row for tok in re.findall(r"-?\d+\.\d+", str(cell))}


@pytest.mark.parametrize("width", [80, 120])
def test_terminal_tables_fit_the_width_without_cutting_digits(two_systems, width):
    result = compute(two_systems, n_boot=300)
    buf = io.StringIO()
    console = Console(width=width, file=buf, force_terminal=False, color_system=None)
    print_metrics(result, console=console)
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width
    assert text.lstrip().startswith("Headline")  # the headline comes first
    flat = re.sub(r"\s+", " ", text)
    missing = [n for n in numbers(summary_tables(result) + task_tables(result)) if n not in flat]
    assert not missing  # every number printed whole (a cut one would be split over two lines)
    assert "How to read this." in text and "(r_max - mean r_sl)" in flat


def test_report_and_compare_agree_on_names_and_the_aggregate(tmp_path, capsys):
    # system A has t1 and t2, B only t2: the aggregate is over t2 for both, in report and compare
    a = make_run(tmp_path / "a", {"A": {"sf": 0.9, "sl": 0.8, "cost": 0.1}}, tasks=("t1", "t2"))
    b = make_run(tmp_path / "b", {"B": {"sf": 0.6, "sl": 0.0, "cost": 0.1}}, tasks=("t2",))
    board = leaderboard.collect([a, b], sort="normalized_gain", n_boot=200)
    assert board["shared_tasks"] == ["t2"] and board["left_out"] == ["t1"]
    assert [s["label"] for s in board["systems"]] == ["B", "A"]  # display names, ranked on t2 only
    both = make_run(tmp_path / "ab", {"A": {"sf": 0.9, "sl": 0.8, "cost": 0.1}, "B": {"sf": 0.6, "sl": 0.0, "cost": 0.1}},
                    tasks=("t2",))
    card_agg = compute(both, n_boot=200)["aggregate"]
    for s in board["systems"]:
        assert s["aggregate"]["normalized_gain"]["mean"] == pytest.approx(card_agg[s["system"]]["normalized_gain"]["mean"])
    assert main(["compare", str(a), str(b), "--n-boot", "200", "--sort", "normalized_gain"]) == 0
    out = capsys.readouterr().out
    assert "Left out of the aggregate (not shared by every system): t1." in out
    assert re.search(r"^\| 1 \| B \|.*\n\| 2 \| A \|", out, re.M)
    c = make_run(tmp_path / "c", {"C": {"sf": 0.6, "sl": 0.0, "cost": 0.1}}, tasks=("t3",))
    assert main(["compare", str(a), str(c)]) == 1
    assert "no task is shared by all compared systems" in capsys.readouterr().err


def test_compare_prints_a_rich_table_that_fits(tmp_path):
    a = make_run(tmp_path / "a", {"A": {"sf": 0.9, "sl": 0.8, "cost": 0.1}})
    b = make_run(tmp_path / "b", {"B": {"sf": 0.6, "sl": 0.0, "cost": 0.1}})
    table = leaderboard.table(leaderboard.collect([a, b], n_boot=100))
    buf = io.StringIO()
    print_tables([table], console=Console(width=80, file=buf, color_system=None))
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert not [n for n in numbers([table]) if n not in re.sub(r"\s+", " ", text)]


@pytest.mark.parametrize("width", [80, 120])
def test_terminal_tables_with_long_task_and_system_names(tmp_path, width):
    tasks = ("blind_spectrum_monitoring", "codebase_adaptation", "database_exploration")
    systems = {"claude-code-sonnet-4.6-with-a-long-memory-name": {"sf": 0.61234, "sl": 0.2, "cost": 1.0},
               "icl": {"sf": 0.4, "sl": 0.35, "cost": 0.2}}
    result = compute(make_run(tmp_path / "long", systems, tasks=tasks), n_boot=200)
    buf = io.StringIO()
    print_metrics(result, console=Console(width=width, file=buf, color_system=None))
    text = buf.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width
    flat = re.sub(r"\s+", " ", text)
    assert not [n for n in numbers(summary_tables(result) + task_tables(result)) if n not in flat]


# ---------------------------------------------------------------------- the Interaction Explorer (issue 30)
def explorer_dom(page: Path, fragment: str, tmp: Path, png: Path | None = None) -> str:
    """The page's DOM after its scripts ran (and a screenshot when `png` is given), in headless Chromium."""
    profile = tmp / f"profile-{abs(hash(fragment))}"
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
            "--hide-scrollbars", "--window-size=1500,950", "--virtual-time-budget=15000"]
    url = f"{page.as_uri()}#{fragment}"
    if png is not None:
        subprocess.run([*base, f"--screenshot={png}", url], check=True, capture_output=True, timeout=120)
    return subprocess.run([*base, "--dump-dom", url], check=True, capture_output=True, text=True, timeout=120).stdout


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory):
    """A short LLM run (icl memory, scripted server) whose stateless pass loses one instance to a 500."""
    from tests.openai_server import Fault, ReferencePolicy, ScriptedServer

    out = tmp_path_factory.mktemp("explorer") / "run"
    spectrum = "clbench/SpectrumMonitor-v6"
    with ScriptedServer(ReferencePolicy(spectrum, schedule="short")) as server:
        server.faults.extend([Fault("none")] * 12 + [Fault("server_error")] * 2)
        code = main(["rollout", "--env", spectrum, "--agent", "llm", "--memory", "icl", "--model", "scripted",
                     "--base-url", server.base_url, "--env-arg", "schedule=short", "--rollouts", "1", "--workers", "1",
                     "--quiet", "--out", str(out), "--agent-arg", "backoff=0.01", "--agent-arg", "max_retries=1",
                     "--fail-on-error", "3"])
    assert code == 3  # one errored instance: incomplete
    return out


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/system-setup.sh installs it)")
def test_explorer_shows_every_instance_its_steps_and_both_modes_side_by_side(llm_run, tmp_path):
    assert main(["view", str(llm_run)]) == 0
    page = llm_run / "explorer.html"
    shots = Path(os.environ.get("CLBENCH_SCREENSHOTS", tmp_path))
    table = explorer_dom(page, "", tmp_path, shots / "explorer-table.png")
    assert "8 of 8 instances · 1 errored" in table and table.count('class="row') == 8
    detail = explorer_dom(page, "open=scan-004", tmp_path, shots / "explorer-instance.png")
    for text in ("Stateful rollout 0: reward", "Stateless pass 0: reward", "memory update from scan-003",
                 "carried conversation from earlier instances", "model call (step 1)", "system prompt (with the memory text",
                 "Instance 4 of 8: scan-004", "action", "observation · reward"):
        assert text in detail, text
    errored = explorer_dom(page, "errored=1", tmp_path, shots / "explorer-errored.png")
    assert "1 of 8 instances" in errored and errored.count('class="row err') == 1
    bad_id = re.search(r'class="row err"[^>]*><div title="([^"]+)"', errored).group(1)
    side = explorer_dom(page, f"open={bad_id}&errored=1", tmp_path, shots / "explorer-error-side.png")
    assert "error (infrastructure)" in side and "HTTP 500" in side
    found = explorer_dom(page, "q=Instance%203%20of%208", tmp_path)  # search over the prompts' text
    assert "of 8 instances" in found and 0 < found.count('class="row') < 8


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/system-setup.sh installs it)")
def test_explorer_stays_responsive_at_thousands_of_instances(tmp_path):
    import json
    import time

    from clbench.reporting import explorer

    n = 1500
    recs = [{"format": 2, "task": "big", "env_id": "clbench/Big-v1", "system": "s", "mode": mode, "rollout": 0,
             "seed": 0, "instance_id": f"i{i:04d}", "position": i, "variant": f"v{i // 500}", "variant_position": i % 500,
             "reward": (i % 7) / 7 if mode == "stateful" else (i % 5) / 5, "steps": 1, "error": None}
            for mode in ("stateful", "stateless") for i in range(n)]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    start = time.perf_counter()
    page = explorer.write(tmp_path)
    assert time.perf_counter() - start < 10
    dom = explorer_dom(page, "", tmp_path)
    assert f"{n} of {n} instances" in dom
    assert 10 < dom.count('class="row') < 120  # only the rows in view are in the document
    jumped = explorer_dom(page, "open=i1234&variant=v2", tmp_path)
    assert "500 of 1500 instances" in jumped and '<h2 id="title">i1234</h2>' in jumped
    assert 'data-i="1234"' in jumped  # scrolled to it: its row is rendered
