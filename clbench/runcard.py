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

import clbench
from clbench import metrics
from clbench.results import RESULTS_FILE, load_metadata, load_records, replaced_costs

RUN_CARD_FORMAT = "clbench.run_card/1"


@cache
def run_card_schema() -> dict:
    return json.loads((importlib.resources.files("clbench") / "schemas" / "run_card.schema.json").read_text())


@cache
def _validator():
    """One validator per process. The schema ships with clbench and is checked by the tests, not at
    every start (checking it was most of a short run's validation, and a third of its run card)."""
    import jsonschema

    base = jsonschema.validators.validator_for(run_card_schema())
    return jsonschema.validators.extend(base, {"items": _items(base.VALIDATORS["items"])})(run_card_schema())


#: Python types of JSON values as json.loads returns them (bool is neither a number nor an integer)
_PLAIN = {"number": (int, float), "integer": (int,), "null": (type(None),), "string": (str,), "boolean": (bool,)}


def _items(general):
    """The "items" keyword with a fast path: an array whose items need only a type, every item of
    exactly such a type (the curves: thousands of numbers, each otherwise validated through the
    whole machinery, were most of a validation). Anything else, failures included, goes to
    `general`, so errors read the same."""
    def items(validator, schema_items, instance, schema):
        if isinstance(instance, list) and isinstance(schema_items, dict) and schema_items.keys() == {"type"}:
            names = schema_items["type"]
            ok = tuple(t for name in ([names] if isinstance(names, str) else names) for t in _PLAIN.get(name, ()))
            if set(map(type, instance)).issubset(ok):  # the types present, collected in C
                return
        yield from general(validator, schema_items, instance, schema)
    return items


@cache
def git_sha() -> str | None:
    """The clbench source checkout's commit, when running from one (asked once per process: a
    subprocess per metadata write was a visible share of a short run)."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def task_params(env, baselines_undefined: str | None = None) -> dict:
    """What metadata.json records about a task: its id and version, its world (world seed, world
    key, split), its baselines and where they come from, its schedule and unit."""
    base = env.unwrapped
    spec = env.spec
    world = {"world_seed": base.world_seed, "world": base.world_key, "split": base.split,
             "baselines": "default.yaml" if base.baselines_from_spec else "calibration cache"}
    if baselines_undefined and not base.calibrated:
        world["baselines_undefined"] = baselines_undefined
    return {**world,
        "env_id": base.env_id,
        "env_version": spec.version if spec is not None else None,
        "r_max": base.r_max,
        "r_reference": base.r_reference,
        "instances": len(base.schedule),
        "schedule": base.schedule.name,
        "variants": base.schedule.describe(),
        # a noisy oracle score (Poker) comes with its standard error, the world's own; units label every report
        **({"r_max_se": base.r_max_se} if base.r_max_se is not None else {}),
        # rollout seed s plays deal s % deals: the bootstrap pairs rollout k with stateless pass k
        **({"deals": base.deals} if base.deals > 1 else {}),
        "reward_unit": base.reward_unit,
    }


def provenance() -> dict:
    return {
        "clbench_version": clbench.__version__,
        "git_sha": git_sha(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


#: the newest result of `compute`, keyed by the run directory's files as they were read: a
#: rollout writes its run card and prints the same metrics, and the bootstrap is the cost
_LAST: dict = {}


def _files_key(run_dir: Path, window, n_boot) -> tuple:
    stats = []
    for name in (RESULTS_FILE, "metadata.json"):
        try:
            st = (run_dir / name).stat()
            stats.append((st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            stats.append(None)
    return (str(run_dir.resolve()), tuple(stats), window, n_boot)


def compute(run_dir: str | Path, window: float | None = None, n_boot: int | None = None,
            records: list[dict] | None = None) -> dict:
    """clbench.metrics.compute on a run directory: its metadata and records, read once (`records`:
    the directory's records when the caller has just read them).

    The result is read-only for callers: an unchanged run directory returns the same object."""
    key = _files_key(Path(run_dir), window, n_boot)
    if _LAST.get("key") == key:
        return _LAST["result"]
    meta = load_metadata(run_dir)
    replaced: list[dict] | None = None
    if records is None:
        replaced = []
        records = load_records(run_dir, replaced)
    result = metrics.compute(records, meta, window=window, n_boot=n_boot)
    if any((t.get("usage") or {}).get("cost") is not None for t in result["tasks"]):  # paid calls: count retries
        if replaced is None:  # the caller's records do not tell what they replaced
            replaced = []
            load_records(run_dir, replaced)
        spent = replaced_costs(replaced)
        for t in result["tasks"]:
            if spent.get((t["task"], t["system"])):
                t["usage"]["replaced_cost"] = spent[(t["task"], t["system"])]
    _LAST.clear()
    _LAST.update(key=key, result=result)
    return result


def _stateless_plan(config: dict | None, params: dict, t: dict) -> dict:
    """What the run card says about the stateless side: passes played and why that many."""
    from clbench.runner import RunConfig, stateless_plan

    for entry in (config or {}).get("runs", []):
        if entry.get("env_id") == params.get("env_id") and entry.get("system") == t["system"]:
            try:
                plan = stateless_plan(RunConfig(**entry))
            except Exception as exc:  # an env no longer registered: the records still tell the count
                plan = {"reason": f"unknown ({type(exc).__name__})"}
            return {"stateless_plan": {**plan, "passes": t["stateless_passes"]}}
    return {"stateless_plan": {"passes": t["stateless_passes"], "reason": "from the records"}}


def build_run_card(run_dir: str | Path, config: dict | None = None, records: list[dict] | None = None) -> dict:
    result = compute(run_dir, records=records)
    meta = result["metadata"]
    card = {
        "format": RUN_CARD_FORMAT,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "provenance": meta.get("provenance") or provenance(),
        "config": config or {},
        "systems": meta.get("systems", {}),
        "tasks": {f"{t['task']}/{t['system']}": {**t, "params": meta["tasks"][t["task"]],
                                                 **_stateless_plan(config, meta["tasks"][t["task"]], t)}
                  for t in result["tasks"]},
        "aggregate": result["aggregate"],
    }
    _validator().validate(json_values(card))
    return card


#: types json.loads returns as they are
_JSON_SCALARS = frozenset((str, int, float, bool, type(None)))


def json_values(obj):
    """`json.loads(json.dumps(obj, default=float))`: what a card reads back as, to validate, without
    writing and parsing its every number (that round trip cost more than the validation). Plain
    dicts with string keys and lists are walked (a list of plain values is used as it is: nothing
    changes it); anything else makes the round trip itself."""
    kind = type(obj)
    if kind in _JSON_SCALARS:
        return obj
    if kind is dict and all(type(k) is str for k in obj):
        return {k: json_values(v) for k, v in obj.items()}
    if kind is list or kind is tuple:
        if _JSON_SCALARS.issuperset(map(type, obj)):
            return obj if kind is list else list(obj)
        return [json_values(v) for v in obj]
    return json.loads(json.dumps(obj, default=float))


def write_run_card(run_dir: str | Path, config: dict | None = None) -> dict:
    from clbench.run_dir import RunDirectory

    card = build_run_card(run_dir, config)
    RunDirectory(run_dir).write_run_card(card)
    return card


def validate_run_card(path: str | Path) -> None:
    _validator().validate(json.loads(Path(path).read_text()))
