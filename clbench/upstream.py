"""Result files of the original CL-Bench v1.0 ("upstream"): conversion and scoring conventions.

Upstream layout: ``runs/<system>/<task>.json.gz`` (one gzip JSON document per task) and
``runs/<system>/manifest.json``. A task document holds ``summary.sequence_signature`` (the
canonical instance order), ``baseline_trace`` (the stateless pass: one outcome per instance in
canonical order, with one ``instance_traces`` entry per instance) and ``run_traces[k]`` (the k-th
stateful rollout; ``instance_index`` of an outcome is its position in that rollout). An outcome has
instance_id, instance_index, reward, raw_metric_name/value, metadata and cost_usd; per-step token
usage is in the traces' ``interactions``.

Conversion (`import_upstream`) writes one clbench run directory per system: ``metadata.json`` (tasks'
r_max/r_reference, the upstream external references, display names) and ``results.jsonl`` with one
clbench record per instance per rollout (mode stateful/stateless, rollout, instance_id, position,
variant, reward, raw_metric, cost, tokens). Every record carries two rewards:

- ``upstream_reward``: the instance reward as upstream scored it (what the paper's numbers use);
- ``reward``: clbench's scoring of the same outcome. The two differ only for cohort_studies: the
  trace outcomes (which the published numbers use) hold the older clamped skill score
  ``max(0, 1 - KL/KL_ref)`` although cohort's r_max is in signed bits; clbench recomputes the signed
  information gain in bits from the outcome metadata, ``(mean_reference_kl - mean_kl_divergence) /
  ln 2`` (KL in nats). That equals the rescoring stored in each file's ``summary`` to 1e-6, and the
  oracle (KL = 0) scores ``mean_reference_kl / ln 2``, whose mean over the 20 instances is the
  published r_max 0.162202. Database rewards are re-derived in both as ``max(0, 1 - regret/15)``.

Variants are recovered per task (`VARIANT_RULES`): spectrum and poker from the instance id (a poker
block is ``stage<k>-<opponent>``, since an opponent recurs), codebase from the repository, cohort
from the study, database from the question id (1-20 precede the schema migration, 101-120 follow
it), sales from the stage of the rollouts' instance history. Each must be a contiguous block of the
canonical order, otherwise the task gets one variant ``all``; the rollouts, which upstream permutes
within variants, keep every recovered block in place (tested).

Upstream conventions (`compute`), which reproduce the paper (appendix B.4 per task, Table 1
aggregate). For task t of system s with K stateful rollouts of N instances, r the upstream reward:

    S_k = sum_i r_{k,i}                    per-rollout SUM of instance rewards
    cumulative reward = mean_k S_k  +- SE,  SE = stdev_k(S_k, ddof=1) / sqrt(K)
    B = sum_i r_bl,i                       the stateless baseline's sum
    cumulative gain   = mean_k S_k - B     (same SE: B is one number)
    normalized gain   = (mean_k S_k - B) / (N r_max - B)
    normalized reward = (mean_k S_k - E) / (N r_max - E),  E = icl-gpt-5.4's B on task t
    aggregate         = unweighted mean over the six tasks (Table 1 prints it in percent)

with r_max per instance as published (`R_MAX`) and E = 133.6 on exploitable_poker, where the
icl-gpt-5.4 artifact is missing; that system's poker row then comes from its manifest headline
(mean rollout sum 95.76). The normalized numbers equal clbench's mean-based formulas, because sums
and means differ by the same factor N; what differs under clbench's conventions is the scoring of
cohort_studies (signed bits), bootstrap CIs instead of standard errors, gain curves paired by
instance id (`position_paired_cumulative_gain` gives the position-paired curve of the paper's
plots, which for permuted rollouts pairs different instances; its final value is the same), and
the stability/plasticity split (clbench.metrics).
"""
from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import statistics
from collections import defaultdict
from pathlib import Path

import clbench
from clbench.results import RESULTS_FILE, RECORD_FORMAT, append_lines, load_metadata, load_records, write_json_atomic

SOURCE_KIND = "upstream-clbench-v1"
ENV_VAR = "CLBENCH_UPSTREAM_DIR"
REFERENCE_SYSTEM = "icl-gpt-5.4"

#: r_max per instance as published (README of the upstream folder).
R_MAX = {
    "blind_spectrum_monitoring": 1.0,
    "codebase_adaptation": 1.0,
    "cohort_studies": 0.162202,
    "database_exploration": 1.0,
    "exploitable_poker": 9.4875,
    "sales_prediction": 1.0,
}
#: External references (baseline sums of icl-gpt-5.4) that were published without an artifact.
PUBLISHED_EXTERNAL = {"exploitable_poker": 133.6}
#: Each upstream task's counterpart among clbench's own environments.
COUNTERPARTS = {
    "blind_spectrum_monitoring": "clbench/SpectrumMonitor-v1",
    "codebase_adaptation": "clbench/CodeRepair-v1",
    "cohort_studies": "clbench/CohortStudies-v1",
    "database_exploration": "clbench/DBExplore-v1",
    "exploitable_poker": "clbench/Poker-v1",
    "sales_prediction": "clbench/SalesForecast-v1",
}
DISPLAY_NAMES = {
    "icl-gpt-5.4": "ICL GPT-5.4",
    "icl-claude-sonnet-4.6": "ICL Sonnet 4.6",
    "mem0-gpt-5.4": "Mem0 GPT-5.4",
    "claude-code-sonnet-4.6": "Claude Code Sonnet 4.6",
}
#: Paper appendix B.4: (task, system) -> (cumulative reward, its SE, cumulative gain), native scale.
PUBLISHED_TASKS = {
    ("blind_spectrum_monitoring", "icl-gpt-5.4"): (46.198, 1.001, 26.437),
    ("blind_spectrum_monitoring", "claude-code-sonnet-4.6"): (44.282, 1.449, 24.522),
    ("blind_spectrum_monitoring", "icl-claude-sonnet-4.6"): (36.584, 1.262, 16.825),
    ("codebase_adaptation", "mem0-gpt-5.4"): (11.105, 1.100, 2.980),
    ("codebase_adaptation", "icl-gpt-5.4"): (10.140, 1.959, 0.690),
    ("database_exploration", "claude-code-sonnet-4.6"): (22.053, 1.182, 13.853),
    ("database_exploration", "mem0-gpt-5.4"): (17.240, 1.300, 12.907),
    ("exploitable_poker", "claude-code-sonnet-4.6"): (343.020, 29.367, 58.520),
    ("sales_prediction", "icl-claude-sonnet-4.6"): (10.018, 0.215, 4.840),
}
#: Paper Table 1: system -> (normalized reward %, normalized gain %), mean over the six tasks.
PUBLISHED_AGGREGATE = {
    "icl-claude-sonnet-4.6": (22.3, 25.4),
    "claude-code-sonnet-4.6": (19.0, 23.9),
    "mem0-gpt-5.4": (15.1, 20.2),
    "icl-gpt-5.4": (20.1, 20.1),
}

DB_REGRET_SCALE = 15.0


# ----------------------------------------------------------------------------- locating the data

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


# ----------------------------------------------------------------------------- scoring

def upstream_reward(task: str, outcome: dict) -> float:
    """The instance reward as upstream scored it (database re-derived from the regret)."""
    if task == "database_exploration" and outcome.get("raw_metric_value") is not None:
        return max(0.0, 1.0 - float(outcome["raw_metric_value"]) / DB_REGRET_SCALE)
    return float(outcome["reward"])


def signed_bits(outcome: dict) -> float | None:
    """Cohort information gain over the reference in bits, when the metadata has both KLs (nats)."""
    meta = outcome.get("metadata") or {}
    ref, kl = meta.get("mean_reference_kl"), meta.get("mean_kl_divergence")
    if ref is None or kl is None:
        return None
    return (float(ref) - float(kl)) / math.log(2)


def clbench_reward(task: str, outcome: dict) -> tuple[float, str]:
    """clbench's scoring of an upstream outcome and where it came from."""
    if task == "cohort_studies":
        bits = signed_bits(outcome)
        if bits is not None:
            return bits, "signed_bits"
    return upstream_reward(task, outcome), "upstream"


# ----------------------------------------------------------------------------- variants

def _sales_stages(doc: dict) -> dict[int, str]:
    """target_year -> stage, from a rollout's instance history (upstream scores sales in stages)."""
    for rt in doc.get("run_traces") or []:
        history = (((rt.get("trace") or {}).get("result") or {}).get("metrics") or {}).get("instance_history")
        if history:
            return {int(h["target_year"]): f"stage{h['stage_idx']}" for h in history}
    return {}


def _poker_variant(iid: str, outcome: dict, doc: dict) -> str:
    # poker:<opponent>:hand:stage<k>_seed<s>_hand<h>; an opponent recurs in later stages, so the
    # stage keeps every block's name unique
    parts = iid.split(":")
    return f"{parts[3].split('_')[0]}-{parts[1]}"


def _database_variant(iid: str, outcome: dict, doc: dict) -> str:
    # questions 1-20 precede the schema migration, 101-120 follow it (rollouts permute each block)
    return "pre-migration" if int(iid) < 100 else "post-migration"


def _sales_variant(iid: str, outcome: dict, doc: dict) -> str:
    return _sales_stages(doc)[int(outcome["metadata"]["target_year"])]


VARIANT_RULES = {
    "blind_spectrum_monitoring": lambda iid, o, doc: iid.split(":")[1],
    "codebase_adaptation": lambda iid, o, doc: iid.rsplit("-", 1)[0],
    "cohort_studies": lambda iid, o, doc: o["metadata"]["study_name"],
    "database_exploration": _database_variant,
    "exploitable_poker": _poker_variant,
    "sales_prediction": _sales_variant,
}


def recover_variants(task: str, doc: dict, canonical: list[str], outcomes: dict[str, dict]) -> dict[str, str]:
    """instance_id -> variant; one variant `all` when the rule fails or blocks are not contiguous."""
    rule = VARIANT_RULES.get(task)
    fallback = {iid: "all" for iid in canonical}
    if rule is None:
        return fallback
    try:
        variants = {iid: str(rule(iid, outcomes[iid], doc)) for iid in canonical}
    except (KeyError, IndexError, ValueError, TypeError):
        return fallback
    seen, previous = set(), None
    for iid in canonical:
        v = variants[iid]
        if v != previous and v in seen:
            return fallback
        seen.add(v)
        previous = v
    return variants


def describe_variants(canonical: list[str], variants: dict[str, str]) -> list[dict]:
    out: list[dict] = []
    for iid in canonical:
        if out and out[-1]["name"] == variants[iid]:
            out[-1]["instances"] += 1
        else:
            out.append({"name": variants[iid], "instances": 1})
    return out


# ----------------------------------------------------------------------------- conversion

def _usage_of(interactions: list[dict]) -> dict:
    calls, cost = 0, 0.0
    tokens = {"prompt": 0, "completion": 0, "cached": 0, "reasoning": 0}
    for it in interactions:
        u = (it.get("usage") or {}).get("interaction") or {}
        calls += int(u.get("call_count") or 0)
        cost += float(u.get("cost_usd") or 0.0)
        tokens["prompt"] += int(u.get("input_tokens") or 0)
        tokens["completion"] += int(u.get("output_tokens") or 0)
        tokens["cached"] += int(u.get("cached_input_tokens") or 0)
        tokens["reasoning"] += int(u.get("reasoning_tokens") or 0)
    return {"steps": len(interactions), "calls": calls, "cost": cost, "tokens": tokens}


def _rollout_usage(trace: dict) -> dict[int, dict]:
    """Usage per position of a stateful rollout (interactions carry their instance_index)."""
    by_pos: dict[int, list] = defaultdict(list)
    for it in trace.get("interactions") or []:
        pos = (it.get("query") or {}).get("instance_index")
        if pos is not None:
            by_pos[int(pos)].append(it)
    if not by_pos:
        return {}
    # a logged rollout without interactions at a position made no calls there (a forced poker action)
    return defaultdict(lambda: _usage_of([]), {pos: _usage_of(its) for pos, its in by_pos.items()})


def _baseline_usage(trace: dict) -> dict[str, dict]:
    """Usage per instance id of the stateless pass (one instance trace per instance)."""
    out = {}
    for it in trace.get("instance_traces") or []:
        outcomes = it.get("instance_outcomes") or []
        if outcomes:
            out[outcomes[0]["instance_id"]] = _usage_of(it.get("interactions") or [])
    return out


def _record(task: str, system: str, mode: str, rollout: int, position: int, outcome: dict,
            variant: str, variant_position: int, usage: dict | None) -> dict:
    reward, source = clbench_reward(task, outcome)
    name = outcome.get("raw_metric_name")
    raw = ({"name": name, "value": outcome.get("raw_metric_value"),
            "higher_is_better": outcome.get("raw_metric_higher_is_better")}
           if name else {"name": "reward", "value": outcome["reward"]})
    meta = outcome.get("metadata") or {}
    cost = outcome.get("cost_usd")
    if cost is None and usage is not None:
        cost = usage["cost"]  # upstream leaves it out when the instance made no priced call
    return {
        "format": RECORD_FORMAT,
        "task": task,
        "env_id": f"{SOURCE_KIND}/{task}",
        "system": system,
        "mode": mode,
        "rollout": rollout,
        "seed": None,
        "instance_id": outcome["instance_id"],
        "position": position,
        "variant": variant,
        "variant_position": variant_position,
        "reward": reward,
        "reward_source": source,
        "upstream_reward": upstream_reward(task, outcome),
        "raw_metric": raw,
        "solved": bool(outcome.get("success")),
        "steps": usage["steps"] if usage else None,
        "truncated": bool(meta.get("timed_out") or meta.get("budget_exceeded") or False),
        "wall_time": outcome.get("latency_seconds"),
        "tokens": usage["tokens"] if usage else None,
        "calls": usage["calls"] if usage else None,
        "cost": cost,
        "error": None,
        "metadata": meta,
    }


def _with_variant_positions(outcomes: list[tuple[int, dict]], variants: dict[str, str]):
    counts: dict[str, int] = defaultdict(int)
    for pos, o in sorted(outcomes, key=lambda x: x[0]):
        v = variants[o["instance_id"]]
        yield pos, o, v, counts[v]
        counts[v] += 1


def convert_task(task: str, doc: dict, system: str) -> tuple[list[dict], dict]:
    """clbench records and task parameters (without r_reference) of one upstream task document."""
    baseline = doc["baseline_trace"]["result"]["instance_outcomes"]
    summary = doc.get("summary") or {}
    canonical = [x["instance_id"] for x in summary.get("sequence_signature") or []] or [o["instance_id"] for o in baseline]
    by_id = {o["instance_id"]: o for o in baseline}
    if set(by_id) != set(canonical):
        raise ValueError(f"{system}/{task}: baseline instances differ from the sequence signature")
    variants = recover_variants(task, doc, canonical, by_id)
    records = []
    usage = _baseline_usage(doc["baseline_trace"])
    positioned = [(canonical.index(o["instance_id"]), o) for o in baseline]
    for pos, o, v, vp in _with_variant_positions(positioned, variants):
        records.append(_record(task, system, "stateless", 0, pos, o, v, vp, usage.get(o["instance_id"])))
    for rt in doc["run_traces"]:
        trace = rt["trace"]
        k = int(rt.get("run_index", trace.get("execution", {}).get("run_index", 0)))
        outcomes = trace["result"]["instance_outcomes"]
        if sorted(o["instance_id"] for o in outcomes) != sorted(canonical):
            raise ValueError(f"{system}/{task}: rollout {k} is not a permutation of the schedule")
        usage = _rollout_usage(trace)
        positioned = [(int(o["instance_index"]), o) for o in outcomes]
        for pos, o, v, vp in _with_variant_positions(positioned, variants):
            records.append(_record(task, system, "stateful", k, pos, o, v, vp, usage[pos] if usage else None))
    params = {
        "env_id": f"{SOURCE_KIND}/{task}",
        "env_version": None,
        "clbench_counterpart": COUNTERPARTS.get(task),
        "r_max": R_MAX.get(task),
        "instances": len(canonical),
        "schedule": summary.get("schedule") or "default",
        "variants": describe_variants(canonical, variants),
        "rollouts": len(doc["run_traces"]),
        "run_mode": summary.get("run_mode"),
        "upstream_params": (summary.get("task") or {}).get("params"),
    }
    return records, params


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
    for path in sorted(system_dir.glob("*.json.gz")):
        task = path.name[: -len(".json.gz")]
        recs, p = convert_task(task, read_artifact(path), system)
        records += recs
        params[task] = p
    summary_only = _summary_only(read_manifest(system_dir), set(params))
    for task, info in summary_only.items():
        params[task] = {"env_id": f"{SOURCE_KIND}/{task}", "env_version": None,
                        "clbench_counterpart": COUNTERPARTS.get(task), "r_max": R_MAX.get(task),
                        "instances": None, "schedule": "default", "variants": [], "summary_only": True}
    return records, params, summary_only


def _references(systems: dict[str, Path], converted: dict, reference_system: str) -> dict[str, dict]:
    """task -> external reference sums E (upstream and clbench scoring) from the reference system."""
    if reference_system in converted:
        sums = _baseline_sums(converted[reference_system][0])
    else:
        ref_dir = next((d.parent / reference_system for d in systems.values()
                        if (d.parent / reference_system).is_dir()), None)
        if ref_dir is None:
            raise ValueError(f"reference system {reference_system!r} not found beside {sorted(systems)}; "
                             f"the external reference of normalized reward is its baseline")
        sums = _baseline_sums(convert_system(ref_dir)[0])
    for task, value in PUBLISHED_EXTERNAL.items():
        sums.setdefault(task, {"upstream": value, "clbench": value})
    return sums


def _instance_count(task: str, systems: dict[str, Path]) -> int | None:
    """A task's schedule length from any sibling system's artifact (for headline-only tasks)."""
    for root in {d.parent for d in systems.values()}:
        for path in sorted(root.glob(f"*/{task}.json.gz")):
            doc = read_artifact(path)
            return len(doc["baseline_trace"]["result"]["instance_outcomes"])
    return None


def _system_info(system: str, manifest: dict) -> dict:
    return {"name": system, "display_name": DISPLAY_NAMES.get(system, system),
            "agent": manifest.get("system") or system, "system_args": manifest.get("system_args"),
            "upstream_run_group_id": manifest.get("run_group_id")}


def import_upstream(path: str | Path, out: str | Path, reference_system: str = REFERENCE_SYSTEM,
                    force: bool = False) -> list[Path]:
    """Convert upstream result files into one clbench run directory per system under `out`."""
    systems = system_dirs(path)
    out = Path(out)
    for system in systems:
        target = out / system
        if target.exists() and not force:
            raise ValueError(f"{target} exists; pass --force to replace it")
        if target.exists() and (load_metadata(target).get("source") or {}).get("kind") != SOURCE_KIND:
            raise ValueError(f"{target} exists and is not an upstream import; not replacing it")
    converted = {name: convert_system(d) for name, d in systems.items()}
    refs = _references(systems, converted, reference_system)
    sizes = {t: p["instances"] for _, params, _ in converted.values() for t, p in params.items() if p["instances"]}
    for _, params, _ in converted.values():
        for task in params:
            if task not in sizes:
                sizes[task] = _instance_count(task, systems)
    written = []
    for system, (records, params, summary_only) in converted.items():
        for task, p in params.items():
            if p["r_max"] is None:
                raise ValueError(f"{system}/{task}: no published r_max for this task (known: {sorted(R_MAX)})")
            if task not in refs or not sizes.get(task):
                raise ValueError(f"{system}/{task}: no external reference or instance count "
                                 f"(no {reference_system} baseline, no other system's artifact)")
            p["instances"] = n = sizes[task]
            p["r_reference"] = refs[task]["clbench"] / n
            p["upstream"] = {"r_external": refs[task]["upstream"], "r_external_clbench": refs[task]["clbench"],
                             "reference_system": reference_system}
        for task, info in summary_only.items():
            if system == reference_system and task in PUBLISHED_EXTERNAL:
                info["baseline_sum"] = PUBLISHED_EXTERNAL[task]
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


# ----------------------------------------------------------------------------- upstream conventions

def is_upstream_import(meta: dict) -> bool:
    return (meta.get("source") or {}).get("kind") == SOURCE_KIND


def _se(values: list[float]) -> float | None:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None


def _published_task(task: str, system: str) -> dict | None:
    p = PUBLISHED_TASKS.get((task, system))
    return {"cumulative_reward": p[0], "se": p[1], "cumulative_gain": p[2]} if p else None


def _task_row(task: str, system: str, params: dict, sums: list[float] | None, baseline: float,
              n: int, source: str) -> dict:
    ext = (params.get("upstream") or {}).get("r_external")
    if ext is None:  # a native clbench run: its per-instance reference, as a sum
        ext = float(params["r_reference"]) * n
    top = float(params["r_max"]) * n
    mean = statistics.fmean(sums) if sums else None
    se = _se(sums) if sums else None
    row = {"task": task, "system": system, "instances": n, "rollouts": len(sums) if sums else None,
           "source": source, "r_max": float(params["r_max"]), "top": top, "r_external": ext,
           "baseline_sum": baseline, "per_rollout": sums,
           "cumulative_reward": {"mean": mean, "se": se}}
    if mean is None:
        return row
    row["cumulative_gain"] = {"mean": mean - baseline, "se": se}
    row["normalized_gain"] = {"mean": (mean - baseline) / (top - baseline),
                              "se": se / (top - baseline) if se is not None else None}
    row["normalized_reward"] = {"mean": (mean - ext) / (top - ext),
                                "se": se / (top - ext) if se is not None else None}
    row["published"] = _published_task(task, system)
    return row


def _summary_row(task: str, system: str, params: dict, info: dict) -> dict:
    """A task known only from its headline: point estimates, no standard errors."""
    n = int(params["instances"])
    row = _task_row(task, system, params, [info["cumulative_reward"]], float(info["baseline_sum"]), n, info["source"])
    row["rollouts"], row["per_rollout"] = None, None
    return row


def _reward_of(rec: dict) -> float:
    return float(rec["upstream_reward"] if rec.get("upstream_reward") is not None else rec["reward"])


def compute_from(records: list[dict], meta: dict) -> dict:
    """Upstream-convention metrics of one run directory's records (see the module docstring)."""
    groups: dict[tuple[str, str], dict] = defaultdict(lambda: {"sf": defaultdict(float), "sl": {}})
    for rec in records:
        g = groups[(rec["task"], rec["system"])]
        if rec["mode"] == "stateless":
            g["sl"][rec["instance_id"]] = _reward_of(rec)
        else:
            g["sf"][int(rec["rollout"])] += _reward_of(rec)
    rows = []
    for (task, system), g in sorted(groups.items()):
        params = meta["tasks"][task]
        if not g["sf"] or not g["sl"]:
            raise ValueError(f"{task}/{system}: needs stateful and stateless records")
        sums = [g["sf"][k] for k in sorted(g["sf"])]
        rows.append(_task_row(task, system, params, sums, sum(g["sl"].values()), len(g["sl"]), "records"))
    systems = sorted(meta.get("systems") or {s for _, s in groups})
    for task, info in ((meta.get("upstream") or {}).get("summary_only") or {}).items():
        params = meta["tasks"][task]
        for system in systems:
            rows.append(_summary_row(task, system, params, info))
    rows.sort(key=lambda r: (r["system"], r["task"]))
    aggregate = {}
    for system in sorted({r["system"] for r in rows}):
        mine = [r for r in rows if r["system"] == system]
        agg = {"tasks": [r["task"] for r in mine]}
        for name in ("normalized_reward", "normalized_gain"):
            agg[name] = statistics.fmean(r[name]["mean"] for r in mine)
        pub = PUBLISHED_AGGREGATE.get(system)
        agg["published"] = {"normalized_reward": round(pub[0] / 100, 4), "normalized_gain": round(pub[1] / 100, 4)} if pub else None
        aggregate[system] = agg
    return {"conventions": "upstream", "tasks": rows, "aggregate": aggregate}


def compute(run_dir: str | Path) -> dict:
    """Upstream-convention metrics of a run directory (an import, or a native clbench run)."""
    return compute_from(load_records(run_dir), load_metadata(run_dir))


def position_paired_cumulative_gain(records: list[dict], task: str, system: str) -> list[float]:
    """Mean over rollouts of the cumulative gain when rollout position p is paired with the
    baseline's canonical position p, as upstream's gain curves do; with permuted rollouts this
    pairs different instances (the final value, a sum, is unaffected)."""
    sl = {int(r["position"]): float(r["reward"]) for r in records
          if r["task"] == task and r["system"] == system and r["mode"] == "stateless"}
    per: dict[int, dict[int, float]] = defaultdict(dict)
    for r in records:
        if r["task"] == task and r["system"] == system and r["mode"] == "stateful":
            p = int(r["position"])
            per[int(r["rollout"])][p] = float(r["reward"]) - sl[p]
    n = max(len(v) for v in per.values())
    curves = []
    for k in sorted(per):
        total, curve = 0.0, []
        for p in range(n):
            total += per[k].get(p, 0.0)
            curve.append(total)
        curves.append(curve)
    return [statistics.fmean(c[p] for c in curves) for p in range(n)]
