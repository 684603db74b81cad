"""`import_upstream`: upstream system folders -> one clbench run directory per system."""
from __future__ import annotations

import os
import shutil
from collections import defaultdict
from pathlib import Path

import clbench
from clbench.results import RESULTS_FILE, append_lines, load_metadata, write_json_atomic
from clbench.upstream import mappings
from clbench.upstream.artifacts import (SOURCE_KIND, UpstreamFileError, _one_line, read_artifact, read_manifest,
                                        system_dirs, task_files)
from clbench.upstream.convert import convert_task, task_params
from clbench.upstream.paper import DISPLAY_NAMES, REFERENCE_SYSTEM


def _baseline_sums(records: list[dict]) -> dict[str, dict[str, float]]:
    """task -> {"upstream": B under upstream scoring, "clbench": B under clbench scoring}."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: {"upstream": 0.0, "clbench": 0.0})
    for r in records:
        if r["mode"] == "stateless":
            sums[r["task"]]["upstream"] += r["upstream_reward"]
            sums[r["task"]]["clbench"] += r["reward"]
    return dict(sums)


def _summary_only(manifest: dict, have: set[str]) -> dict[str, dict]:
    """Tasks a manifest reports without an artifact: its headline is all that is left
    (total_reward = mean rollout sum, cumulative_gain = mean gain per instance)."""
    out = {}
    for entry in manifest.get("tasks") or []:
        task, head = entry.get("task"), entry.get("headline") or {}
        if task in have or head.get("total_reward") is None:
            continue
        out[task] = {"cumulative_reward": float(head["total_reward"]),
                     "mean_gain_per_instance": head.get("cumulative_gain"),
                     "cost_per_rollout": head.get("total_cost_usd"),
                     "source": "manifest.json headline (the per-instance artifact is missing)"}
    return out


def convert_system(system_dir: Path) -> tuple[list[dict], dict, dict]:
    """(records, task params, summary-only tasks) of one upstream system folder."""
    system = system_dir.name
    records, params = [], {}
    for task, path in task_files(system_dir).items():
        doc = read_artifact(path)
        try:
            recs, p = convert_task(task, doc, system)
        except UpstreamFileError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            what = f"missing field {exc.args[0]!r}" if isinstance(exc, KeyError) and exc.args else _one_line(exc)
            raise UpstreamFileError(f"{path}: not an upstream task document ({what})") from None
        records += recs
        params[task] = p
    summary_only = _summary_only(read_manifest(system_dir), set(params))
    for task in summary_only:
        params[task] = {**task_params(task), "instances": None, "schedule": "default", "variants": [],
                        "summary_only": True}
    return records, params, summary_only


def _references(systems: dict[str, Path], converted: dict, reference_system: str,
                 reference_dir: Path | None = None) -> dict[str, dict]:
    """task -> external reference sums E (upstream and clbench scoring) from the reference system
    (imported now, beside the imported systems, or at `reference_dir`)."""
    if reference_system in converted:
        sums = _baseline_sums(converted[reference_system][0])
    else:
        ref_dir = reference_dir or next((d.parent / reference_system for d in systems.values()
                                         if (d.parent / reference_system).is_dir()), None)
        if ref_dir is None:
            raise ValueError(f"reference system {reference_system!r} not found beside {sorted(systems)}; "
                             f"the external reference of normalized reward is its baseline "
                             f"(name another with --reference-system)")
        sums = _baseline_sums(convert_system(ref_dir)[0])
    for task, value in mappings.published_external().items():
        sums.setdefault(task, {"upstream": value, "clbench": value})
    return sums


def _instance_count(task: str, systems: dict[str, Path]) -> int | None:
    """A task's schedule length from any sibling system's artifact (for headline-only tasks)."""
    for root in sorted({d.parent for d in systems.values()}):
        for system_dir in sorted(p for p in root.iterdir() if p.is_dir()):
            path = task_files(system_dir).get(task)
            if path is None:
                continue
            try:
                return len(read_artifact(path)["baseline_trace"]["result"]["instance_outcomes"])
            except (KeyError, TypeError) as exc:
                raise UpstreamFileError(f"{path}: not an upstream task document ({_one_line(exc)})") from None
    return None


def _system_info(system: str, manifest: dict) -> dict:
    return {"name": system, "display_name": DISPLAY_NAMES.get(system, system),
            "agent": manifest.get("system") or system, "system_args": manifest.get("system_args"),
            "upstream_run_group_id": manifest.get("run_group_id")}


def import_upstream(path: str | Path, out: str | Path, reference_system: str = REFERENCE_SYSTEM,
                    force: bool = False) -> list[Path]:
    """Convert upstream result files into one clbench run directory per system under `out`.
    `reference_system` names a system beside the imported ones, or is the path of a system folder."""
    systems = system_dirs(path)
    reference_dir = Path(reference_system) if Path(reference_system).is_dir() else None
    if reference_dir is not None:
        reference_system = reference_dir.name
    out = Path(out)
    for system in systems:
        target = out / system
        if target.exists() and not force:
            raise ValueError(f"{target} exists; pass --force to replace it")
        if target.exists() and (load_metadata(target).get("source") or {}).get("kind") != SOURCE_KIND:
            raise ValueError(f"{target} exists and is not an upstream import; not replacing it")
    converted = {name: convert_system(d) for name, d in systems.items()}
    refs = _references(systems, converted, reference_system, reference_dir)
    external = mappings.published_external()
    sizes = {t: p["instances"] for _, params, _ in converted.values() for t, p in params.items() if p["instances"]}
    for _, params, _ in converted.values():
        for task in params:
            if task not in sizes:
                sizes[task] = _instance_count(task, systems)
    written = []
    for system, (records, params, summary_only) in converted.items():
        for task, p in params.items():
            if p["r_max"] is None:
                raise ValueError(f"{system}/{task}: no published r_max for this task (known: {sorted(mappings.r_max())})")
            if task not in refs or not sizes.get(task):
                raise ValueError(f"{system}/{task}: no external reference or instance count "
                                 f"(no {reference_system} baseline, no other system's artifact)")
            p["instances"] = n = sizes[task]
            p["r_reference"] = refs[task]["clbench"] / n
            p["upstream"] = {"r_external": refs[task]["upstream"], "r_external_clbench": refs[task]["clbench"],
                             "reference_system": reference_system}
        for task, info in summary_only.items():
            if system == reference_system and task in external:
                info["baseline_sum"] = external[task]
            elif info["mean_gain_per_instance"] is not None:
                info["baseline_sum"] = info["cumulative_reward"] - info["mean_gain_per_instance"] * sizes[task]
            else:
                raise ValueError(f"{system}/{task}: the manifest headline has no gain; cannot recover the baseline")
        meta = {
            "format": 1,
            "source": {"kind": SOURCE_KIND, "path": str(Path(systems[system]).resolve()),
                       "conventions": "upstream", "reference_system": reference_system},
            "tasks": params,
            "systems": {system: _system_info(system, read_manifest(systems[system]))},
            "upstream": {"summary_only": summary_only},
            "provenance": {"clbench_version": clbench.__version__, "imported_with": "clbench import-upstream"},
        }
        written.append(_write_run_dir(out / system, meta, records))
    return written


def _write_run_dir(target: Path, meta: dict, records: list[dict]) -> Path:
    """Write next to the target, then swap it in, so a failed import never leaves half a directory."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_json_atomic(tmp / "metadata.json", meta)
    append_lines(tmp / RESULTS_FILE, records)
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)
    return target
