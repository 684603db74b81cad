"""CodeRepair-v6 fresh worlds played in full (bwrap): the reference stateful, frozen before the drift,
and stateless, per world; one JSON file per world with every issue's outcome.

`python benchmarks/coderepair_play_worlds.py OUT_DIR 1-20 [stateful,frozen,stateless]` plays the
passes named (default all three) of each world not yet in OUT_DIR, rollout seed 0 (the order
`clbench drift-check --rollouts 1` plays). The frozen pass starts from the stateful pass's agent
state at the drift and plays only the issues after it (before the drift a frozen agent plays as the
unfrozen one does, so drift-check's first half is the stateful pass's). `... summary OUT_DIR`
prints per world and over worlds: r_reference played and computed (envs/coderepair/worlds.py), the
stateful mean, the normalized gain (stateful - stateless) / (r_max - stateless) with r_max 1.0, and
the drift cost (mean over the issues after the drift of unfrozen - frozen).
"""
from __future__ import annotations

import copy
import json
import statistics
import sys
import time
from pathlib import Path

import clbench  # noqa: F401
from clbench.agent import make_agent
from clbench.commands.drift_check import declared_drifts
from clbench.commands.worlds import parse_seeds
from clbench.runner import play_instance

ENV = "clbench/CodeRepair-v6"


def _row(out: dict, info: dict) -> dict:
    return {"id": info["instance_id"], "position": info["position"], "reward": out["reward"],
            "solved": out["solved"], "steps": out["steps"], "error": out["error"],
            "met": (out.get("details") or {}).get("conventions_met", [])}


def play_world(seed: int, passes: tuple[str, ...], partial: Path | None = None) -> dict:
    """The passes of one world; after each, what is played so far is written to `partial` (if given)."""
    import gymnasium as gym

    env = gym.make(ENV, backend="bwrap", world_seed=seed)
    base = env.unwrapped
    result = {"world": seed, "passes": {}}
    try:
        drift = base.schedule.variant_starts()[declared_drifts(env)[0]["variant"]]
        result["drift_position"] = drift
        obs, info = env.reset(seed=0)
        order = [s.instance.instance_id for s in base.order]
        if "stateful" in passes or "frozen" in passes:
            agent, rows, snapshot = make_agent("reference", env), [], None
            start = time.perf_counter()
            for pos in range(len(order)):
                if pos:
                    obs, info = env.reset()
                if pos == drift:
                    snapshot = copy.deepcopy(agent.state_dict())
                rows.append(_row(play_instance(env, agent, obs, info, []), info))
            result["passes"]["stateful"] = {"rows": rows, "seconds": time.perf_counter() - start}
            _save(partial, result)
            if "frozen" in passes:
                agent, rows = make_agent("reference", env, freeze_at=drift), []
                agent.load_state_dict(snapshot)
                start = time.perf_counter()
                for iid in order[drift:]:
                    obs, info = env.reset(options={"instance": iid})
                    rows.append(_row(play_instance(env, agent, obs, info, []), info))
                result["passes"]["frozen"] = {"rows": rows, "seconds": time.perf_counter() - start}
                _save(partial, result)
        if "stateless" in passes:
            rows, start = [], time.perf_counter()
            for iid in order:
                obs, info = env.reset(options={"instance": iid, "stateless": True})
                rows.append(_row(play_instance(env, make_agent("reference", env), obs, info, []), info))
            result["passes"]["stateless"] = {"rows": rows, "seconds": time.perf_counter() - start}
    finally:
        env.close()
    return result


def _save(path: Path | None, data: dict) -> None:
    if path is not None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.rename(path)


def summary(out_dir: Path) -> list[dict]:
    from clbench.envs.coderepair.coderepair_env import CodeRepairEnv
    from clbench.envs.coderepair.worlds import REFERENCE_OUTCOMES, family_means

    table = []
    for path in sorted(out_dir.glob("world-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        data = json.loads(path.read_text())
        p = data["passes"]
        mean = {k: statistics.mean(r["reward"] for r in v["rows"]) for k, v in p.items()}
        computed = family_means(CodeRepairEnv(backend="bwrap", world_seed=data["world"]), REFERENCE_OUTCOMES)["reference"]
        row = {"world": data["world"], "computed_r_reference": computed,
               "played_r_reference": mean.get("stateless"), "stateful": mean.get("stateful")}
        if "stateful" in p:
            sl = mean.get("stateless", computed)
            row["gain"] = (mean["stateful"] - sl) / (1.0 - sl)
            row["gain_from"] = "played" if "stateless" in p else "computed r_reference"
        if "frozen" in p and "stateful" in p:
            after = {r["id"]: r["reward"] for r in p["stateful"]["rows"] if r["position"] >= data["drift_position"]}
            frozen = {r["id"]: r["reward"] for r in p["frozen"]["rows"]}
            row["drift_cost"] = statistics.mean(after[i] - frozen[i] for i in after)
            row["frozen_resolved"] = sum(r["solved"] for r in p["frozen"]["rows"])
        if "stateless" in p:
            row["stateless_diff"] = [f"{r['id']}: played {r['reward']:.4f} steps {r['steps']} solved {r['solved']}"
                                     for r in p["stateless"]["rows"]
                                     if bool(r["solved"]) != (r["id"] in REFERENCE_OUTCOMES)
                                     or (r["solved"] and r["steps"] != REFERENCE_OUTCOMES[r["id"]].steps)]
        row["seconds"] = {k: round(v["seconds"]) for k, v in p.items()}
        table.append(row)
        print(json.dumps(row))
    for key in ("computed_r_reference", "played_r_reference", "stateful", "gain", "drift_cost"):
        vals = [r[key] for r in table if r.get(key) is not None]
        if vals:
            print(f"{key}: mean {statistics.mean(vals):.4f} range [{min(vals):.4f}, {max(vals):.4f}] over {len(vals)} worlds")
    return table


if __name__ == "__main__":
    out = Path(sys.argv[2] if sys.argv[1] == "summary" else sys.argv[1])
    if sys.argv[1] == "summary":
        summary(out)
        sys.exit(0)
    out.mkdir(parents=True, exist_ok=True)
    passes = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else ("stateful", "frozen", "stateless")
    for seed in parse_seeds(sys.argv[2]):
        path = out / f"world-{seed}.json"
        if path.exists():
            continue
        start = time.perf_counter()
        partial = out / f"partial-world-{seed}.json"
        _save(path, play_world(seed, passes, partial))
        partial.unlink(missing_ok=True)
        print(f"world {seed}: {time.perf_counter() - start:.0f} s", flush=True)
