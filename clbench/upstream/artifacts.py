"""Locating and reading upstream result files: ``runs/<system>/<task>.json.gz`` and
``runs/<system>/manifest.json``."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import clbench

SOURCE_KIND = "upstream-clbench-v1"
ENV_VAR = "CLBENCH_UPSTREAM_DIR"


def default_dir() -> Path | None:
    """The upstream folder: $CLBENCH_UPSTREAM_DIR when set, else ../shared/upstream-clbench-v1
    beside the repository; None when it holds no runs/ folder."""
    env = os.environ.get(ENV_VAR)
    path = Path(env) if env else Path(clbench.__file__).resolve().parents[1].parent / "shared" / "upstream-clbench-v1"
    return path if (path / "runs").is_dir() else None


def system_dirs(path: str | Path) -> dict[str, Path]:
    """System folders under `path` (a runs/ folder or one system's folder), by system name."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such directory")
    if any(path.glob("*.json.gz")):
        return {path.name: path}
    if (path / "runs").is_dir():
        path = path / "runs"
    found = {p.name: p for p in sorted(path.iterdir()) if p.is_dir() and any(p.glob("*.json.gz"))}
    if not found:
        raise ValueError(f"{path}: no upstream result files (<system>/<task>.json.gz) found")
    return found


def read_artifact(path: str | Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def read_manifest(system_dir: Path) -> dict:
    path = system_dir / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}
