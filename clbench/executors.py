"""Executors run runner jobs: inline, on a local spawn process pool (default) or on Ray.

All of them report each finished job to `on_done(job, records, error)`; records reach the run
directory while a job runs, through a sink (clbench.runner.LocalSink locally; on Ray a sink actor
pinned to the driver's node, so remote workers need no shared filesystem).
"""
from __future__ import annotations

import concurrent.futures as cf
import ctypes
import multiprocessing
import os
import signal
import threading
import time
from typing import Callable

from clbench.runner import Job, LocalSink, run_job

OnDone = Callable[[Job, "list[dict] | None", "str | None"], None]
#: seconds the workers get to unwind (close sandboxes) after an interrupt before they are killed
STOP_GRACE = 10.0


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so the same unwinding runs; exit code 143."""

    exit_code = 143


def _raise_terminated(signum, frame):
    raise Terminated()


def install_signal_handlers() -> None:
    """SIGTERM unwinds like SIGINT (main process and pool workers): whatever instance is being played
    is never recorded, and `--resume` replays it."""
    signal.signal(signal.SIGTERM, _raise_terminated)


#: prctl(2): the signal a process gets when its parent dies
PR_SET_PDEATHSIG = 1


def _worker_init(parent: int) -> None:
    """A pool worker unwinds on SIGTERM like the main process, and dies with its parent: a SIGKILLed
    clbench leaves no one to stop its workers, which would go on playing and appending to the run
    directory beside a `--resume`."""
    install_signal_handlers()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the watcher below still notices
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)

    def watch():  # prctl fires when the parent *thread* ends; this catches the process on any platform
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="clbench-parent-watch", daemon=True).start()


def _stop_pool(pool: cf.ProcessPoolExecutor) -> None:
    """After an interrupt: cancel queued jobs, stop running ones (SIGTERM, then SIGKILL)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + STOP_GRACE
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(1)


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
    pool = cf.ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx,
                                  initializer=_worker_init, initargs=(os.getpid(),))
    try:
        futures = {pool.submit(run_job, job): job for job in jobs}
        for fut in cf.as_completed(futures):
            job = futures[fut]
            try:
                on_done(job, fut.result(), None)
            except Exception as exc:
                errors.append(_failure(job, exc))
                on_done(job, None, errors[-1])
    except BaseException:  # Ctrl-C, SIGTERM or a worker's KeyboardInterrupt: stop everything now
        _stop_pool(pool)
        raise
    pool.shutdown(wait=True)
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
        if address:
            check_ray_address(address)
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


def check_ray_address(address: str, timeout: float = 3.0) -> None:
    """Fail in one line, before Ray starts, when nothing answers at a cluster address (Ray itself
    would retry for minutes, ignoring SIGTERM). "auto" and "local" are Ray's own words: left to Ray."""
    import socket

    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--ray-address {address!r}: expected HOST:PORT (e.g. 127.0.0.1:6379), ray://HOST:PORT or auto")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise RuntimeError(f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one with "
                           "`ray start --head` or leave out --ray-address for a local instance") from None


class _SinkActor:
    """Runs on the driver's node and appends for remote workers (whole lines, in call order)."""

    def __init__(self, out: str):
        self.sink = LocalSink(out)

    def append(self, rel: str, lines: list[dict]) -> None:
        self.sink.append(rel, lines)

    def checkpoint(self, rel: str, line: bytes) -> None:
        self.sink.checkpoint(rel, line)


class _RemoteSink:
    """Worker-side proxy: waits for every write so a finished instance is on disk before the next."""

    def __init__(self, actor):
        self.actor = actor

    def append(self, rel, lines):
        import ray

        ray.get(self.actor.append.remote(rel, lines))

    def checkpoint(self, rel, line):
        import ray

        ray.get(self.actor.checkpoint.remote(rel, line))


def _ray_job(job: Job, sink_actor) -> list[dict]:
    return run_job(job, _RemoteSink(sink_actor))


def execute(jobs: list[Job], workers: int, on_done: OnDone, executor: str = "local",
            ray_address: str | None = None) -> list[str]:
    if executor == "local":
        return run_local(jobs, workers, on_done)
    if executor == "ray":
        return run_ray(jobs, workers, on_done, ray_address)
    raise ValueError(f"unknown executor {executor!r}: use local or ray")
