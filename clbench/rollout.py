"""Evaluations: agents on envs, stateful and/or stateless, into one run directory.

`run_many` plans the jobs of several (env, system) configurations, runs them together on one
executor (so tasks, rollouts and the stateless pass share the workers), then writes the run
card. `resume_run(dir)` continues an interrupted run from its config.json.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from clbench.calibration import ensure_baselines, world_label
from clbench.executors import execute
from clbench.locking import run_directory_writer
from clbench.progress import RunProgress
from clbench.results import read_json, write_json_atomic
from clbench.runcard import merge_metadata, task_params, write_run_card
from clbench.runner import RunConfig, cached_env, config_dict, plan_jobs


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def record_config(out: Path, cfgs: list[RunConfig], executor: str) -> dict:
    """config.json lists every (env, system) run that wrote into this directory."""
    path = out / "config.json"
    conf = read_json(path) if path.exists() else {"format": 1, "runs": []}
    for cfg in cfgs:
        conf["runs"] = [r for r in conf["runs"] if not (r["env_id"] == cfg.env_id and r["system"] == cfg.system)]
        conf["runs"].append(config_dict(cfg))
    conf["executor"] = executor
    write_json_atomic(path, conf)
    return conf


def run_many(cfgs: list[RunConfig], say: Callable[[str], None] = _say, resume: bool = False,
             executor: str = "local", ray_address: str | None = None, quiet: bool = False) -> dict:
    """Play every configuration's jobs and return the run card (empty without both modes)."""
    if not cfgs:
        raise ValueError("nothing to run")
    outs = {cfg.out for cfg in cfgs}
    if len(outs) != 1:
        raise ValueError(f"all configurations must write into one run directory, got {sorted(outs)}")
    out = Path(cfgs[0].out)
    out.mkdir(parents=True, exist_ok=True)
    if executor == "ray" and ray_address:
        from clbench.executors import check_ray_address

        check_ray_address(ray_address)  # before any work: a dead address fails in one line
    with run_directory_writer(out):
        return _run_many(cfgs, out, say, resume, executor, ray_address, quiet)


def _run_many(cfgs, out: Path, say, resume: bool, executor: str, ray_address, quiet: bool) -> dict:
    jobs, expected = [], {}
    for cfg in cfgs:
        env = cached_env(cfg.env_id, cfg.env_kwargs)
        base = env.unwrapped
        if not base.calibrated and not base.baselines_from_spec and not quiet:
            say(f"{cfg.env_id}: {world_label(base)} has no r_max / r_reference yet" +
                (": calibrating it (oracle and stateless reference)" if cfg.calibrate else ""))
        undefined = ensure_baselines(env, cfg.env_kwargs, cfg.calibrate)
        merge_metadata(out, base.task, task_params(env, undefined),
                       {"name": cfg.system, "agent": cfg.agent, "agent_kwargs": cfg.agent_kwargs})
        check_shocks(cfg.shocks, len(base.schedule), cfg.env_id)
        planned = plan_jobs(cfg, base.task, base.schedule, resumable=base.resumable, resume=resume)
        jobs += planned
        for job in planned:
            key = (base.task, cfg.system, job.mode, job.rollout)
            expected[key] = expected.get(key, 0) + job.remaining
        if not quiet:
            say(f"{cfg.env_id} / {cfg.system}: {len(base.schedule)} instances, mode {cfg.mode}, "
                f"{sum(j.config is cfg for j in planned)} jobs" + (" (resumed)" if resume else ""))
    conf = record_config(out, cfgs, executor)
    workers = max(cfg.workers for cfg in cfgs)
    if not quiet:
        say(f"running {len(jobs)} jobs on {workers} {executor} workers -> {out}")

    failures = []

    def on_done(job, records, error):
        if error:
            failures.append(error)
            say(f"  FAILED {error}")

    # longest first: stateful rollouts of the biggest schedules keep the workers busy
    jobs.sort(key=lambda j: -j.remaining)
    with RunProgress(out, expected, quiet=quiet):
        execute(jobs, workers, on_done, executor=executor, ray_address=ray_address)
    if failures:
        raise RuntimeError(f"{len(failures)} job(s) failed: " + "; ".join(failures[:3]) +
                           f" (finished instances are saved; continue with --resume {out})")
    if not any(cfg.mode == "both" for cfg in cfgs):  # resumed runs carry their modes in cfgs too
        return {}
    return write_run_card(out, conf)


def check_shocks(shocks: list[str], instances: int, env_id: str) -> None:
    """Every shock parses and falls inside the schedule (a shock past its end would never apply)."""
    from clbench.shocks import parse_shock

    for text in shocks or []:
        shock = parse_shock(text)
        if not 0 <= shock.position < instances:
            raise ValueError(f"shock {text!r}: position {shock.position} is outside {env_id}'s schedule "
                             f"(positions 0 to {instances - 1})")


def run(cfg: RunConfig, say: Callable[[str], None] = _say, resume: bool = False, **kwargs) -> dict:
    return run_many([cfg], say=say, resume=resume, **kwargs)


def configs_from_dir(run_dir: str | Path) -> tuple[list[RunConfig], str]:
    conf = read_json(Path(run_dir) / "config.json")
    cfgs = []
    for entry in conf.get("runs", []):
        entry = dict(entry, out=str(run_dir))
        cfgs.append(RunConfig(**entry))
    if not cfgs:
        raise ValueError(f"{run_dir}/config.json lists no runs")
    return cfgs, conf.get("executor", "local")


def resume_run(run_dir: str | Path, **kwargs) -> dict:
    cfgs, executor = configs_from_dir(run_dir)
    kwargs.setdefault("executor", executor)
    return run_many(cfgs, resume=True, **kwargs)
