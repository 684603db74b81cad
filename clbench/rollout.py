"""Evaluations: agents on envs, stateful and/or stateless, into one run directory.

`run_many` plans the jobs of several (env, system) configurations, runs them together on one
executor (so tasks, rollouts and the stateless pass share the workers), then writes the run
card. `resume_run(dir)` continues an interrupted run from its config.json (and plays errored
instances again). The error policy (clbench.error_policy) stops a run whose model calls keep
failing, or whose instances keep being scored on faulty model replies (refusals, cut-offs); a run
that ends with errored instances, or was stopped, raises `RunIncomplete` after writing what it has.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from clbench.calibration import ensure_baselines, world_label
from clbench.error_policy import ErrorPolicy
from clbench.executors import execute
from clbench.progress import RunProgress
from clbench.registry import env_class
from clbench.run_dir import RunDirectory
from clbench.runcard import build_run_card, provenance, task_params
from clbench.runner import Job, RunConfig, cached_env, config_dict, make_agent, plan_jobs


class RunIncomplete(RuntimeError):
    """The run ended with instances lost to infrastructure errors, or was stopped for them or (`faulty`)
    for too many instances scored on faulty model replies."""

    def __init__(self, message: str, card: dict | None = None, errored: int = 0, stopped: str | None = None,
                 faulty: bool = False):
        super().__init__(message)
        self.card, self.errored, self.stopped, self.faulty = card, errored, stopped, faulty


def agent_settings(cfg: RunConfig, env) -> dict:
    """What the agent says shapes its results (`settings()`, e.g. the LLM agent's model, sampling,
    context budget, prompt hash and price source), for metadata and the run card."""
    from clbench.runner import agent_class

    try:
        if not callable(getattr(agent_class(cfg.env_id, cfg.agent), "settings", None)):
            return {}  # most agents have none: not built twice for nothing
        agent = make_agent(cfg.agent, env, seed=cfg.seed, **cfg.agent_kwargs)
    except Exception:  # the run itself reports a broken agent
        return {}
    settings = getattr(agent, "settings", None)
    return settings() if callable(settings) else {}


def count_errored(records: list[dict], cfgs: list[RunConfig]) -> tuple[int, int]:
    """(instances recorded with an infrastructure error, instances recorded) of these configurations."""
    names = {cfg.system for cfg in cfgs}
    recs = [r for r in records if r["system"] in names]
    return [r.get("error_kind") for r in recs].count("infrastructure"), len(recs)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def dearest_first(jobs: list[Job]) -> list[Job]:
    """Jobs in the order to start them: the most work first (instances x the env's `instance_seconds`),
    so the long jobs start at once and the cheap ones fill the workers' tails. Ordered by instances
    alone, a suite started CodeRepair's stateless passes (7 instances of ~10 s each) after Poker's
    (120 of ~1 ms) and one worker idled at the end: the same jobs' record times give 980 s that way
    against 941 s this way, on 2 workers."""
    seconds = {eid: env_class(eid).instance_seconds for eid in {j.config.env_id for j in jobs}}
    return sorted(jobs, key=lambda j: -j.remaining * seconds[j.config.env_id])


def run_many(cfgs: list[RunConfig], say: Callable[[str], None] = _say, resume: bool = False,
             executor: str = "local", ray_address: str | None = None, quiet: bool = False,
             policy: ErrorPolicy | None = None) -> dict:
    """Play every configuration's jobs and return the run card (empty without both modes).

    Raises RunIncomplete (after writing the run card when the metrics can be computed) when
    instances errored on infrastructure or the error policy stopped the run."""
    if not cfgs:
        raise ValueError("nothing to run")
    outs = {cfg.out for cfg in cfgs}
    if len(outs) != 1:
        raise ValueError(f"all configurations must write into one run directory, got {sorted(outs)}")
    if executor == "ray" and ray_address:
        from clbench.executors import check_ray_address

        check_ray_address(ray_address)  # before any work: a dead address fails in one line
    rd = RunDirectory(cfgs[0].out)
    with rd.writer():
        return _run_many(cfgs, rd, say, resume, executor, ray_address, quiet, policy)


def _run_many(cfgs, rd: RunDirectory, say, resume: bool, executor: str, ray_address, quiet: bool,
              policy: ErrorPolicy | None) -> dict:
    out = rd.root
    jobs, expected = [], {}
    for cfg in cfgs:
        env = cached_env(cfg.env_id, cfg.env_kwargs)
        base = env.unwrapped
        check_shocks(cfg.shocks, len(base.schedule), cfg.env_id)  # before any work, calibration included
        if not base.calibrated and not base.baselines_from_spec and not quiet:
            say(f"{cfg.env_id}: {world_label(base)} has no r_max / r_reference yet" +
                (": calibrating it (oracle and stateless reference)" if cfg.calibrate else ""))
        undefined = ensure_baselines(env, cfg.env_kwargs, cfg.calibrate)
        system = {"name": cfg.system, "agent": cfg.agent, "agent_kwargs": cfg.agent_kwargs}
        settings = agent_settings(cfg, env)
        if settings:
            system["settings"] = settings
        rd.merge_metadata(base.task, task_params(env, undefined), system, provenance())
        planned = plan_jobs(cfg, base.task, base.schedule, resumable=base.resumable, resume=resume)
        jobs += planned
        for job in planned:
            key = (base.task, cfg.system, job.mode, job.rollout)
            expected[key] = expected.get(key, 0) + job.remaining
        if not quiet:
            say(f"{cfg.env_id} / {cfg.system}: {len(base.schedule)} instances, mode {cfg.mode}, "
                f"{sum(j.config is cfg for j in planned)} jobs" + (" (resumed)" if resume else ""))
    conf = rd.record_config([config_dict(cfg) for cfg in cfgs], executor)
    workers = max(cfg.workers for cfg in cfgs)
    if not quiet:
        say(f"running {len(jobs)} jobs on {workers} {executor} workers -> {out}")

    failures = []
    # a directory without records yet: what the jobs return is all it will hold (no second parse)
    played: list[dict] | None = None if resume or rd.results.exists() else []

    def on_done(job, records, error):
        if error:
            failures.append(error)
            say(f"  FAILED {error}")
        elif played is not None:
            played.extend(records)

    policy = policy or ErrorPolicy()
    policy.planned, policy.out = sum(expected.values()), str(out)
    if not quiet:
        say(f"error policy: {policy.describe()} (--fail-on-error, --max-consecutive-errors, --fail-on-fault, "
            "--max-consecutive-faults)")

    def stop(reason: str) -> None:
        rd.request_stop(reason)
        say(f"STOPPING: {reason}")

    jobs = dearest_first(jobs)
    with RunProgress(out, expected, quiet=quiet, policy=policy, on_stop=stop) as progress:
        execute(jobs, workers, on_done, executor=executor, ray_address=ray_address, poll=progress.poll)
    rd.clear_stop()
    if failures:
        raise RuntimeError(f"{len(failures)} job(s) failed: " + "; ".join(failures[:3]) +
                           f" (finished instances are saved; continue with --resume {out})")
    records = rd.records(played)  # read once: the error count and the run card
    errored, recorded = count_errored(records, cfgs)
    if not quiet:
        size, n = rd.transcript_bytes()
        if n:
            say(f"transcripts: {size:,} bytes for {n} instances ({size / n:,.0f} bytes per instance) in "
                f"{out / 'transcripts'}; read them with `clbench view {out}`")
    card: dict = {}
    if any(cfg.mode == "both" for cfg in cfgs):  # resumed runs carry their modes in cfgs too
        try:
            card = build_run_card(out, conf, records=records)
            rd.write_run_card(card)
        except ValueError as exc:  # a stopped run may lack whole instances: no metrics to write
            if not (errored or policy.reason):
                raise
            say(f"run card not written: {exc}")
    if policy.faulty:
        also = f"; {errored} of {recorded} recorded instances also errored on model calls" if errored else ""
        raise RunIncomplete(f"STOPPED run (model faults): {policy.faulted} of {policy.finished} instances played in "
                            f"this session were scored on faulty model replies{also}. They are kept and scored "
                            f"(records in {out}/results.jsonl), but the metrics measure the faults, not the agent. "
                            f"Fix the cause (model, max_tokens, prompts, the endpoint's filter) and start a new run, "
                            f"or finish this one as it is with `clbench rollout --resume {out} --fail-on-fault off`",
                            card, errored, policy.reason, faulty=True)
    if errored or policy.reason:
        planned = policy.planned
        what = f"stopped by the error policy: {policy.reason}" if policy.reason else "finished"
        raise RunIncomplete(f"INCOMPLETE run ({what}): {errored} of {recorded} recorded instances errored on "
                            f"model calls ({planned} planned in this session); metrics over them are undefined. "
                            f"Fix the cause, then re-play the errored and unplayed instances with "
                            f"`clbench rollout --resume {out}`", card, errored, policy.reason)
    return card


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
    conf = RunDirectory(run_dir).config()
    cfgs = [RunConfig(**dict(entry, out=str(run_dir))) for entry in conf.get("runs", [])]
    if not cfgs:
        raise ValueError(f"{run_dir}/config.json lists no runs")
    return cfgs, conf.get("executor", "local")


def resume_run(run_dir: str | Path, **kwargs) -> dict:
    cfgs, executor = configs_from_dir(run_dir)
    kwargs.setdefault("executor", executor)
    return run_many(cfgs, resume=True, **kwargs)
