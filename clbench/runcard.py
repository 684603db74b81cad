"""Run metadata and the run card (validated against schemas/run_card.schema.json)."""
from __future__ import annotations

import datetime as dt
import importlib.resources
import json
import platform
import subprocess
import sys
from functools import cache
from pathlib import Path

import jsonschema

import clbench
from clbench.metrics import aggregate, group_records, task_metrics
from clbench.results import load_metadata, load_records, write_json_atomic

RUN_CARD_FORMAT = "clbench.run_card/1"


@cache
def run_card_schema() -> dict:
    return json.loads((importlib.resources.files("clbench") / "schemas" / "run_card.schema.json").read_text())


def git_sha() -> str | None:
    """The clbench source checkout's commit, when running from one."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def task_params(env) -> dict:
    base = env.unwrapped
    spec = env.spec
    return {
        "env_id": base.env_id,
        "env_version": spec.version if spec is not None else None,
        "r_max": base.r_max,
        "r_reference": base.r_reference,
        "instances": len(base.schedule),
        "schedule": base.schedule.name,
        "variants": base.schedule.describe(),
    }


def provenance() -> dict:
    return {
        "clbench_version": clbench.__version__,
        "git_sha": git_sha(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def merge_metadata(run_dir: Path, task: str, params: dict, system: dict) -> dict:
    """Add a task and a system to metadata.json (a run dir may hold several of each)."""
    path = Path(run_dir) / "metadata.json"
    meta = load_metadata(run_dir) if path.exists() else {"format": 1, "tasks": {}, "systems": {}}
    meta.setdefault("tasks", {})[task] = params
    meta.setdefault("systems", {})[system["name"]] = system
    meta["provenance"] = provenance()
    write_json_atomic(path, meta)
    return meta


def compute(run_dir: str | Path, window: float | None = None, n_boot: int | None = None) -> dict:
    """Metrics for every (task, system) in a run directory plus per-system aggregates."""
    meta = load_metadata(run_dir)
    records = load_records(run_dir)
    kwargs = {k: v for k, v in (("window", window), ("n_boot", n_boot)) if v is not None}
    groups = group_records(records, meta["tasks"])
    per_task = [task_metrics(tr, **kwargs) for _, tr in sorted(groups.items())]
    systems = sorted({t["system"] for t in per_task})
    agg = {s: aggregate([t for t in per_task if t["system"] == s]) for s in systems}
    return {"tasks": per_task, "aggregate": agg, "metadata": meta}


def build_run_card(run_dir: str | Path, config: dict | None = None) -> dict:
    result = compute(run_dir)
    meta = result["metadata"]
    card = {
        "format": RUN_CARD_FORMAT,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "provenance": meta.get("provenance") or provenance(),
        "config": config or {},
        "systems": meta.get("systems", {}),
        "tasks": {f"{t['task']}/{t['system']}": {**t, "params": meta["tasks"][t["task"]]} for t in result["tasks"]},
        "aggregate": result["aggregate"],
    }
    jsonschema.validate(json.loads(json.dumps(card, default=float)), run_card_schema())
    return card


def write_run_card(run_dir: str | Path, config: dict | None = None) -> dict:
    card = build_run_card(run_dir, config)
    write_json_atomic(Path(run_dir) / "run_card.json", card)
    return card


def validate_run_card(path: str | Path) -> None:
    jsonschema.validate(json.loads(Path(path).read_text()), run_card_schema())
