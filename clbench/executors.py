"""Executors run runner jobs: inline, on a local spawn process pool (default) or on Ray.

All of them report each finished job to `on_done(job, records, error)`; records reach the run
directory while a job runs, through a sink (clbench.runner.LocalSink locally; on Ray a sink actor
pinned to the driver's node, so remote workers need no shared filesystem).
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
from typing import Callable

from clbench.runner import Job, LocalSink, run_job

OnDone = Callable[[Job, "list[dict] | None", "str | None"], None]


def _failure(job: Job, exc: BaseException) -> str:
    return f"{job.label}: {type(exc).__name__}: {exc}"


def run_local(jobs: list[Job], workers: int, on_done: OnDone) -> list[str]:
    """Inline for one worker, else a spawn process pool; returns the failed jobs' messages."""
    errors = []
    if workers == 1 or len(jobs) <= 1:
        for job in jobs:
            try:
                on_done(job, run_job(job), None)
            except Exception as exc:
                errors.append(_failure(job, exc))
                on_done(job, None, errors[-1])
        return errors
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        futures = {pool.submit(run_job, job): job for job in jobs}
        for fut in cf.as_completed(futures):
            job = futures[fut]
            try:
                on_done(job, fut.result(), None)
            except Exception as exc:
                errors.append(_failure(job, exc))
                on_done(job, None, errors[-1])
    return errors


def run_ray(jobs: list[Job], workers: int, on_done: OnDone, address: str | None = None) -> list[str]:
    """Fan jobs out as Ray tasks (one CPU each) on a local instance or the cluster at `address`."""
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        raise RuntimeError("the Ray executor needs Ray: pip install 'clbench[ray]'") from None

    started = False
    if not ray.is_initialized():
        kwargs = {"address": address} if address else {"num_cpus": workers}
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False, **kwargs)
        started = True
    try:
        out = jobs[0].config.out if jobs else "."
        sink_cls = ray.remote(num_cpus=0)(_SinkActor)
        here = ray.get_runtime_context().get_node_id()
        sink = sink_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote(out)
        remote_job = ray.remote(num_cpus=1, max_retries=0)(_ray_job)
        refs = {remote_job.remote(job, sink): job for job in jobs}
        errors = []
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            job = refs[ready[0]]
            try:
                on_done(job, ray.get(ready[0]), None)
            except Exception as exc:
                errors.append(_failure(job, exc))
                on_done(job, None, errors[-1])
        return errors
    finally:
        if started:
            ray.shutdown()


class _SinkActor:
    """Runs on the driver's node and appends for remote workers (whole lines, in call order)."""

    def __init__(self, out: str):
        self.sink = LocalSink(out)

    def append(self, rel: str, lines: list[dict]) -> None:
        self.sink.append(rel, lines)

    def put_json(self, rel: str, obj) -> None:
        self.sink.put_json(rel, obj)


class _RemoteSink:
    """Worker-side proxy: waits for every write so a finished instance is on disk before the next."""

    def __init__(self, actor):
        self.actor = actor

    def append(self, rel, lines):
        import ray

        ray.get(self.actor.append.remote(rel, lines))

    def put_json(self, rel, obj):
        import ray

        ray.get(self.actor.put_json.remote(rel, obj))


def _ray_job(job: Job, sink_actor) -> list[dict]:
    return run_job(job, _RemoteSink(sink_actor))


def execute(jobs: list[Job], workers: int, on_done: OnDone, executor: str = "local",
            ray_address: str | None = None) -> list[str]:
    if executor == "local":
        return run_local(jobs, workers, on_done)
    if executor == "ray":
        return run_ray(jobs, workers, on_done, ray_address)
    raise ValueError(f"unknown executor {executor!r}: use local or ray")
