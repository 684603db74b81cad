"""The runner: stateful rollouts and the stateless pass, in parallel, written as they finish.

Jobs are independent units of work: one stateful rollout (the agent object lives through the
whole schedule; a stateful stream never runs in parallel with itself) or one chunk of the
stateless pass (each instance played by a fresh agent on an env jumped to that instance with
`stateless=True`). Jobs run on a spawn process pool (`workers`), inline for workers=1.
Every finished instance is appended to results.jsonl at once, with its step trajectory.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import gymnasium as gym

from clbench.agent import make_agent
from clbench.results import RESULTS_FILE, RECORD_FORMAT, append_lines, record_key, trajectory_path


@dataclass
class RunConfig:
    env_id: str
    agent: str
    out: str
    system: str = ""
    rollouts: int = 5
    mode: str = "both"  # both | stateful | stateless
    seed: int = 0
    workers: int = 1
    env_kwargs: dict = field(default_factory=dict)
    agent_kwargs: dict = field(default_factory=dict)
    stateless_chunk: int = 0  # instances per stateless job; 0 = balance over workers

    def __post_init__(self):
        if self.mode not in ("both", "stateful", "stateless"):
            raise ValueError(f"mode must be both, stateful or stateless, not {self.mode!r}")
        if self.rollouts < 1 and self.mode != "stateless":
            raise ValueError("rollouts must be >= 1")
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.seed < 0:
            raise ValueError("seed must be >= 0")
        self.system = self.system or self.agent


@dataclass
class Job:
    config: RunConfig
    mode: str
    rollout: int
    instance_ids: list[str] | None = None  # stateless jobs
    done_keys: frozenset = frozenset()  # (mode, rollout, instance_id) already in results


def make_env(env_id: str, **kwargs):
    import clbench  # noqa: F401  registers the envs in spawned workers

    return gym.make(env_id, **kwargs)


def task_of(env) -> str:
    return env.unwrapped.task


def play_instance(env, agent, obs: str, info: dict, traj: list[dict]) -> dict:
    """Play one instance to its end; agent errors end it with reward 0 and the error kept."""
    start = time.perf_counter()
    error = None
    reward, steps, truncated = 0.0, 0, False
    final_info = dict(info)
    traj.append({"event": "reset", "instance_id": info["instance_id"], "position": info["position"],
                 "observation": obs})
    try:
        agent.begin_instance(obs, info)
        while True:
            action = agent.act(obs, info)
            obs, reward, terminated, truncated, info = env.step(action)
            steps += 1
            final_info = info
            traj.append({"event": "step", "step": steps, "action": action, "observation": obs,
                         "reward": reward, "terminated": terminated, "truncated": truncated})
            if terminated or truncated:
                break
        agent.end_instance(reward, final_info)
    except Exception as exc:  # a crashing agent loses the instance, not the run
        error = f"{type(exc).__name__}: {exc}"
        traj.append({"event": "error", "error": error, "traceback": traceback.format_exc(limit=8)})
        reward = 0.0
    usage = agent.pop_usage()
    if usage is not None and usage.errors:
        error = error or "; ".join(usage.errors[:3])
    raw = final_info.get("raw_metric") or {"name": "reward", "value": reward}
    return {
        "reward": float(final_info.get("instance_reward", reward) if error is None else 0.0),
        "raw_metric": raw,
        "solved": bool(final_info.get("solved", False)) if error is None else False,
        "steps": steps,
        "truncated": bool(truncated),
        "wall_time": round(time.perf_counter() - start, 6),
        "tokens": usage.tokens() if usage is not None else None,
        "calls": usage.calls if usage is not None else None,
        "cost": usage.cost if usage is not None else None,
        "error": error,
    }


def _record(job: Job, env, info: dict, outcome: dict) -> dict:
    cfg = job.config
    return {
        "format": RECORD_FORMAT,
        "task": task_of(env),
        "env_id": cfg.env_id,
        "system": cfg.system,
        "mode": job.mode,
        "rollout": job.rollout,
        "seed": cfg.seed + job.rollout if job.mode == "stateful" else cfg.seed,
        "instance_id": info["instance_id"],
        "position": info["position"],
        "variant": info["variant"],
        "variant_position": info["variant_position"],
        **outcome,
    }


def run_job(job: Job) -> list[dict]:
    """Run one job in this process; returns its records (also appended to results.jsonl)."""
    cfg = job.config
    out = Path(cfg.out)
    env = make_env(cfg.env_id, **cfg.env_kwargs)
    task = task_of(env)
    records = []
    try:
        if job.mode == "stateful":
            seed = cfg.seed + job.rollout
            agent = make_agent(cfg.agent, env, seed=seed, **cfg.agent_kwargs)
            obs, info = env.reset(seed=seed)
            n = len(env.unwrapped.order)
            tpath = trajectory_path(out, task, cfg.system, "stateful", job.rollout)
            for pos in range(n):
                if pos:
                    obs, info = env.reset()
                traj: list[dict] = []
                outcome = play_instance(env, agent, obs, info, traj)
                rec = _record(job, env, info, outcome)
                append_lines(tpath, traj)
                append_lines(out / RESULTS_FILE, [rec])
                records.append(rec)
        else:
            for iid in job.instance_ids:
                if ("stateless", 0, iid) in job.done_keys:
                    continue
                agent = make_agent(cfg.agent, env, seed=cfg.seed, **cfg.agent_kwargs)
                obs, info = env.reset(seed=cfg.seed, options={"instance": iid, "stateless": True})
                traj = []
                outcome = play_instance(env, agent, obs, info, traj)
                rec = _record(job, env, info, outcome)
                tpath = trajectory_path(out, task, cfg.system, "stateless", 0, instance_id=iid)
                tpath.unlink(missing_ok=True)
                append_lines(tpath, traj)
                append_lines(out / RESULTS_FILE, [rec])
                records.append(rec)
    finally:
        env.close()
    return records


def plan_jobs(cfg: RunConfig, instance_ids: list[str], done: set[tuple] | None = None) -> list[Job]:
    """Stateful rollouts first (the longest jobs), then the stateless pass in chunks."""
    done = done or set()
    jobs = []
    if cfg.mode in ("both", "stateful"):
        for k in range(cfg.rollouts):
            if not all(("stateful", k, iid) in done for iid in instance_ids):
                jobs.append(Job(cfg, "stateful", k))
    if cfg.mode in ("both", "stateless"):
        todo = [i for i in instance_ids if ("stateless", 0, i) not in done]
        if todo:
            size = cfg.stateless_chunk or max(1, -(-len(todo) // (cfg.workers * 2)))
            for s in range(0, len(todo), size):
                jobs.append(Job(cfg, "stateless", 0, todo[s:s + size]))
    return jobs


def execute(jobs: list[Job], workers: int, on_done: Callable[[Job, list[dict] | None, str | None], None]) -> list[str]:
    """Run jobs locally (inline or on a spawn pool); returns the error messages of failed jobs."""
    errors = []
    if workers == 1 or len(jobs) <= 1:
        for job in jobs:
            try:
                on_done(job, run_job(job), None)
            except Exception as exc:
                msg = f"{job.mode} rollout {job.rollout}: {type(exc).__name__}: {exc}"
                errors.append(msg)
                on_done(job, None, msg)
        return errors
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        futures = {pool.submit(run_job, job): job for job in jobs}
        for fut in cf.as_completed(futures):
            job = futures[fut]
            try:
                on_done(job, fut.result(), None)
            except Exception as exc:
                msg = f"{job.mode} rollout {job.rollout}: {type(exc).__name__}: {exc}"
                errors.append(msg)
                on_done(job, None, msg)
    return errors


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def existing_keys(out: Path, task: str, system: str) -> set[tuple]:
    """(mode, rollout, instance_id) already recorded for task/system (for resume)."""
    from clbench.results import iter_jsonl

    path = out / RESULTS_FILE
    if not path.exists():
        return set()
    keys = set()
    for _, rec in iter_jsonl(path):
        try:
            t, s, mode, k, iid = record_key(rec)
        except (KeyError, TypeError, ValueError):
            continue
        if t == task and s == system and not rec.get("error"):
            keys.add((mode, k, iid))
    return keys


def config_dict(cfg: RunConfig) -> dict:
    return asdict(cfg)
