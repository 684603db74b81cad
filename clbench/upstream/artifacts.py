"""Locating and reading upstream result files in either layout:

- published (the original repository's ``final_results/``): ``runs/<system>/manifest.json``,
  ``runs/<system>/tasks/<task>.json.gz`` and ``runs/<system>/task_artifacts.json.gz`` (a bundle
  of task artifacts, not a task document: never read as one);
- flat (a convenience copy): ``runs/<system>/<task>.json.gz`` and ``runs/<system>/manifest.json``.

Anything that cannot be read is an `UpstreamFileError` whose one-line message names the file."""
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


#: files beside the task documents that are not tasks (the published layout's artifact bundle)
NOT_TASKS = {"task_artifacts.json.gz"}


class UpstreamFileError(ValueError):
    """An upstream file that cannot be read or is not what its place says; the message names it."""


def task_files(system_dir: str | Path) -> dict[str, Path]:
    """task name -> its document in one system's folder (``tasks/<task>.json.gz`` when the folder
    has a tasks/ subfolder, the published layout; else ``<task>.json.gz``)."""
    system_dir = Path(system_dir)
    folder = system_dir / "tasks" if (system_dir / "tasks").is_dir() else system_dir
    return {p.name[: -len(".json.gz")]: p for p in sorted(folder.glob("*.json.gz")) if p.name not in NOT_TASKS}


def system_dirs(path: str | Path) -> dict[str, Path]:
    """System folders under `path` by system name. `path` may be a clone's ``final_results/``, a
    runs/ folder (either layout) or one system's folder."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such directory")
    if task_files(path):
        return {path.name: path}
    if (path / "runs").is_dir():
        path = path / "runs"
    found = {p.name: p for p in sorted(path.iterdir()) if p.is_dir() and task_files(p)}
    if not found:
        raise ValueError(f"{path}: no upstream result files (<system>/tasks/<task>.json.gz or "
                         "<system>/<task>.json.gz) found")
    return found


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


def read_artifact(path: str | Path) -> dict:
    """One task document; `UpstreamFileError` naming the file if it is not gzip JSON of an object."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as exc:
        raise UpstreamFileError(f"{path}: not a readable gzip JSON task document ({_one_line(exc)})") from None
    if not isinstance(doc, dict):
        raise UpstreamFileError(f"{path}: not a task document (a JSON {type(doc).__name__}, expected an object)")
    return doc


def read_manifest(system_dir: Path) -> dict:
    path = Path(system_dir) / "manifest.json"
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UpstreamFileError(f"{path}: not a readable JSON manifest ({_one_line(exc)})") from None
    if not isinstance(doc, dict):
        raise UpstreamFileError(f"{path}: not a manifest (a JSON {type(doc).__name__}, expected an object)")
    return doc
