"""Unified diffs: parsing, strict application on the host, and a shell command that applies one.

Only what the task's own diffs need: modifications of existing text files, hunks applied by
exact match of their old lines (at the stated line, else the single place they occur).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """A diff does not apply to the tree."""


@dataclass
class Hunk:
    old_start: int
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)


@dataclass
class FilePatch:
    path: str
    hunks: list[Hunk] = field(default_factory=list)


def parse_diff(text: str) -> list[FilePatch]:
    """Split a unified diff (git style, a/ b/ prefixes) into per-file hunks."""
    patches: list[FilePatch] = []
    hunk: Hunk | None = None
    for line in text.splitlines(keepends=True):
        if line.startswith("+++ "):
            path = line[4:].strip().split("\t")[0]
            patches.append(FilePatch(path[2:] if path.startswith("b/") else path))
            hunk = None
        elif line.startswith(("--- ", "diff --git", "index ")):
            continue
        elif (m := _HUNK.match(line)) is not None:
            if not patches:
                raise PatchError("hunk before any file header")
            hunk = Hunk(int(m.group(1)))
            patches[-1].hunks.append(hunk)
        elif hunk is not None and line.startswith("\\"):
            continue  # "\ No newline at end of file"
        elif hunk is not None and line[:1] in (" ", "-", "+"):
            body = line[1:]
            if line[0] in " -":
                hunk.old.append(body)
            if line[0] in " +":
                hunk.new.append(body)
    return patches


def apply_hunks(text: str, hunks: list[Hunk], path: str = "?") -> str:
    lines = text.splitlines(keepends=True)
    offset = 0
    for h in hunks:
        at = h.old_start - 1 + offset
        if lines[at: at + len(h.old)] != h.old:
            matches = [i for i in range(len(lines) - len(h.old) + 1) if lines[i: i + len(h.old)] == h.old]
            if len(matches) != 1:
                raise PatchError(f"{path}: hunk at line {h.old_start} does not apply ({len(matches)} matches)")
            at = matches[0]
        lines[at: at + len(h.old)] = h.new
        offset += len(h.new) - len(h.old)
    return "".join(lines)


def apply_diff(root: Path, text: str) -> list[str]:
    """Apply a diff to the tree at root; returns the changed paths. Raises PatchError."""
    changed = []
    for fp in parse_diff(text):
        target = root / fp.path
        if not target.is_file():
            raise PatchError(f"{fp.path}: no such file")
        target.write_text(apply_hunks(target.read_text(), fp.hunks, fp.path))
        changed.append(fp.path)
    return changed


def touched_files(text: str) -> list[str]:
    return [fp.path for fp in parse_diff(text)]


_SCRIPT = """import json, sys
for path, old, new in json.loads(EDITS_JSON):
    text = open(path).read()
    if text.count(old) != 1:
        sys.exit(f"patch does not apply to {path}")
    open(path, "w").write(text.replace(old, new))
    print("patched", path)
"""


def shell_command(text: str) -> str:
    """A bash command, run in the checkout's root, that applies the diff with nothing but python3."""
    edits = [(fp.path, "".join(h.old), "".join(h.new)) for fp in parse_diff(text) for h in fp.hunks]
    payload = json.dumps(edits)
    script = _SCRIPT.replace("EDITS_JSON", repr(payload))
    return f"python3 - <<'CLBENCH_PATCH_EOF'\n{script}CLBENCH_PATCH_EOF"
