"""One self-contained HTML file: inline CSS, the report's tables, PNG figures embedded as base64."""
from __future__ import annotations

import base64
from html import escape
from typing import TYPE_CHECKING

from clbench.reporting import tables as T
from clbench.reporting.model import RunReport

if TYPE_CHECKING:
    from clbench.reporting.figures import Figures

CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1500px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.05em; margin-top: 1.5em; }
table { border-collapse: collapse; font-size: 0.82em; margin: 0.5em 0; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; white-space: nowrap; }
th { background: #f2f2f2; }
td:first-child, td:nth-child(2), th:first-child, th:nth-child(2) { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
.note { font-size: 0.8em; color: #555; max-width: 70em; }
.meta { font-size: 0.85em; color: #444; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.4em 0; }
.headline table { font-size: 1.05em; } .headline th { background: #e3ecf7; }
.howto { background: #f7f7f2; border: 1px solid #ddd; padding: 0.2em 1em 0.6em; font-size: 0.85em; max-width: 75em; }
.howto h2 { margin-top: 0.6em; font-size: 1.1em; border: none; }
"""

#: the definitions the reading guide lists, as formulas
FORMULAS = (
    "g_t = r_sf,t - r_sl,t   (paired by instance_id)",
    "normalized gain = (mean r_sf - mean r_sl) / (r_max - mean r_sl)   (undefined if mean r_sl >= r_max)",
    "normalized reward = (mean r_sf - r_reference) / (r_max - r_reference)",
    "stability + plasticity = normalized gain   (B = first instance of each variant, W = the rest)",
    "early gain + late gain = normalized gain   (adaptation window: the first quarter of each variant)",
    "95% CI: paired bootstrap over instances, rollouts and stateless passes",
)


def table_html(table: T.Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in table.rows)
    note = f'<p class="note">{escape(table.note)}</p>' if table.note else ""
    return f"<h3>{escape(table.title)}</h3>\n<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"


def image_html(name: str, data: bytes) -> str:
    b64 = base64.b64encode(data).decode("ascii")
    return f'<img alt="{escape(name)}" src="data:image/png;base64,{b64}">'


def _meta_html(report: RunReport) -> str:
    meta = report.metadata
    src = meta.get("source") or {}
    prov = meta.get("provenance") or {}
    items = [f"run directory: <code>{escape(str(report.run_dir))}</code>",
             f"conventions: {escape(' + '.join(report.conventions))}",
             f"systems: {escape(', '.join(report.display_name(s) for s in sorted(meta.get('systems') or {})))}",
             f"clbench {escape(str(prov.get('clbench_version', '?')))}, git {escape(str(prov.get('git_sha') or 'n/a'))}"]
    if src:
        items.append(f"imported from {escape(str(src.get('kind')))}: <code>{escape(str(src.get('path')))}</code>")
    return '<ul class="meta">' + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def how_to_read_html() -> str:
    """The reading guide with its formulas, one paragraph per sentence group."""
    return ('<div class="howto" id="how-to-read"><h2>How to read this</h2>'
            + f"<p>{escape(T.HOW_TO_READ.removeprefix('How to read this. '))}</p>"
            + "<ul>" + "".join(f"<li><code>{escape(f)}</code></li>" for f in FORMULAS) + "</ul></div>")


def _settings_html(report: RunReport) -> str:
    """Every setting that shapes a system's result (the agent's `settings()`, e.g. the LLM agent's
    model, sampling, context budget, token count, prompt hash and price source)."""
    rows = []
    for name, system in sorted((report.metadata.get("systems") or {}).items()):
        for key, value in sorted((system.get("settings") or {}).items()):
            rows.append(f"<tr><td>{escape(report.display_name(name))}</td><td>{escape(key)}</td>"
                        f"<td>{escape(str(value))}</td></tr>")
    if not rows:
        return ""
    return ("<h3>Settings</h3><table><thead><tr><th>system</th><th>setting</th><th>value</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _errors_html(report: RunReport) -> str:
    """The headline's warning when instances errored: their metrics are not computed over them."""
    if "clbench" not in report.conventions:
        return ""
    lines = []
    for t in report.task_results():
        e = t.get("errors") or {}
        if e.get("infrastructure") or e.get("agent"):
            lines.append(f"{t['task']} / {report.display_name(t['system'])}: {e.get('infrastructure', 0)} instance(s) "
                         f"errored on infrastructure (model calls), {e.get('agent', 0)} on the agent; "
                         + (t["normalized_gain"].get("undefined") or ""))
    if not lines:
        return ""
    return ('<div class="howto" style="background:#fff3f0;border-color:#e0a39a"><h2>Errored instances: '
            'the run is incomplete</h2><ul>' + "".join(f"<li>{escape(x)}</li>" for x in lines) + "</ul></div>")


def render(report: RunReport, figures: "Figures", title: str | None = None, explorer: str | None = None) -> str:
    """The report's tables (tables.report_tables, as markdown and the terminal show them): the
    headline, the reading guide, the tables over every task, then per task its figures and tables."""
    title = title or f"clbench report: {report.run_dir.name}"
    parts = [f"<h1>{escape(title)}</h1>", _meta_html(report)]
    if explorer:
        parts.append(f'<p class="meta">Interaction Explorer: <code>{escape(explorer)}</code> next to this file '
                     "(every instance's prompts, memory, replies and observations, stateful and stateless side by "
                     "side; this page stays self-contained, so it is named, not linked).</p>")
    tables, _ = T.report_tables(report)
    head, rest = tables[:1], [tb for tb in tables[1:] if tb.task is None]
    parts.append(_errors_html(report))
    parts.append('<div class="headline">' + "".join(table_html(tb) for tb in head) + "</div>")
    parts.append(_settings_html(report))
    parts.append(how_to_read_html())
    parts += [table_html(tb) for tb in rest]
    per_task: dict[str, list[T.Table]] = {}
    for tb in tables:
        if tb.task is not None:
            per_task.setdefault(tb.task, []).append(tb)
    if "clbench" in report.conventions:
        parts.append("<h2>Per task</h2>")
        systems: dict[str, list[str]] = {}
        for t in report.task_results():
            systems.setdefault(t["task"], []).append(report.display_name(t["system"]))
        for task, names in systems.items():
            parts.append(f"<h3>{escape(task)} ({escape(T.reward_unit(task, report.metadata))}): "
                         f"{escape(', '.join(names))}</h3>")
            parts += [image_html(name, data) for name, data in figures.per_task.get(task, {}).items()]
            parts += [table_html(tb) for tb in per_task.get(task, [])]
    if figures.pareto:
        parts.append("<h2>Cost</h2>")
        parts += [image_html(n, d) for n, d in figures.pareto.items()]
    parts.append('<p class="note">Generated by <code>clbench report --format html</code>.</p>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")
