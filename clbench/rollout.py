"""One evaluation: an agent on an env, stateful and/or stateless, into a run directory."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from clbench.results import read_json, write_json_atomic
from clbench.runcard import merge_metadata, task_params, write_run_card
from clbench.runner import RunConfig, config_dict, execute, existing_keys, make_env, plan_jobs


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def record_config(out: Path, cfg: RunConfig) -> dict:
    """config.json lists every (task, system) run that wrote into this directory."""
    path = out / "config.json"
    conf = read_json(path) if path.exists() else {"format": 1, "runs": []}
    entry = config_dict(cfg)
    conf["runs"] = [r for r in conf["runs"] if not (r["env_id"] == cfg.env_id and r["system"] == cfg.system)]
    conf["runs"].append(entry)
    write_json_atomic(path, conf)
    return conf


def run(cfg: RunConfig, say: Callable[[str], None] = _say, resume: bool = False) -> dict:
    """Play the planned jobs, then write and return the run card."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    env = make_env(cfg.env_id, **cfg.env_kwargs)
    try:
        base = env.unwrapped
        task = base.task
        instance_ids = [s.instance_id for s in base.schedule.order(0)]
        params = task_params(env)
    finally:
        env.close()
    merge_metadata(out, task, params, {"name": cfg.system, "agent": cfg.agent, "agent_kwargs": cfg.agent_kwargs})
    conf = record_config(out, cfg)
    done = existing_keys(out, task, cfg.system) if resume else set()
    jobs = plan_jobs(cfg, instance_ids, done)
    say(f"{cfg.env_id}: {len(instance_ids)} instances, {cfg.rollouts if cfg.mode != 'stateless' else 0} stateful "
        f"rollouts, mode {cfg.mode}, {len(jobs)} jobs on {cfg.workers} workers -> {out}")

    def on_done(job, records, error):
        if error:
            say(f"  FAILED {job.mode} rollout {job.rollout}: {error}")
            return
        mean = sum(r["reward"] for r in records) / max(1, len(records))
        what = f"rollout {job.rollout}" if job.mode == "stateful" else f"{len(records)} instances"
        say(f"  done {job.mode} {what}: mean reward {mean:.3f}")

    errors = execute(jobs, cfg.workers, on_done)
    if errors:
        raise RuntimeError(f"{len(errors)} job(s) failed: " + "; ".join(errors[:3]))
    if cfg.mode != "both" and not resume:
        return {}
    return write_run_card(out, conf)
