"""The runner: stateful rollouts and the stateless pass as independent jobs, written as they finish.

Jobs are independent units of work: one stateful rollout (the agent object lives through the
whole schedule; a stateful stream never runs in parallel with itself) or one chunk of the
stateless pass (each instance played by a fresh agent on an env jumped to that instance with
`stateless=True`). Executors (clbench.executors) run jobs inline, on a spawn process pool or on
Ray. Every finished instance is appended at once to results.jsonl with its step trajectory, and a
stateful agent's `state_dict()` is appended to a journal at instance boundaries (see
CHECKPOINT_SHARE) so an interrupted rollout resumes from there (agents without one restart it).

An instance lost to an exception is recorded with `error` and `error_kind` ("infrastructure"
when the exception says so, e.g. a model call that failed for good; "agent" otherwise). The
driver's error policy (clbench.error_policy) stops a run by writing STOP_FILE into the run
directory; jobs check it before each instance. Agents that keep transcripts (`pop_transcript`)
have them written per instance next to the trajectories (clbench.llm.transcripts).
"""
from __future__ import annotations

import atexit
import json
import os
import time
import traceback
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np

from clbench.agent import end_instance, make_agent
from clbench.schedule import Schedule
from clbench.results import (RECORD_FORMAT, RESULTS_FILE, AppendFiles, append_lines, iter_jsonl,
                             legacy_stateless_trajectory, read_json, record_key, reset_of, safe_name,
                             split_instances, stateless_trajectories, stateless_trajectory, trajectory_path)
from clbench.results import _json_default, _open_append, _write_locked  # the records' own JSON and append


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
    stateless_passes: int = 0  # 0: one per rollout seed (stochastic agent), one (deterministic agent)
    # a world or schedule without cached baselines: compute r_max / r_reference first (False: leave
    # normalized metrics undefined, with the reason). The world itself is env_kwargs["world_seed"].
    calibrate: bool = True

    def __post_init__(self):
        self.system = self.system or default_system_name(self.env_id, self.agent, self.agent_kwargs)
        if self.mode not in ("both", "stateful", "stateless"):
            raise ValueError(f"mode must be both, stateful or stateless, not {self.mode!r}")
        if self.rollouts < 1 and self.mode != "stateless":
            raise ValueError("rollouts must be >= 1")
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.seed < 0:
            raise ValueError("seed must be >= 0")
        if self.stateless_passes < 0:
            raise ValueError("stateless_passes must be >= 0 (0 = the default)")


def default_system_name(env_id: str, agent: str, agent_kwargs: dict) -> str:
    """The agent's own name for a configuration (`default_system_name(kwargs)`, e.g. the LLM
    agent's `llm-MEMORY-MODEL`), else the agent name."""
    try:
        name = getattr(agent_class(env_id, agent), "default_system_name", None)
    except Exception:  # an unknown env or agent fails later, with its own message
        name = None
    return name(agent_kwargs) if callable(name) else agent


#: written into a run directory by the driver's error policy: jobs stop before their next instance
STOP_FILE = "STOP"


def stop_requested(out: str | Path) -> bool:
    return os.path.exists(os.path.join(out, STOP_FILE))


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
        self.files = AppendFiles()

    def append(self, rel: str, lines: list[dict]) -> None:
        self.files.append(os.path.join(self.out, rel), lines)  # str, not Path: a Path per append showed in profiles

    def close(self) -> None:
        self.files.close()

    def checkpoint(self, rel: str, line: bytes) -> None:
        append_checkpoint(self.out / rel, line)


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
    error = error_kind = None
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
        end_instance(agent, reward, final_info, obs)  # obs: the terminal observation (feedback)
    except Exception as exc:  # a crashing agent loses the instance, not the run
        error = f"{type(exc).__name__}: {exc}"
        error_kind = "infrastructure" if getattr(exc, "infrastructure", False) else "agent"
        traj.append({"event": "error", "error": error, "error_kind": error_kind,
                     "traceback": traceback.format_exc(limit=8)})
    usage = agent.pop_usage()
    transcript = agent.pop_transcript() if hasattr(agent, "pop_transcript") else None
    if usage is not None and usage.errors and error is None:
        traj.append({"event": "model_errors", "errors": usage.errors})
    pop_trace = getattr(agent, "pop_trace", None)  # an external harness's command, output and exit status
    trace = pop_trace() if pop_trace is not None else None
    if trace:
        traj.append({"event": "harness", **trace})
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
        "step_prompt_tokens": list(usage.step_prompt) or None if usage is not None else None,
        "model_faults": list(usage.faults) or None if usage is not None else None,
        "details": final_info.get("details"),
        "error": error,
        "error_kind": error_kind if error is not None else None,
        "transcript": transcript or None,  # taken off by the caller, never part of the record
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
        "seed": cfg.seed + job.rollout,  # rollout k and stateless pass k share seed SEED+k
        "instance_id": info["instance_id"],
        "position": info["position"],
        "variant": info["variant"],
        "variant_position": info["variant_position"],
        **{k: v for k, v in outcome.items() if v is not None or k in ("error", "tokens", "cost")},
    }


class TranscriptSink:
    """One job's transcript file (the trajectory file's twin under transcripts/), encoded compactly
    by clbench.llm.transcripts; opened on the first instance that has a transcript."""

    def __init__(self, sink, out: Path, trajectory_rel: str):
        self.sink, self.out, self.trajectory_rel = sink, out, trajectory_rel
        self.encoder = None

    def write(self, info: dict, transcript: list[dict] | None) -> None:
        if not transcript:
            return
        from clbench.llm.transcripts import Encoder, transcript_rel

        if self.encoder is None:
            self.encoder = Encoder()
            self.rel = transcript_rel(self.trajectory_rel)
        self.sink.append(self.rel, [self.encoder.encode(info["instance_id"], info["position"], transcript)])


def rel(path: Path, out: Path) -> str:
    return str(path.relative_to(out))


def state_path(out: Path, task: str, system: str, rollout: int) -> Path:
    """The journal a stateful rollout appends its agent state to at instance boundaries."""
    return Path(out) / "state" / task / safe_name(system) / f"stateful-r{rollout}.jsonl"


#: a journal is compacted to its newest line once it outgrows that line this many times (and 1 MiB):
#: disk stays bounded and compaction costs O(1) amortized per checkpoint
_JOURNAL_SLACK = 8
_JOURNAL_MIN_BYTES = 1 << 20
#: checkpoints may take at most this share of a stateful rollout's time. A growing state saved after
#: every instance costs the square of the schedule length; within this budget its cost is a fixed
#: share of the agent's own time (1%: a scripted agent's growing state made 2% a visible part of the
#: runner's time). An instance is checkpointed whenever the budget allows (for agents that think for
#: more than a few milliseconds, after every instance); resuming re-plays, and re-records, the
#: instances after the newest checkpoint, as it always did for an instance finished just before a kill.
CHECKPOINT_SHARE = 0.01


def state_line(position: int, state) -> bytes:
    """One checkpoint as a compact JSON line (C encoder; NaN kept, so a state round-trips exactly)."""
    return (json.dumps({"position": position, "state": state}, separators=(",", ":"),
                       default=_json_default) + "\n").encode()


def append_checkpoint(path: Path, line: bytes) -> None:
    """Append one checkpoint to a state journal: a single O_APPEND write, no rewrite of older state.

    Cost per instance is the size of the state, not of the history (rewriting and renaming a file
    per instance made checkpoints most of a run). A SIGKILL leaves whole lines, or at worst a torn
    last line that `load_checkpoint` skips and the next append starts after.
    """
    fd = _open_append(path)
    try:
        if os.fstat(fd).st_size > max(_JOURNAL_MIN_BYTES, _JOURNAL_SLACK * len(line)):
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(line)
            os.replace(tmp, path)  # atomic: a reader sees the old journal or the compacted one
            return
        _write_locked(fd, line)  # the records' append: a torn last line is ended first
    finally:
        os.close(fd)


def load_checkpoint(path: Path) -> dict | None:
    """The newest whole checkpoint {"position", "state"} of a journal, or None.

    Runs written before the journal kept one JSON file per rollout (`stateful-rK.json`); it is read
    when there is no journal.
    """
    legacy = path.with_suffix(".json")
    if not path.exists():
        return read_json(legacy) if legacy.exists() else None
    for raw in reversed(path.read_bytes().split(b"\n")):
        try:
            saved = json.loads(raw)
        except ValueError:  # blank or torn line
            continue
        if isinstance(saved, dict) and "position" in saved and "state" in saved:
            return saved
    return None


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
    played = saving = 0.0  # seconds playing and recording instances / checkpointing (CHECKPOINT_SHARE)
    transcripts = TranscriptSink(sink, out, tpath)
    for pos in range(start, n):
        if stop_requested(out):
            break
        begun = time.perf_counter()
        if pos > start:
            obs, info = env.reset()
        events = apply_shocks(agent, cfg.shocks, pos)
        if cfg.probe:
            agent.probe(cfg.probe, gold_facts(env, info["instance_id"]))
        traj: list[dict] = [{"event": "shock", **e} for e in events]
        outcome = play_instance(env, agent, obs, info, traj)
        transcript = outcome.pop("transcript")
        rec = _record(job, env, info, outcome)
        if events:
            rec["shocks"] = [e["event"] for e in events]
        sink.append(tpath, traj)
        transcripts.write(info, transcript)
        sink.append(RESULTS_FILE, [rec])
        records.append(rec)
        now = time.perf_counter()
        played += now - begun
        if saving <= CHECKPOINT_SHARE * played:
            state = agent.state_dict()
            if state is not None:
                sink.checkpoint(spath, state_line(pos, state))
            saving += time.perf_counter() - now
    return records


def _run_stateless(job: Job, env, sink) -> list[dict]:
    cfg, out = job.config, Path(job.config.out)
    task = env.unwrapped.task
    records = []
    seed = cfg.seed + job.rollout  # pass k is seeded like stateful rollout k
    # one file per job, not per instance (creating it cost more than playing the instance); per
    # job, not per pass: jobs of a pass run in parallel, and a file's bytes must not depend on that
    tpath = rel(stateless_trajectory(out, task, cfg.system, job.rollout, job.instance_ids[0]), out)
    transcripts = TranscriptSink(sink, out, tpath)
    for iid in job.instance_ids:
        if stop_requested(out):
            break
        agent = make_agent(cfg.agent, env, seed=stateless_agent_seed(seed, iid), **cfg.agent_kwargs)
        obs, info = env.reset(seed=seed, options={"instance": iid, "stateless": True})
        traj: list[dict] = []
        outcome = play_instance(env, agent, obs, info, traj)
        transcript = outcome.pop("transcript")
        rec = _record(job, env, info, outcome)
        sink.append(tpath, traj)
        transcripts.write(info, transcript)
        sink.append(RESULTS_FILE, [rec])
        records.append(rec)
    return records


def run_job(job: Job, sink=None) -> list[dict]:
    """Run one job in this process; its records are written through `sink` as they finish."""
    cfg = job.config
    own = sink is None
    sink = sink or LocalSink(cfg.out)
    try:
        env = cached_env(cfg.env_id, cfg.env_kwargs)
        if job.mode == "stateful":
            return _run_stateful(job, env, sink)
        return _run_stateless(job, env, sink)
    finally:
        if own:
            sink.close()


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


def _keep_instances(path: Path, keep) -> None:
    """Rewrite a trajectory file with only the instances whose reset event `keep` accepts (on
    resume: a half-written or unrecorded instance is dropped, and played again). Shocks go with
    their instance; shocks written before an instance that never started are dropped."""
    if not path.exists():
        return
    kept = [ev for group in split_instances(ev for _, ev in iter_jsonl(path))
            if (reset := reset_of(group)) is not None and keep(reset) for ev in group]
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    append_lines(tmp, kept)
    if tmp.exists():
        os.replace(tmp, path)
    else:
        path.unlink()


def plan_jobs(cfg: RunConfig, task: str, schedule: Schedule, resumable: bool, resume: bool = False) -> list[Job]:
    """Stateful rollouts first (the longest jobs), then the stateless passes (stateless_plan) in chunks.

    With resume, completed instances are skipped; a stateful rollout continues from its newest
    agent checkpoint (instances finished after it are played and recorded again; later records
    replace earlier ones), or restarts when there is none.
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
            saved = load_checkpoint(spath) if resume and resumable and not errored else None
            if saved is not None:
                p = int(saved["position"])
                if all(("stateful", k, order[q]) in ok for q in range(p + 1)):
                    resume_state = saved
            if resume_state is None:
                spath.unlink(missing_ok=True)
                spath.with_suffix(".json").unlink(missing_ok=True)
                tpath.unlink(missing_ok=True)
                (out / "transcripts" / rel(tpath, out / "trajectories")).unlink(missing_ok=True)
            else:
                last = int(resume_state["position"])
                _keep_instances(tpath, lambda reset: reset.get("position", 1 << 30) <= last)
            start = int(resume_state["position"]) + 1 if resume_state else 0
            jobs.append(Job(cfg, "stateful", k, resume_state=resume_state, remaining=len(order) - start))
    if cfg.mode in ("both", "stateless"):
        for p in range(stateless_plan(cfg)["passes"]):
            todo = [s.instance_id for s in schedule.order(0) if ("stateless", p, s.instance_id) not in ok]
            if todo:  # a half-written trajectory of an unfinished instance starts over
                _drop_stateless_trajectories(out, task, cfg.system, p, todo, ok)
                size = cfg.stateless_chunk or max(1, -(-len(todo) // (cfg.workers * 2)))
                for s in range(0, len(todo), size):
                    chunk = todo[s:s + size]
                    jobs.append(Job(cfg, "stateless", p, chunk, remaining=len(chunk)))
    return jobs


def stateless_agent_seed(rollout_seed: int, instance_id: str) -> int:
    """The fresh agent of one stateless instance: seeded from the pass's seed and the instance, so
    instances of a pass do not replay one random stream (stateful rollout k's agent gets SEED+k)."""
    return int(np.random.SeedSequence([rollout_seed, zlib.crc32(instance_id.encode())]).generate_state(1)[0])


def _drop_stateless_trajectories(out: Path, task: str, system: str, p: int, todo: list[str], ok: set) -> None:
    """Before pass p plays `todo` (again): only recorded instances stay in its trajectory files."""
    for path in stateless_trajectories(out, task, system, p):
        _keep_instances(path, lambda reset: ("stateless", p, reset.get("instance_id")) in ok)
    for iid in todo:  # record format 1: one file per instance
        legacy_stateless_trajectory(out, task, system, p, iid).unlink(missing_ok=True)


def agent_class(env_id: str, name: str):
    """The class `make_agent` would build, found without making the env."""
    from clbench.agent import agent_table, load_object, split_agent_name
    from clbench.registry import env_class

    name = split_agent_name(name)[0]
    return load_object(agent_table(env_class(env_id)).get(name, name))


def stateless_plan(cfg: RunConfig) -> dict:
    """How many stateless passes a run plays and why (the run card repeats it).

    An agent declares `deterministic = True` when its play depends on the observations only (not
    on its seed): one pass then measures it exactly. Any other agent is treated as stochastic."""
    if cfg.stateless_passes:
        return {"passes": cfg.stateless_passes, "reason": "set with --stateless-passes"}
    if agent_class(cfg.env_id, cfg.agent).deterministic:
        return {"passes": 1, "reason": "deterministic agent: one pass"}
    return {"passes": max(1, cfg.rollouts), "reason": "stochastic agent: one pass per rollout seed"}


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def config_dict(cfg: RunConfig) -> dict:
    return asdict(cfg)
