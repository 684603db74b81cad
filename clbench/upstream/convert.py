"""One upstream task document -> clbench records: scoring, variants, usage and costs.

Task-specific rules (how a reward is read or rescored, how variants are recovered) come from the
task's `UpstreamTask` (clbench.envs.<domain>.upstream); this module only applies them.
"""
from __future__ import annotations

from collections import defaultdict

from clbench.results import RECORD_FORMAT
from clbench.upstream import mappings
from clbench.upstream.artifacts import SOURCE_KIND


# ----------------------------------------------------------------------------- scoring

def upstream_reward(task: str, outcome: dict) -> float:
    """The instance reward as upstream scored it (what the paper's numbers use)."""
    t = mappings.get(task)
    if t is not None and t.upstream_reward is not None:
        value = t.upstream_reward(outcome)
        if value is not None:
            return value
    return float(outcome["reward"])


def clbench_reward(task: str, outcome: dict) -> tuple[float, str]:
    """clbench's scoring of an upstream outcome and where it came from."""
    t = mappings.get(task)
    if t is not None and t.clbench_reward is not None:
        value = t.clbench_reward(outcome)
        if value is not None:
            return value, t.clbench_reward_source
    return upstream_reward(task, outcome), "upstream"


# ----------------------------------------------------------------------------- variants

def recover_variants(task: str, doc: dict, canonical: list[str], outcomes: dict[str, dict]) -> dict[str, str]:
    """instance_id -> variant; one variant `all` when the rule fails or blocks are not contiguous."""
    t = mappings.get(task)
    rule = t.variant if t is not None else None
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


# ----------------------------------------------------------------------------- usage

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


# ----------------------------------------------------------------------------- records

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


def task_params(task: str) -> dict:
    """The parameters every imported task carries, from its mapping (None where there is none)."""
    t = mappings.get(task)
    return {"env_id": f"{SOURCE_KIND}/{task}", "env_version": None,
            "clbench_counterpart": t.env_id if t else None, "r_max": t.r_max if t else None}


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
        **task_params(task),
        "instances": len(canonical),
        "schedule": summary.get("schedule") or "default",
        "variants": describe_variants(canonical, variants),
        "rollouts": len(doc["run_traces"]),
        "run_mode": summary.get("run_mode"),
        "upstream_params": (summary.get("task") or {}).get("params"),
    }
    return records, params
