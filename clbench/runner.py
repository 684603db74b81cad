"""The runner plans and plays: stateful rollouts and the stateless pass as independent jobs.

Jobs are independent units of work: one stateful rollout (the agent object lives through the
whole schedule; a stateful stream never runs in parallel with itself) or one chunk of the
stateless pass (each instance played by a fresh agent on an env jumped to that instance with
`stateless=True`). Executors (clbench.executors) run jobs inline, on a spawn process pool or on
Ray. Every finished instance is handed at once to the run directory (clbench.run_dir.JobFiles:
its record, step trajectory and transcript; written in batches at least every FLUSH_SECONDS), and a stateful agent's `state_dict()` is checkpointed
at instance boundaries (see CHECKPOINT_SHARE) so an interrupted rollout resumes from there (agents
without one restart it). The runner never names a file: clbench.run_dir owns the directory.

An instance lost to an exception is recorded with `error` and `error_kind` ("infrastructure"
when the exception says so, e.g. a model call that failed for good; "agent" otherwise). The
driver's error policy (clbench.error_policy) stops a run through the run directory's stop flag;
jobs check it before each instance. Agents that keep transcripts (`pop_transcript`) have them
written per instance next to the trajectories (clbench.llm.transcripts).
"""
from __future__ import annotations

import atexit
import os
import time
import traceback
import zlib
from dataclasses import asdict, dataclass, field
from typing import Iterator

import gymnasium as gym
import numpy as np

from clbench.agent import end_instance, make_agent
from clbench.results import RECORD_FORMAT
from clbench.run_dir import FLUSH_SECONDS, JobFiles, LocalSink, RunDirectory
from clbench.schedule import Schedule


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
    """Play one instance to its end; agent errors end it with reward 0 and the error kept. Returns
    the outcome fields of its record, and its transcript under "transcript" (None without one)."""
    out: dict = {}
    out["transcript"] = _play(env, agent, obs, info, traj, out) or None
    return out


def _play(env, agent, obs: str, info: dict, traj: list[dict], out: dict) -> list[dict] | None:
    """play_instance writing the outcome fields into `out` (a job's record being built: no second
    dict to merge per instance); returns the agent's transcript of the instance, if it keeps one."""
    start = time.perf_counter()
    error = error_kind = None
    reward, steps, truncated = 0.0, 0, False
    final_info = dict(info)
    event = traj.append
    event({"event": "reset", "instance_id": info["instance_id"], "position": info["position"], "observation": obs})
    try:
        agent.begin_instance(obs, info)
        act, step = agent.act, env.step
        while True:
            action = act(obs, info)
            obs, reward, terminated, truncated, info = step(action)
            steps += 1
            final_info = info
            event({"event": "step", "step": steps, "action": action, "observation": obs,
                   "reward": reward, "terminated": terminated, "truncated": truncated})
            if terminated or truncated:
                break
        end_instance(agent, reward, final_info, obs)  # obs: the terminal observation (feedback)
    except Exception as exc:  # a crashing agent loses the instance, not the run
        error = f"{type(exc).__name__}: {exc}"
        error_kind = "infrastructure" if getattr(exc, "infrastructure", False) else "agent"
        event({"event": "error", "error": error, "error_kind": error_kind,
               "traceback": traceback.format_exc(limit=8)})
    usage = agent.pop_usage()
    pop_transcript = getattr(agent, "pop_transcript", None)
    transcript = pop_transcript() if pop_transcript is not None else None
    if usage is not None and usage.errors and error is None:
        event({"event": "model_errors", "errors": usage.errors})
    pop_trace = getattr(agent, "pop_trace", None)  # an external harness's command, output and exit status
    trace = pop_trace() if pop_trace is not None else None
    if trace:
        event({"event": "harness", **trace})
    get = final_info.get
    out["reward"] = float(get("instance_reward", 0.0)) if error is None else 0.0
    out["raw_metric"] = get("raw_metric") or {"name": "reward", "value": 0.0}
    out["solved"] = bool(get("solved", False)) if error is None else False
    out["steps"] = steps
    out["truncated"] = bool(truncated)
    # microseconds (a measurement: rounding half up, not round(), whose decimal conversion cost more
    # than the rest of the record)
    out["wall_time"] = int((time.perf_counter() - start) * 1e6 + 0.5) / 1e6
    out["tokens"] = out["cost"] = out["error"] = None
    # the rest only when set (a record leaves out fields that are None, except tokens, cost and error)
    if usage is not None:
        out["tokens"], out["cost"] = usage.tokens(), usage.cost
        if usage.calls is not None:
            out["calls"] = usage.calls
        if usage.errors:
            out["model_errors"] = list(usage.errors)
        # per-step prompt sizes (a memory's footprint over the schedule) and survived model faults
        if usage.step_prompt:
            out["step_prompt_tokens"] = list(usage.step_prompt)
        if usage.faults:
            out["model_faults"] = list(usage.faults)
    details = get("details")
    if details is not None:
        out["details"] = details
    if error is not None:
        out["error"], out["error_kind"] = error, error_kind
    return transcript


def _header(job: Job, task: str) -> dict:
    """The fields every record of a job shares (then the instance's own: _begin_record)."""
    cfg = job.config
    return {
        "format": RECORD_FORMAT,
        "task": task,
        "env_id": cfg.env_id,
        "system": cfg.system,
        "mode": job.mode,
        "rollout": job.rollout,
        "seed": cfg.seed + job.rollout,  # rollout k and stateless pass k share seed SEED+k
    }


def _begin_record(header: dict, info: dict) -> dict:
    """An instance's record before play: the job's fields and the instance's place (`_play` adds the outcome)."""
    rec = header.copy()
    rec["instance_id"], rec["position"] = info["instance_id"], info["position"]
    rec["variant"], rec["variant_position"] = info["variant"], info["variant_position"]
    return rec


#: checkpoints may take at most this share of a stateful rollout's time. A growing state saved after
#: every instance costs the square of the schedule length; within this budget its cost is a fixed
#: share of the agent's own time (1%: a scripted agent's growing state made 2% a visible part of the
#: runner's time). An instance is checkpointed whenever the budget allows and CHECKPOINT_SECONDS
#: have passed since the last checkpoint (the first instance always; for agents that think for more
#: than that, after every instance); resuming re-plays, and re-records, the instances after the
#: newest checkpoint, as it always did for an instance finished just before a kill.
CHECKPOINT_SHARE = 0.01
#: a checkpoint flushes the records it covers: more often than records are flushed anyway
#: (run_dir.FLUSH_SECONDS) it only adds writes (a scripted Poker rollout checkpointed every few
#: hands, each with its own flush, and that was a visible part of the runner's time)
CHECKPOINT_SECONDS = FLUSH_SECONDS


def _run_stateful(job: Job, env, files: JobFiles) -> list[dict]:
    from clbench.probes import gold_facts
    from clbench.shocks import apply_shocks

    cfg = job.config
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
    records, header = [], _header(job, env.unwrapped.task)  # the task once per job (a chain of wrappers to walk)
    played = saving = 0.0  # seconds playing and recording instances / checkpointing (CHECKPOINT_SHARE)
    saved = float("-inf")  # when the newest checkpoint was taken
    errored = False  # an instance lost to an error: no later state is one to continue from (see plan_jobs)
    shocks, probe, clock = cfg.shocks, cfg.probe, time.perf_counter
    for pos in range(start, n):
        if files.stop_requested():
            break
        begun = clock()
        if pos > start:
            obs, info = env.reset()
        events = apply_shocks(agent, shocks, pos) if shocks else None
        if probe:
            agent.probe(probe, gold_facts(env, info["instance_id"]))
        traj: list[dict] = [{"event": "shock", **e} for e in events] if events else []
        rec = _begin_record(header, info)
        transcript = _play(env, agent, obs, info, traj, rec)
        if events:
            rec["shocks"] = [e["event"] for e in events]
        files.instance(traj, rec, info, transcript)
        records.append(rec)
        errored = errored or rec["error"] is not None
        now = clock()
        played += now - begun
        if not errored and saving <= CHECKPOINT_SHARE * played and now - saved >= CHECKPOINT_SECONDS:
            state = agent.state_dict()
            if state is not None:
                files.checkpoint(pos, state)
            saved = time.perf_counter()
            saving += saved - now
    return records


def _run_stateless(job: Job, env, files: JobFiles) -> list[dict]:
    cfg = job.config
    records, header = [], _header(job, env.unwrapped.task)
    seed = cfg.seed + job.rollout  # pass k is seeded like stateful rollout k
    for iid in job.instance_ids:
        if files.stop_requested():
            break
        agent = make_agent(cfg.agent, env, seed=stateless_agent_seed(seed, iid), **cfg.agent_kwargs)
        obs, info = env.reset(seed=seed, options={"instance": iid, "stateless": True})
        traj: list[dict] = []
        rec = _begin_record(header, info)
        transcript = _play(env, agent, obs, info, traj, rec)
        files.instance(traj, rec, info, transcript)
        records.append(rec)
    return records


def run_job(job: Job, sink=None) -> list[dict]:
    """Run one job in this process; its records are written through `sink` (the run directory's
    LocalSink unless an executor relays them) as they finish."""
    cfg = job.config
    own = sink is None
    sink = sink or LocalSink(cfg.out)
    try:
        env = cached_env(cfg.env_id, cfg.env_kwargs)
        files = RunDirectory(cfg.out).job_files(sink, env.unwrapped.task, cfg.system, job.mode, job.rollout,
                                                job.instance_ids[0] if job.instance_ids else None)
        try:
            if job.mode == "stateful":
                return _run_stateful(job, env, files)
            return _run_stateless(job, env, files)
        finally:  # an interrupted job keeps the instances it finished
            files.close()
    finally:
        if own:
            sink.close()


# ---------------------------------------------------------------- planning and resume
def plan_jobs(cfg: RunConfig, task: str, schedule: Schedule, resumable: bool, resume: bool = False) -> list[Job]:
    """Stateful rollouts first (the longest jobs), then the stateless passes (stateless_plan) in chunks.

    With resume, completed instances are skipped; a stateful rollout continues from its newest
    agent checkpoint (instances finished after it are played and recorded again; later records
    replace earlier ones), or restarts when there is none. A rollout with an errored instance has
    no checkpoint after it (`_run_stateful`), so it continues from before that instance. What a
    restarted or continued rollout keeps on disk is the run directory's (RunDirectory.restart_rollout /
    continue_rollout).
    """
    rd = RunDirectory(cfg.out)
    ok = rd.done_keys(task, cfg.system)[0] if resume else set()  # an errored instance is not ok: played again
    files = resume or rd.holds_files(task, cfg.system)  # False: nothing of this task/system to clear
    jobs = []
    if cfg.mode in ("both", "stateful"):
        for k in range(cfg.rollouts):
            if not resume:  # nothing recorded to skip or continue after (each order cost a permutation)
                if files:
                    rd.restart_rollout(task, cfg.system, k)
                jobs.append(Job(cfg, "stateful", k, remaining=len(schedule)))
                continue
            order = [s.instance_id for s in schedule.order(cfg.seed + k)]
            if all(("stateful", k, iid) in ok for iid in order):
                continue
            resume_state = None
            # an errored instance's rollout continues from before it: the runner takes no checkpoint after an
            # instance errored, and one taken later by an older clbench fails the check below (a restart)
            saved = rd.checkpoint(task, cfg.system, k) if resume and resumable else None
            if saved is not None:
                p = int(saved["position"])
                if all(("stateful", k, order[q]) in ok for q in range(p + 1)):
                    resume_state = saved
            if resume_state is None:
                rd.restart_rollout(task, cfg.system, k)
            else:
                rd.continue_rollout(task, cfg.system, k, int(resume_state["position"]))
            start = int(resume_state["position"]) + 1 if resume_state else 0
            jobs.append(Job(cfg, "stateful", k, resume_state=resume_state, remaining=len(order) - start))
    if cfg.mode in ("both", "stateless"):
        ids = [s.instance_id for s in schedule.order(0)]  # every pass plays the same order
        for p in range(stateless_plan(cfg)["passes"]):
            todo = [iid for iid in ids if ("stateless", p, iid) not in ok]
            if todo and files:  # a half-written trajectory of an unfinished instance starts over
                rd.drop_unrecorded_stateless(task, cfg.system, p, todo, ok)
            if todo:
                # one job per pass on one worker (a job is a trajectory file and a sink to open); else two per
                # worker, which balances the workers
                size = cfg.stateless_chunk or (len(todo) if cfg.workers == 1 else -(-len(todo) // (cfg.workers * 2)))
                for s in range(0, len(todo), size):
                    chunk = todo[s:s + size]
                    jobs.append(Job(cfg, "stateless", p, chunk, remaining=len(chunk)))
    return jobs


def stateless_agent_seed(rollout_seed: int, instance_id: str) -> int:
    """The fresh agent of one stateless instance: seeded from the pass's seed and the instance, so
    instances of a pass do not replay one random stream (stateful rollout k's agent gets SEED+k)."""
    return int(np.random.SeedSequence([rollout_seed, zlib.crc32(instance_id.encode())]).generate_state(1)[0])


def stateful_instances(env, agent, seed: int) -> Iterator[tuple[dict, dict]]:
    """Stateful rollout `seed` of `agent` (made by the caller, who may read its state between instances)
    on `env` as the runner plays it, writing nothing: (info, outcome) of each instance as it ends, while
    the env still holds it. For scripts that measure between instances (tasks/poker/, clbench.redteam)."""
    for pos in range(len(env.unwrapped.schedule)):
        obs, info = env.reset(seed=seed) if pos == 0 else env.reset()
        yield info, play_instance(env, agent, obs, info, [])


def stateless_instances(env, agent: str, seed: int, **agent_kwargs) -> Iterator[tuple[dict, dict]]:
    """Stateless pass `seed` of the agent named `agent` as the runner plays it (each instance alone, in the
    rollout's order, by a fresh agent seeded as `_run_stateless` seeds it), writing nothing; yields as
    `stateful_instances`."""
    for inst in env.unwrapped.schedule.order(seed):
        iid = inst.instance_id
        fresh = make_agent(agent, env, seed=stateless_agent_seed(seed, iid), **agent_kwargs)
        obs, info = env.reset(seed=seed, options={"instance": iid, "stateless": True})
        yield info, play_instance(env, fresh, obs, info, [])


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
    from clbench.registry import env_class

    if cfg.stateless_passes:
        return {"passes": cfg.stateless_passes, "reason": "set with --stateless-passes"}
    deals = env_class(cfg.env_id).deals
    if deals > 1:  # pass k plays rollout k's cards: the two sides average over the same deals
        return {"passes": max(1, cfg.rollouts),
                "reason": f"the env deals each rollout seed its own instances (seed % {deals}): one pass per rollout seed"}
    if agent_class(cfg.env_id, cfg.agent).deterministic:
        return {"passes": 1, "reason": "deterministic agent: one pass"}
    return {"passes": max(1, cfg.rollouts), "reason": "stochastic agent: one pass per rollout seed"}


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def config_dict(cfg: RunConfig) -> dict:
    return asdict(cfg)
