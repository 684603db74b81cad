"""Transcripts of an agent's model calls, stored compactly next to the trajectories.

Layout: `transcripts/<task>/<system>/<name>.jsonl`, the twin of `trajectories/<task>/<system>/<name>.jsonl`
(one file per stateful rollout or stateless job). One JSON line per instance:
`{"instance_id", "position", "fresh", "z"}`, where `z` is the base64 of the zlib-compressed JSON
`{"defs": {hash: value}, "entries": [...]}`. Entries, in order:

* `{"kind": "call", "purpose": "act" | "memory:KIND", "messages": {"prefix": k, "refs": [hash, ...]},
  "tools": hash | null, "params", "reply": {content, reasoning, tool_calls, finish_reason},
  "usage", "latency", "retries", "attempt_errors", "error", "action", "memory_tool"}`:
  the messages exactly as sent are the first `k` messages of the previous call in the file
  followed by `refs`; every message (and tool list) is stored once per file, in `defs` of the
  line where it first occurs, and referred to by hash after that.
* `{"kind": "memory_update", "episode", "memory", "before", "after"}`: the memory's state as
  text before and after learning from `episode`; `before` is `{"same": true}` when it equals the
  previous update's `after`, else `{"text": ...}`; `after` is a line diff against `before`
  (a list of `[i, j]`, lines i..j of `before`, and strings, new text).

A line is self-contained except for hashes defined on earlier lines of its file; `fresh` marks
the first line a writer wrote (a resumed job starts over), so readers never reach across a
restart. Later lines of an instance replace earlier ones, as in trajectories.
"""
from __future__ import annotations

import base64
import hashlib
import json
import zlib
from difflib import SequenceMatcher
from pathlib import Path

TRANSCRIPTS_DIR = "transcripts"
MISSING = {"role": "system", "content": "[message not recorded]"}


def transcript_rel(trajectory_rel: str) -> str:
    """`trajectories/T/S/NAME.jsonl` -> `transcripts/T/S/NAME.jsonl`."""
    head, _, rest = trajectory_rel.partition("/")
    if head != "trajectories":
        raise ValueError(f"not a trajectory path: {trajectory_rel}")
    return f"{TRANSCRIPTS_DIR}/{rest}"


def transcript_file(run_dir: str | Path, trajectory_file: str | Path) -> Path:
    """The transcript file of a trajectory file: a path inside the run directory (absolute, or relative to the
    current folder like the run directory itself, e.g. runs/x and runs/x/trajectories/...), or one relative to
    the run directory (trajectories/...)."""
    run_dir = Path(run_dir)
    path = Path(trajectory_file)
    inside = path.absolute().is_relative_to(run_dir.absolute())
    relative = path.absolute().relative_to(run_dir.absolute()) if inside or path.is_absolute() else path
    return run_dir / transcript_rel(relative.as_posix())


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _hash(value) -> str:
    return hashlib.blake2b(_canonical(value).encode(), digest_size=8).hexdigest()


def line_diff(old: str, new: str) -> list:
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    ops: list = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            ops.append([i1, i2])
        elif j2 > j1:
            ops.append("".join(b[j1:j2]))
    return ops


def apply_diff(old: str, ops: list) -> str:
    a = old.splitlines(keepends=True)
    return "".join("".join(a[op[0]:op[1]]) if isinstance(op, list) else op for op in ops)


class Encoder:
    """Encodes one file's instances in order; holds what earlier lines already stored."""

    def __init__(self):
        self.seen: set[str] = set()
        self.previous: list[str] = []  # message hashes of the previous call
        self.memory: str | None = None  # the previous update's `after`
        self.fresh = True

    def _ref(self, value, defs: dict) -> str:
        h = _hash(value)
        if h not in self.seen:
            self.seen.add(h)
            defs[h] = value
        return h

    def encode(self, instance_id: str, position: int, entries: list[dict]) -> dict:
        defs: dict = {}
        out = []
        for entry in entries:
            e = dict(entry)
            if e.get("kind") == "call":
                hashes = [self._ref(m, defs) for m in e["messages"]]
                k = 0
                while k < min(len(hashes), len(self.previous)) and hashes[k] == self.previous[k]:
                    k += 1
                e["messages"] = {"prefix": k, "refs": hashes[k:]}
                self.previous = hashes
                if e.get("tools"):
                    e["tools"] = self._ref(e["tools"], defs)
            elif e.get("kind") == "memory_update":
                before, after = e["before"], e["after"]
                e["before"] = {"same": True} if before == self.memory else {"text": before}
                e["after"] = line_diff(before, after)
                self.memory = after
            out.append(e)
        payload = _canonical({"defs": defs, "entries": out}).encode()
        line = {"instance_id": instance_id, "position": position, "fresh": self.fresh,
                "z": base64.b64encode(zlib.compress(payload, 9)).decode("ascii")}
        self.fresh = False
        return line


def decode_lines(lines) -> dict[str, list[dict]]:
    """instance_id -> its entries with messages and memory text restored (the newest line wins)."""
    table: dict = {}
    previous: list[str] = []
    memory: str | None = None
    out: dict[str, list[dict]] = {}
    for line in lines:
        if line.get("fresh"):
            previous, memory = [], None
        try:
            payload = json.loads(zlib.decompress(base64.b64decode(line["z"])))
        except (KeyError, ValueError, zlib.error):
            continue
        table.update(payload.get("defs") or {})
        entries = []
        for e in payload.get("entries") or []:
            if e.get("kind") == "call":
                hashes = previous[:e["messages"]["prefix"]] + e["messages"]["refs"]
                previous = hashes
                e["messages"] = [table.get(h, MISSING) for h in hashes]
                if e.get("tools"):
                    e["tools"] = table.get(e["tools"])
            elif e.get("kind") == "memory_update":
                before = memory if e["before"].get("same") else e["before"].get("text")
                before = before if before is not None else ""
                e["before"], e["after"] = before, apply_diff(before, e["after"])
                memory = e["after"]
            entries.append(e)
        out[line.get("instance_id")] = entries
    return out


def read_transcripts(path: str | Path) -> dict[str, list[dict]]:
    """The decoded transcripts of one file ({} when it does not exist)."""
    from clbench.results import iter_jsonl

    path = Path(path)
    if not path.exists():
        return {}
    return decode_lines(obj for _, obj in iter_jsonl(path))


def transcript_bytes(run_dir: str | Path) -> tuple[int, int]:
    """(bytes on disk of every transcript file, instances they hold) of a run directory."""
    root = Path(run_dir) / TRANSCRIPTS_DIR
    files = list(root.rglob("*.jsonl")) if root.exists() else []
    size = sum(f.stat().st_size for f in files)
    count = sum(f.read_bytes().count(b"\n") for f in files)
    return size, count
