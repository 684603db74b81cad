"""The runner: stateful rollouts and the stateless pass as independent jobs, written as they finish.

Jobs are independent units of work: one stateful rollout (the agent object lives through the
whole schedule; a stateful stream never runs in parallel with itself) or one chunk of the
stateless pass (each instance played by a fresh agent on an env jumped to that instance with
`stateless=True`). Executors (clbench.executors) run jobs inline, on a spawn process pool or on
Ray. Every finished instance is appended at once to results.jsonl with its step trajectory, and a
stateful agent's `state_dict()` is saved at each instance boundary so an interrupted rollout
resumes where it stopped (agents without one restart the rollout).
"""
from __future__ import annotations

import atexit
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gymnasium as gym

from clbench.agent import make_agent
from clbench.schedule import Schedule
from clbench.results import (RECORD_FORMAT, RESULTS_FILE, append_lines, iter_jsonl, read_json, record_key,
                             safe_name, trajectory_path, write_json_atomic)


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
    shocks: list = field(default_factory=list)  # lifecycle shocks "EVENT@K" (clbench.shocks)
    probe: str | None = None  # probe ladder rung: None (P1), "select" (P2) or "gold" (P3)

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
    resume_state: dict | None = None  # stateful: {"position": P, "state": agent state} to continue after P
    remaining: int = 0  # instances the job will play

    @property
    def label(self) -> str:
        return f"{self.config.env_id} {self.mode} rollout {self.rollout}"


class LocalSink:
    """Writes into the run directory directly (workers share the driver's filesystem)."""

    def __init__(self, out: str | Path):
        self.out = Path(out)

    def append(self, rel: str, lines: list[dict]) -> None:
        append_lines(self.out / rel, lines)

    def put_json(self, rel: str, obj) -> None:
        write_json_atomic(self.out / rel, obj)


_ENVS: dict[tuple, gym.Env] = {}


def make_env(env_id: str, **kwargs):
    import clbench  # noqa: F401  registers the envs in spawned workers

    return gym.make(env_id, **kwargs)


def cached_env(env_id: str, kwargs: dict):
    """One env per worker process and configuration: data (databases, generators) built once."""
    key = (env_id, repr(sorted(kwargs.items())))
    if key not in _ENVS:
        if not _ENVS:
            atexit.register(close_cached_envs)
        _ENVS[key] = make_env(env_id, **kwargs)
    return _ENVS[key]


def close_cached_envs() -> None:
    """Close every cached env (sandboxes, connections) when the worker process exits."""
    while _ENVS:
        _, env = _ENVS.popitem()
        try:
            env.close()
        except Exception:  # closing is best effort at exit
            pass


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
    usage = agent.pop_usage()
    if usage is not None and usage.errors and error is None:
        traj.append({"event": "model_errors", "errors": usage.errors})
    raw = final_info.get("raw_metric") or {"name": "reward", "value": 0.0}
    return {
        "reward": float(final_info.get("instance_reward", 0.0)) if error is None else 0.0,
        "raw_metric": raw,
        "solved": bool(final_info.get("solved", False)) if error is None else False,
        "steps": steps,
        "truncated": bool(truncated),
        "wall_time": round(time.perf_counter() - start, 6),
        "tokens": usage.tokens() if usage is not None else None,
        "calls": usage.calls if usage is not None else None,
        "cost": usage.cost if usage is not None else None,
        "model_errors": list(usage.errors) if usage is not None and usage.errors else None,
        # per-step prompt sizes (a memory's footprint over the schedule) and survived model faults
        "step_prompt_tokens": list(getattr(usage, "step_prompt", None) or []) or None,
        "model_faults": list(getattr(usage, "faults", None) or []) or None,
        "details": final_info.get("details"),
        "error": error,
    }


def _record(job: Job, env, info: dict, outcome: dict) -> dict:
    cfg = job.config
    return {
        "format": RECORD_FORMAT,
        "task": env.unwrapped.task,
        "env_id": cfg.env_id,
        "system": cfg.system,
        "mode": job.mode,
        "rollout": job.rollout,
        "seed": cfg.seed + job.rollout if job.mode == "stateful" else cfg.seed,
        "instance_id": info["instance_id"],
        "position": info["position"],
        "variant": info["variant"],
        "variant_position": info["variant_position"],
        **{k: v for k, v in outcome.items() if v is not None or k in ("error", "tokens", "cost")},
    }


def rel(path: Path, out: Path) -> str:
    return str(path.relative_to(out))


def state_path(out: Path, task: str, system: str, rollout: int) -> Path:
    """Where a stateful rollout's agent state is saved after each instance."""
    return Path(out) / "state" / task / safe_name(system) / f"stateful-r{rollout}.json"


def _run_stateful(job: Job, env, sink) -> list[dict]:
    from clbench.probes import gold_facts
    from clbench.shocks import apply_shocks

    cfg, out = job.config, Path(job.config.out)
    task = env.unwrapped.task
    seed = cfg.seed + job.rollout
    agent = make_agent(cfg.agent, env, seed=seed, **cfg.agent_kwargs)
    n = len(env.unwrapped.schedule)
    start = 0
    if job.resume_state is not None:
        agent.load_state_dict(job.resume_state["state"])
        start = int(job.resume_state["position"]) + 1
        obs, info = env.reset(seed=seed, options={"instance": start})
    else:
        obs, info = env.reset(seed=seed)
    tpath = rel(trajectory_path(out, task, cfg.system, "stateful", job.rollout), out)
    spath = rel(state_path(out, task, cfg.system, job.rollout), out)
    records = []
    for pos in range(start, n):
        if pos > start:
            obs, info = env.reset()
        events = apply_shocks(agent, cfg.shocks, pos)
        if cfg.probe:
            agent.probe(cfg.probe, gold_facts(env, info["instance_id"]))
        traj: list[dict] = [{"event": "shock", **e} for e in events]
        outcome = play_instance(env, agent, obs, info, traj)
        rec = _record(job, env, info, outcome)
        if events:
            rec["shocks"] = [e["event"] for e in events]
        sink.append(tpath, traj)
        sink.append(RESULTS_FILE, [rec])
        state = agent.state_dict()
        if state is not None:
            sink.put_json(spath, {"position": pos, "state": state})
        records.append(rec)
    return records


def _run_stateless(job: Job, env, sink) -> list[dict]:
    cfg, out = job.config, Path(job.config.out)
    task = env.unwrapped.task
    records = []
    for iid in job.instance_ids:
        agent = make_agent(cfg.agent, env, seed=cfg.seed, **cfg.agent_kwargs)
        obs, info = env.reset(seed=cfg.seed, options={"instance": iid, "stateless": True})
        traj: list[dict] = []
        outcome = play_instance(env, agent, obs, info, traj)
        rec = _record(job, env, info, outcome)
        tpath = trajectory_path(out, task, cfg.system, "stateless", 0, instance_id=iid)
        sink.append(rel(tpath, out), traj)
        sink.append(RESULTS_FILE, [rec])
        records.append(rec)
    return records


def run_job(job: Job, sink=None) -> list[dict]:
    """Run one job in this process; its records are written through `sink` as they finish."""
    cfg = job.config
    sink = sink or LocalSink(cfg.out)
    env = cached_env(cfg.env_id, cfg.env_kwargs)
    if job.mode == "stateful":
        return _run_stateful(job, env, sink)
    return _run_stateless(job, env, sink)


# ---------------------------------------------------------------- planning and resume
def done_keys(out: Path, task: str, system: str) -> tuple[set[tuple], set[tuple]]:
    """(mode, rollout, instance_id) recorded for task/system: (completed, errored)."""
    path = out / RESULTS_FILE
    ok, bad = set(), set()
    if not path.exists():
        return ok, bad
    for _, rec in iter_jsonl(path):
        try:
            t, s, mode, k, iid = record_key(rec)
        except (KeyError, TypeError, ValueError):
            continue
        if t == task and s == system:
            key = (mode, k, iid)
            if rec.get("error"):
                bad.add(key)
                ok.discard(key)
            else:
                ok.add(key)
                bad.discard(key)
    return ok, bad


def _truncate_trajectory(path: Path, keep_through: int) -> None:
    """Keep the steps of instances at positions <= keep_through (drop a half-written tail)."""
    if not path.exists():
        return
    kept, keep = [], False
    for _, ev in iter_jsonl(path):
        if ev.get("event") == "reset":
            keep = ev.get("position", 1 << 30) <= keep_through
        elif ev.get("event") == "shock":
            keep = True  # shocks precede the reset of their instance; decided again at that reset
        if keep:
            kept.append(ev)
    # shocks written just before a dropped instance are dropped with it
    while kept and kept[-1].get("event") == "shock":
        kept.pop()
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    append_lines(tmp, kept)
    if tmp.exists():
        os.replace(tmp, path)
    else:
        path.unlink()


def plan_jobs(cfg: RunConfig, task: str, schedule: Schedule, resumable: bool, resume: bool = False) -> list[Job]:
    """Stateful rollouts first (the longest jobs), then the stateless pass in chunks.

    With resume, completed instances are skipped; a stateful rollout continues from the agent
    state saved after its last completed instance, or restarts when that is impossible.
    """
    out = Path(cfg.out)
    ok, bad = done_keys(out, task, cfg.system) if resume else (set(), set())
    jobs = []
    if cfg.mode in ("both", "stateful"):
        for k in range(cfg.rollouts):
            order = [s.instance_id for s in schedule.order(cfg.seed + k)]
            errored = any(("stateful", k, iid) in bad for iid in order)
            if all(("stateful", k, iid) in ok for iid in order) and not errored:
                continue
            tpath = trajectory_path(out, task, cfg.system, "stateful", k)
            spath = state_path(out, task, cfg.system, k)
            resume_state = None
            if resume and resumable and not errored and spath.exists():
                saved = read_json(spath)
                p = int(saved["position"])
                if all(("stateful", k, order[q]) in ok for q in range(p + 1)):
                    resume_state = saved
            if resume_state is None:
                spath.unlink(missing_ok=True)
                tpath.unlink(missing_ok=True)
            else:
                _truncate_trajectory(tpath, int(resume_state["position"]))
            start = int(resume_state["position"]) + 1 if resume_state else 0
            jobs.append(Job(cfg, "stateful", k, resume_state=resume_state, remaining=len(order) - start))
    if cfg.mode in ("both", "stateless"):
        todo = [s.instance_id for s in schedule.order(0) if ("stateless", 0, s.instance_id) not in ok]
        for iid in todo:  # a half-written trajectory of an unfinished instance starts over
            trajectory_path(out, task, cfg.system, "stateless", 0, instance_id=iid).unlink(missing_ok=True)
        if todo:
            size = cfg.stateless_chunk or max(1, -(-len(todo) // (cfg.workers * 2)))
            for s in range(0, len(todo), size):
                chunk = todo[s:s + size]
                jobs.append(Job(cfg, "stateless", 0, chunk, remaining=len(chunk)))
    return jobs


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def config_dict(cfg: RunConfig) -> dict:
    return asdict(cfg)
