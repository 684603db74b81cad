"""The Interaction Explorer: one offline HTML page to read every instance of a run.

`clbench view RUN` writes RUN/explorer.html (`clbench report --format html` writes it next to the
report and links it). The page holds:

* a table of every instance per (task, system): id, variant, position, stateful and stateless
  reward (means over rollouts and passes), gain, steps, errors; sortable, filtered by text
  search, variant, outcome (gain > 0, = 0, < 0) and errored, with a jump-to-instance box. Rows
  are rendered lazily (only those in view), so 1,000s of instances stay responsive;
* per instance, the stateful rollout and the stateless pass side by side (choose the rollout
  and pass): every step's prompt (system prompt with the memory text, the carried history, the
  messages), the raw reply and reasoning, the parsed action, the observation and reward, the
  calls' tokens, latency, retries and errors, and each memory update (before and after).

Each instance's detail is stored gzip-compressed and base64-encoded and unpacked in the browser
(DecompressionStream) only when it is opened or searched, so the page opens fast. State lives in
the URL fragment (`#open=ID&q=TEXT&variant=V&outcome=up|flat|down&errored=1&k=0&p=0&group=N`),
so a view can be linked or screenshotted.
"""
from __future__ import annotations

import base64
import gzip
import json
from collections import defaultdict
from html import escape
from pathlib import Path

from clbench.results import iter_jsonl, load_metadata, load_records, reset_of, split_instances
from clbench.run_dir import legacy_stateless_trajectory, stateless_trajectories, trajectory_dir, trajectory_path

EXPLORER_FILE = "explorer.html"


def _events_by_instance(paths: list[Path]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for path in paths:
        if path.exists():
            for group in split_instances(ev for _, ev in iter_jsonl(path)):
                reset = reset_of(group)
                if reset is not None:
                    out[reset.get("instance_id")] = group
    return out


def _transcripts(run_dir: Path, paths: list[Path]) -> dict[str, list[dict]]:
    from clbench.llm.transcripts import read_transcripts, transcript_file

    out: dict[str, list[dict]] = {}
    for path in paths:
        out.update(read_transcripts(transcript_file(run_dir, path)))
    return out


def _compact_calls(entries: list[dict]) -> tuple[list, list[dict], list[dict]]:
    """(unique messages of the instance, calls referring to them by index, memory updates)."""
    table: list = []
    index: dict[str, int] = {}
    calls, updates = [], []
    for e in entries:
        if e.get("kind") == "memory_update":
            updates.append({"episode": e.get("episode"), "before": e.get("before"), "after": e.get("after")})
            continue
        refs = []
        for m in e.get("messages") or []:
            key = json.dumps(m, sort_keys=True)
            if key not in index:
                index[key] = len(table)
                table.append(m)
            refs.append(index[key])
        calls.append({k: v for k, v in {
            "purpose": e.get("purpose"), "m": refs, "reply": e.get("reply"), "action": e.get("action"),
            "memory_tool": e.get("memory_tool"), "usage": e.get("usage"), "latency": e.get("latency"),
            "retries": e.get("retries"), "attempt_errors": e.get("attempt_errors"), "error": e.get("error"),
            "from_cache": e.get("from_cache") or None}.items() if v is not None})
    return table, calls, updates


def _side(rec: dict | None, events: list[dict], entries: list[dict]) -> dict | None:
    if rec is None:
        return None
    reset = reset_of(events) or {}
    steps = [{"action": ev.get("action"), "observation": ev.get("observation"), "reward": ev.get("reward")}
             for ev in events if ev.get("event") == "step"]
    errors = [ev.get("error") for ev in events if ev.get("event") == "error"]
    errors += [e for ev in events if ev.get("event") == "model_errors" for e in ev.get("errors") or []]
    messages, calls, updates = _compact_calls(entries)
    return {"reward": rec.get("reward"), "solved": rec.get("solved"), "position": rec.get("position"),
            "error": rec.get("error"), "error_kind": rec.get("error_kind"), "observation": reset.get("observation"),
            "steps": steps, "errors": errors, "shocks": [ev for ev in events if ev.get("event") == "shock"],
            "messages": messages, "calls": calls, "memory_updates": updates, "tokens": rec.get("tokens"),
            "faults": rec.get("model_faults")}


def _pack(obj) -> str:
    data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=str).encode()
    return base64.b64encode(gzip.compress(data, 6, mtime=0)).decode("ascii")


def explorer_data(run_dir: str | Path) -> dict:
    """Everything the page shows: per (task, system) the instance rows and their packed details."""
    run_dir = Path(run_dir)
    records = load_records(run_dir)
    meta = load_metadata(run_dir) if (run_dir / "metadata.json").exists() else {}
    by_group: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for rec in records:
        by_group[(rec["task"], rec["system"])].append(rec)
    groups = []
    for (task, system), recs in sorted(by_group.items()):
        sf = defaultdict(dict)  # rollout -> instance -> record
        sl = defaultdict(dict)
        for r in recs:
            (sf if r["mode"] == "stateful" else sl)[int(r["rollout"])][r["instance_id"]] = r
        tdir = trajectory_dir(run_dir, task, system)
        sf_files = {k: [trajectory_path(run_dir, task, system, "stateful", k)] for k in sf}
        sl_files = {p: stateless_trajectories(run_dir, task, system, p) for p in sl}
        events = {("stateful", k): _events_by_instance(v) for k, v in sf_files.items()}
        events.update({("stateless", p): _events_by_instance(v) for p, v in sl_files.items()})
        for p in sl:  # record format 1: one file per stateless instance
            for iid in sl[p]:
                if iid not in events[("stateless", p)]:
                    events[("stateless", p)].update(_events_by_instance(
                        [legacy_stateless_trajectory(run_dir, task, system, p, iid)]))
        talk = {("stateful", k): _transcripts(run_dir, v) for k, v in sf_files.items()}
        talk.update({("stateless", p): _transcripts(run_dir, v) for p, v in sl_files.items()})
        ids = sorted({iid for d in [*sf.values(), *sl.values()] for iid in d},
                     key=lambda i: min((d[i]["position"] for d in sf.values() if i in d), default=1 << 30))
        rows, details = [], []
        for iid in ids:
            sf_recs = [d[iid] for d in sf.values() if iid in d]
            sl_recs = [d[iid] for d in sl.values() if iid in d]
            any_rec = (sf_recs or sl_recs)[0]
            def mean(xs: list[dict]) -> float | None:  # errored instances are no score: left out
                ok = [float(x["reward"]) for x in xs if not x.get("error")]
                return sum(ok) / len(ok) if ok else None

            r_sf, r_sl = mean(sf_recs), mean(sl_recs)
            errored = [x for x in sf_recs + sl_recs if x.get("error")]
            rows.append({"id": iid, "variant": any_rec.get("variant"),
                         "position": sf_recs[0]["position"] if sf_recs else any_rec.get("position"),
                         "sf": r_sf, "sl": r_sl, "gain": None if r_sf is None or r_sl is None else r_sf - r_sl,
                         "steps": max((int(x.get("steps") or 0) for x in sf_recs + sl_recs), default=0),
                         "errors": len(errored),
                         "infra": sum(x.get("error_kind") == "infrastructure" for x in errored)})
            detail = {"stateful": {str(k): _side(sf[k].get(iid), events[("stateful", k)].get(iid, []),
                                                 talk[("stateful", k)].get(iid, [])) for k in sorted(sf)},
                      "stateless": {str(p): _side(sl[p].get(iid), events[("stateless", p)].get(iid, []),
                                                  talk[("stateless", p)].get(iid, [])) for p in sorted(sl)}}
            details.append(_pack(detail))
        system_meta = (meta.get("systems") or {}).get(system, {})
        groups.append({"task": task, "system": system, "settings": system_meta.get("settings"),
                       "rollouts": sorted(sf), "passes": sorted(sl), "rows": rows, "details": details,
                       "has_transcripts": (run_dir / "transcripts" / tdir.relative_to(run_dir / "trajectories")).exists()})
    return {"run": run_dir.name, "groups": groups,
            "provenance": meta.get("provenance") or {}}


def render(run_dir: str | Path, title: str | None = None) -> str:
    data = explorer_data(run_dir)
    title = title or f"clbench explorer: {Path(run_dir).name}"
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")
    return (PAGE.replace("__TITLE__", escape(title)).replace("__CSS__", CSS).replace("__JS__", JS)
            .replace("__DATA__", payload))


def write(run_dir: str | Path, out: str | Path | None = None) -> Path:
    path = Path(out) if out else Path(run_dir) / EXPLORER_FILE
    path.write_text(render(run_dir), encoding="utf-8")
    return path


CSS = """
* { box-sizing: border-box; }
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 0; color: #222; font-size: 13px; }
header { padding: 8px 14px; background: #1f3b5a; color: #fff; }
header h1 { font-size: 16px; margin: 0 0 4px 0; } header .sub { font-size: 12px; opacity: .85; }
#controls { display: flex; flex-wrap: wrap; gap: 8px; padding: 8px 14px; background: #eef2f6; align-items: center; }
#controls input[type=text] { padding: 3px 6px; }
#main { display: flex; height: calc(100vh - 100px); }
#left { width: 42%; min-width: 360px; border-right: 1px solid #ccc; display: flex; flex-direction: column; }
#count { padding: 4px 10px; font-size: 12px; color: #555; }
#thead, .row { display: grid; grid-template-columns: 2.2fr 1.2fr .6fr .8fr .8fr .8fr .5fr .6fr; }
#thead { background: #f2f2f2; font-weight: 600; border-bottom: 1px solid #ccc; }
#thead div { padding: 4px 6px; cursor: pointer; white-space: nowrap; }
#scroller { flex: 1; overflow-y: auto; position: relative; }
.row { position: absolute; left: 0; right: 0; height: 24px; line-height: 24px; cursor: pointer; border-bottom: 1px solid #eee; }
.row div { padding: 0 6px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.row:hover { background: #f5f9ff; } .row.sel { background: #dbe9fb; }
.row.err div:first-child::before { content: "\\26A0 "; color: #c0392b; }
.up { color: #1a7f37; } .down { color: #c0392b; } .num { text-align: right; }
#detail { flex: 1; overflow-y: auto; padding: 8px 14px; }
.sides { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.side h3 { margin: 4px 0; font-size: 14px; } .side { min-width: 0; }
.card { border: 1px solid #ddd; border-radius: 4px; margin: 6px 0; padding: 6px 8px; background: #fff; }
.card.call { border-left: 4px solid #4a7ab5; } .card.mem { border-left: 4px solid #8e44ad; }
.card.errc { border-left: 4px solid #c0392b; background: #fff6f5; }
.label { font-size: 11px; text-transform: uppercase; color: #666; letter-spacing: .03em; }
pre { white-space: pre-wrap; word-break: break-word; margin: 2px 0; font-size: 12px; background: #f8f8f8; padding: 4px 6px;
      max-height: 260px; overflow: auto; }
details > summary { cursor: pointer; font-size: 12px; color: #345; }
.role-system { border-left: 3px solid #999; } .role-user { border-left: 3px solid #4a7ab5; }
.role-assistant { border-left: 3px solid #1a7f37; } .role-tool { border-left: 3px solid #b58a1a; }
mark { background: #ffe066; }
.add { background: #e6ffed; } .kv { font-size: 12px; color: #444; }
@media (max-width: 900px) { #main { flex-direction: column; height: auto; } #left { width: 100%; height: 60vh; }
  .sides { grid-template-columns: 1fr; } }
"""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title><style>__CSS__</style></head><body>
<header><h1>__TITLE__</h1><div class="sub" id="sub"></div></header>
<div id="controls">
 <label>system <select id="group"></select></label>
 <input type="text" id="q" placeholder="search text (ids, prompts, replies, observations)" size="34">
 <label>variant <select id="variant"><option value="">all</option></select></label>
 <label>outcome <select id="outcome"><option value="">all</option><option value="up">gain &gt; 0</option>
   <option value="flat">gain = 0</option><option value="down">gain &lt; 0</option></select></label>
 <label><input type="checkbox" id="errored"> errored only</label>
 <input type="text" id="jump" placeholder="jump to instance id" size="18">
</div>
<div id="main">
 <div id="left"><div id="count"></div>
  <div id="thead"><div data-k="id">instance</div><div data-k="variant">variant</div><div data-k="position">pos</div>
   <div data-k="sf">stateful</div><div data-k="sl">stateless</div><div data-k="gain">gain</div>
   <div data-k="steps">steps</div><div data-k="errors">errors</div></div>
  <div id="scroller"><div id="spacer"></div></div></div>
 <div id="detail"><p>Choose an instance on the left.</p></div>
</div>
<script id="data" type="application/json">__DATA__</script>
<script>__JS__</script>
</body></html>
"""

JS = r"""
const DATA = JSON.parse(document.getElementById('data').textContent);
const ROW = 24;
const state = {group: 0, q: '', variant: '', outcome: '', errored: false, open: null, k: null, p: null,
               sort: 'position', dir: 1};
const cache = new Map();   // "group/index" -> unpacked detail
const textIndex = new Map(); // "group/index" -> lower-case text of the detail
let rows = [];
const $ = id => document.getElementById(id);
const esc = s => String(s ?? '').replace(/[&<>"]/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]));
const fmt = x => x === null || x === undefined ? '–' : (typeof x === 'number' ? x.toFixed(3) : String(x));

async function unpack(g, i) {
  const key = g + '/' + i;
  if (cache.has(key)) return cache.get(key);
  const bin = Uint8Array.from(atob(DATA.groups[g].details[i]), c => c.charCodeAt(0));
  const stream = new Blob([bin]).stream().pipeThrough(new DecompressionStream('gzip'));
  const obj = JSON.parse(await new Response(stream).text());
  cache.set(key, obj);
  return obj;
}

function readHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  state.group = +(h.get('group') || 0); state.q = h.get('q') || ''; state.variant = h.get('variant') || '';
  state.outcome = h.get('outcome') || ''; state.errored = h.get('errored') === '1'; state.open = h.get('open');
  state.k = h.get('k'); state.p = h.get('p');
}
function writeHash() {
  const h = new URLSearchParams();
  for (const [k, v] of Object.entries({group: state.group || '', q: state.q, variant: state.variant,
       outcome: state.outcome, errored: state.errored ? '1' : '', open: state.open || '', k: state.k ?? '', p: state.p ?? ''}))
    if (v !== '' && v !== null) h.set(k, v);
  history.replaceState(null, '', '#' + h.toString());
}

async function searchHits(g, q) {
  const G = DATA.groups[g], hits = new Set();
  for (let i = 0; i < G.rows.length; i++) {
    const key = g + '/' + i;
    if (!textIndex.has(key)) textIndex.set(key, (G.rows[i].id + ' ' + JSON.stringify(await unpack(g, i))).toLowerCase());
    if (textIndex.get(key).includes(q)) hits.add(i);
  }
  return hits;
}

async function filter() {
  const G = DATA.groups[state.group];
  const q = state.q.trim().toLowerCase();
  const hits = q ? await searchHits(state.group, q) : null;
  rows = G.rows.map((r, i) => ({...r, i})).filter(r =>
    (!state.variant || r.variant === state.variant) && (!state.errored || r.errors > 0) &&
    (!state.outcome || (r.gain !== null && (state.outcome === 'up' ? r.gain > 1e-9 : state.outcome === 'down' ? r.gain < -1e-9 : Math.abs(r.gain) <= 1e-9))) &&
    (!hits || hits.has(r.i)));
  const k = state.sort, d = state.dir;
  rows.sort((a, b) => (a[k] ?? -1e18) < (b[k] ?? -1e18) ? -d : (a[k] ?? -1e18) > (b[k] ?? -1e18) ? d : a.position - b.position);
  $('count').textContent = rows.length + ' of ' + G.rows.length + ' instances' +
    (G.rows.some(r => r.errors) ? ' · ' + G.rows.filter(r => r.errors).length + ' errored' : '') +
    (G.has_transcripts ? '' : ' · no transcripts (not an LLM run)');
  $('spacer').style.height = rows.length * ROW + 'px';
  draw(true);
}

let drawn = '';
function draw(force) {
  const sc = $('scroller'), top = sc.scrollTop, h = sc.clientHeight || 600;
  const first = Math.max(0, Math.floor(top / ROW) - 10), last = Math.min(rows.length, Math.ceil((top + h) / ROW) + 10);
  const sig = first + ':' + last + ':' + state.open;
  if (!force && sig === drawn) return;
  drawn = sig;
  const html = [];
  for (let j = first; j < last; j++) {
    const r = rows[j];
    const cls = 'row' + (r.errors ? ' err' : '') + (r.id === state.open ? ' sel' : '');
    const gcls = r.gain > 1e-9 ? 'up' : r.gain < -1e-9 ? 'down' : '';
    html.push(`<div class="${cls}" style="top:${j * ROW}px" data-i="${r.i}"><div title="${esc(r.id)}">${esc(r.id)}</div>` +
      `<div>${esc(r.variant)}</div><div class="num">${r.position}</div><div class="num">${fmt(r.sf)}</div>` +
      `<div class="num">${fmt(r.sl)}</div><div class="num ${gcls}">${fmt(r.gain)}</div><div class="num">${r.steps}</div>` +
      `<div class="num">${r.errors || ''}</div></div>`);
  }
  const sp = $('spacer');
  sp.innerHTML = html.join('');
}

function hl(text) {
  const s = esc(text), q = state.q.trim();
  if (!q) return s;
  const re = new RegExp(q.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/&/g, '&amp;').replace(/</g, '&lt;'), 'gi');
  return s.replace(re, m => '<mark>' + m + '</mark>');
}
const pre = t => `<pre>${hl(t)}</pre>`;
function msgText(m) {
  let t = m.content ?? '';
  for (const c of m.tool_calls || []) { const f = c.function || c; t += (t ? '\n' : '') + '→ ' + f.name + ' ' + f.arguments; }
  return t;
}

function diffLines(before, after) {
  const old = new Set((before || '').split('\n'));
  return (after || '').split('\n').map(l => old.has(l) ? esc(l) : `<span class="add">${esc(l)}</span>`).join('\n');
}

function sideHtml(side, label) {
  if (!side) return `<div class="side"><h3>${label}</h3><p>not played</p></div>`;
  const out = [`<div class="side"><h3>${label}: reward ${fmt(side.reward)}${side.solved ? ' (solved)' : ''}, position ${side.position}</h3>`];
  if (side.error) out.push(`<div class="card errc"><div class="label">error (${esc(side.error_kind || 'agent')})</div>${pre(side.error)}</div>`);
  for (const s of side.shocks || []) out.push(`<div class="card errc"><div class="label">lifecycle shock</div>${pre(JSON.stringify(s))}</div>`);
  for (const u of side.memory_updates || []) {
    const had = new Set((u.before || '').split('\n'));
    const added = (u.after || '').split('\n').filter(l => !had.has(l));
    const dropped = (u.before || '').split('\n').filter(l => !new Set((u.after || '').split('\n')).has(l)).length;
    out.push(`<div class="card mem"><div class="label">memory update from ${esc(u.episode)}: +${added.length} / -${dropped} lines</div>` +
      `<details open><summary>what the update added</summary><pre class="add">${hl(added.join('\n'))}</pre></details>` +
      `<details><summary>memory before (${(u.before || '').length} chars)</summary>${pre(u.before)}</details>` +
      `<details><summary>memory after (${(u.after || '').length} chars; new lines highlighted)</summary><pre>${diffLines(u.before, u.after)}</pre></details></div>`);
  }
  out.push(`<div class="card"><div class="label">first observation</div>${pre(side.observation)}</div>`);
  let prevLen = 0, step = 0;
  for (const c of side.calls || []) {
    const msgs = c.m.map(i => side.messages[i]);
    const isMemory = c.purpose !== 'act';
    const facts = [isMemory ? esc(c.purpose) : 'model call (step ' + (step + 1) + ')'];
    if (c.usage) facts.push(c.usage.prompt + ' prompt / ' + c.usage.completion + ' completion tokens' + (c.usage.estimated ? ' (estimated)' : ''));
    if (c.latency !== undefined) facts.push(c.latency.toFixed(2) + ' s');
    if (c.retries) facts.push(c.retries + ' retries');
    if (c.from_cache) facts.push('cached');
    const parts = [`<div class="card ${c.error ? 'errc' : 'call'}"><div class="label">${facts.join(' · ')}</div>`];
    const sys = msgs[0] && msgs[0].role === 'system' ? msgs[0] : null;
    const shown = m => `<div class="role-${m.role}"><div class="label">${m.role}</div>${pre(msgText(m))}</div>`;
    if (isMemory || prevLen === 0) {
      if (sys) parts.push(`<details><summary>system prompt (with the memory text: ${(sys.content || '').length} chars)</summary>${pre(sys.content)}</details>`);
      let start = sys ? 1 : 0;
      if (!isMemory) msgs.forEach((m, j) => { if (m.role === 'user' && /Instance \d+ of \d+: /.test(m.content || '')) start = j; });
      const carried = msgs.slice(sys ? 1 : 0, start);
      if (carried.length) parts.push(`<details><summary>carried conversation from earlier instances (${carried.length} messages)</summary>` +
        carried.map(shown).join('') + '</details>');
      parts.push(msgs.slice(start).map(shown).join(''));
    } else {
      parts.push(`<div class="kv">prompt as sent: the previous prompt + ${msgs.length - prevLen} new message(s) (the reply and the observation above)</div>`);
    }
    if (c.reply) {
      if (c.reply.reasoning) parts.push(`<details><summary>reasoning</summary>${pre(c.reply.reasoning)}</details>`);
      parts.push(`<div class="role-assistant"><div class="label">reply${c.reply.finish_reason ? ' (' + esc(c.reply.finish_reason) + ')' : ''}</div>${pre(msgText(c.reply))}</div>`);
    }
    if (c.memory_tool) parts.push(`<div class="kv">memory tool ${esc(c.memory_tool.name)} → ${pre(c.memory_tool.result ?? '')}</div>`);
    if (c.error) parts.push(`<div class="label">error</div>${pre(c.error)}`);
    if (c.attempt_errors) parts.push(`<details><summary>${c.attempt_errors.length} failed attempts</summary>${pre(c.attempt_errors.join('\n'))}</details>`);
    if (!isMemory && c.action !== undefined && c.action !== null) {
      const s = side.steps[step] || {};
      parts.push(`<div class="label">action</div>${pre(c.action)}<div class="label">observation · reward ${fmt(s.reward)}</div>${pre(s.observation ?? '')}`);
      step++;
    }
    parts.push('</div>');
    out.push(parts.join(''));
    if (!isMemory) prevLen = msgs.length;
  }
  for (; step < (side.steps || []).length; step++) {  // agents without transcripts: the trajectory
    const s = side.steps[step];
    out.push(`<div class="card"><div class="label">step ${step + 1} · reward ${fmt(s.reward)}</div><div class="label">action</div>${pre(s.action)}` +
             `<div class="label">observation</div>${pre(s.observation)}</div>`);
  }
  out.push('</div>');
  return out.join('');
}

async function openInstance(id) {
  const G = DATA.groups[state.group];
  const i = G.rows.findIndex(r => r.id === id);
  if (i < 0) { $('detail').innerHTML = `<p>No instance ${esc(id)} in ${esc(G.task)}/${esc(G.system)}.</p>`; return; }
  state.open = id; writeHash(); draw(true);
  const d = await unpack(state.group, i), r = G.rows[i];
  const ks = Object.keys(d.stateful), ps = Object.keys(d.stateless);
  const k = ks.includes(state.k) ? state.k : ks[0], p = ps.includes(state.p) ? state.p : ps[0];
  const sel = (name, opts, v) => opts.length > 1 ? `<select data-s="${name}">${opts.map(o => `<option ${o === v ? 'selected' : ''}>${o}</option>`).join('')}</select>` : (v ?? '–');
  $('detail').innerHTML = `<h2 id="title">${esc(id)}</h2><div class="kv">variant ${esc(r.variant)} · position ${r.position} · ` +
    `stateful ${fmt(r.sf)} · stateless ${fmt(r.sl)} · gain <b class="${r.gain > 0 ? 'up' : r.gain < 0 ? 'down' : ''}">${fmt(r.gain)}</b>` +
    ` · errors ${r.errors} · stateful rollout ${sel('k', ks, k)} · stateless pass ${sel('p', ps, p)}</div>` +
    `<div class="sides">${sideHtml(d.stateful[k], 'Stateful rollout ' + (k ?? '–'))}${sideHtml(d.stateless[p], 'Stateless pass ' + (p ?? '–'))}</div>`;
  for (const s of $('detail').querySelectorAll('select[data-s]'))
    s.onchange = () => { state[s.dataset.s] = s.value; openInstance(id); };
}

function setup() {
  readHash();
  const g = $('group');
  g.innerHTML = DATA.groups.map((G, i) => `<option value="${i}">${esc(G.task)} / ${esc(G.system)} (${G.rows.length})</option>`).join('');
  g.value = state.group;
  const G = DATA.groups[state.group];
  const prov = DATA.provenance || {};
  $('sub').textContent = `${DATA.groups.length} task/system group(s) · clbench ${prov.clbench_version || '?'}` +
    (G && G.settings ? ' · ' + Object.entries(G.settings).filter(([k, v]) => v !== null && typeof v !== 'object').map(([k, v]) => k + ' ' + v).join(' · ') : '');
  const variants = [...new Set(G.rows.map(r => r.variant))];
  $('variant').innerHTML = '<option value="">all</option>' + variants.map(v => `<option>${esc(v)}</option>`).join('');
  $('variant').value = state.variant; $('q').value = state.q; $('outcome').value = state.outcome; $('errored').checked = state.errored;
}

async function init() {
  if (!DATA.groups.length) { $('detail').textContent = 'This run has no records.'; return; }
  setup();
  $('group').onchange = () => { state.group = +$('group').value; state.open = null; state.variant = ''; writeHash(); setup(); filter(); };
  let timer;
  $('q').oninput = () => { clearTimeout(timer); timer = setTimeout(() => { state.q = $('q').value; writeHash(); filter(); }, 250); };
  $('variant').onchange = () => { state.variant = $('variant').value; writeHash(); filter(); };
  $('outcome').onchange = () => { state.outcome = $('outcome').value; writeHash(); filter(); };
  $('errored').onchange = () => { state.errored = $('errored').checked; writeHash(); filter(); };
  $('jump').onkeydown = e => { if (e.key === 'Enter') { const id = $('jump').value.trim(); const j = rows.findIndex(r => r.id === id);
    if (j >= 0) $('scroller').scrollTop = j * ROW - 48; openInstance(id); } };
  $('scroller').onscroll = () => draw(false);
  $('spacer').onclick = e => { const el = e.target.closest('.row'); if (el) openInstance(DATA.groups[state.group].rows[+el.dataset.i].id); };
  for (const h of $('thead').children) h.onclick = () => { const k = h.dataset.k; state.dir = state.sort === k ? -state.dir : 1; state.sort = k; filter(); };
  window.onresize = () => draw(true);
  await filter();
  if (state.open) {
    const j = rows.findIndex(r => r.id === state.open);
    if (j >= 0) $('scroller').scrollTop = Math.max(0, j * ROW - 48);
    await openInstance(state.open);
  }
  document.body.dataset.ready = '1';
}
init();
"""
