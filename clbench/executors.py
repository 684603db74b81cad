"""Executors run runner jobs: inline, on a local spawn process pool (default) or on Ray.

All of them report each finished job to `on_done(job, records, error)`; records reach the run
directory while a job runs, through a sink (clbench.run_dir.LocalSink locally; on Ray workers post
batches to a mailbox actor that the driver drains and writes, so remote workers need no shared
filesystem and the driver stays the run directory's only writer).
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import ctypes
import multiprocessing
import os
import queue as queue_mod
import signal
import threading
import time
from typing import Callable

from clbench.results import encode_lines
from clbench.run_dir import LocalSink
from clbench.runner import Job, run_job

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


def run_local(jobs: list[Job], workers: int, on_done: OnDone, poll: Callable[[], None] | None = None) -> list[str]:
    """Inline for one worker, else a spawn process pool; returns the failed jobs' messages. Inline,
    `poll` (the driver's look at new records: its error policy) runs after an errored or faulted
    instance and after each job, before the next instance looks for the stop flag."""
    errors = []
    if workers == 1 or len(jobs) <= 1:
        sinks: dict[str, LocalSink] = {}  # one per run directory: its results.jsonl opened once, not per job
        try:
            for job in jobs:
                out = job.config.out
                sink = sinks.get(out) or sinks.setdefault(out, LocalSink(out, poll))
                try:
                    records = run_job(job, sink)
                    if poll is not None:  # the job's last instance: seen before the next job's first
                        poll()
                    on_done(job, records, None)
                except Exception as exc:
                    errors.append(_failure(job, exc))
                    on_done(job, None, errors[-1])
        finally:
            for sink in sinks.values():
                sink.close()
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


#: a Ray worker sends its buffered writes at least this often
FLUSH_SECONDS = 0.25
#: environment variable that marks every process of a Ray instance clbench starts itself
RAY_RUN_TAG = "CLBENCH_RAY_RUN"


#: jobs handed to Ray at a time per CPU of the cluster once its first job reported: enough that no
#: Ray worker waits for its next job (a job starts tens of ms after it is handed over: at 2 per CPU
#: a 2-node cluster's CPUs were busy 70% of a run of short jobs, SpectrumMonitor 240 rollouts 30.3 s
#: against the local pool's 19.8 s; at 8 90%, 24.0 s; at 16 no more); the rest wait in the driver
RAY_JOBS_PER_CPU = 8
#: ... and before that, while Ray starts: the driver plays jobs itself meanwhile, from the other end
RAY_JOBS_PER_CPU_STARTING = 2


def run_ray(jobs: list[Job], workers: int, on_done: OnDone, address: str | None = None) -> list[str]:
    """Fan jobs out as Ray tasks (one CPU each) on a local instance or the cluster at `address`.

    Records stream back in batches: each job is a Ray streaming generator that plays in a thread
    and yields the writes it made every FLUSH_SECONDS, then its records; the driver writes them into
    the run directory itself, so the process holding the directory's lock is its only writer (no
    actor to start, no round trip per write: those made Ray 3.6-4.4x slower than the local pool).
    A job's writes arrive in the order it made them, so a checkpoint never lands before the records
    it covers.

    Importing Ray, connecting and starting fresh Ray workers took seconds in which no job played
    (workers first reported 2-7 s after the driver called this): the driver plays jobs itself
    meanwhile (_DriverPlays, the shortest first, one at a time, in this process as the inline
    executor would), from the first submission on: a thread playing earlier held the GIL while
    Ray was imported and connected, and made that take most of a short run (and on a private
    instance RayLifeline ends every process started before ray.init returns). It stops taking new
    jobs once a Ray job has reported. Ray is handed jobs dearest first (rollout.dearest_first),
    RAY_JOBS_PER_CPU_STARTING per cluster CPU at a time until then (so the driver has jobs to take),
    RAY_JOBS_PER_CPU after.
    """
    helper = _DriverPlays(jobs)
    try:
        import ray
    except ImportError:
        helper.stop()
        raise RuntimeError("the Ray executor needs Ray: pip install 'clbench[ray]'") from None

    started = False
    lifeline = None
    try:
        if not ray.is_initialized():
            if address:
                check_ray_address(address)
            else:
                lifeline = RayLifeline()
            # "local": a new instance of our own, never a cluster some `ray start` left on this machine
            kwargs = {"address": address} if address else {"address": "local", "num_cpus": workers}
            handler = signal.getsignal(signal.SIGTERM)
            try:
                ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False, **kwargs)
            finally:
                if lifeline:
                    lifeline.untag()  # processes the driver starts later are not Ray's
            if handler is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, handler)  # ray.init replaces it; SIGTERM unwinds like Ctrl-C
            started = True
    except BaseException:
        helper.stop()
        if lifeline:
            lifeline.close()
        raise
    writer = LocalSink(jobs[0].config.out if jobs else ".")
    errors: list[str] = []

    def finish(job: Job, records, error) -> None:
        if error:
            errors.append(error)
        on_done(job, records, error)

    try:
        # SPREAD: jobs go to every node alike. Ray's default prefers the driver's node, and at the end
        # of a run the jobs queued there were played one after another while the other node's worker
        # sat idle (SpectrumMonitor, 60 rollouts, 2-node cluster: its last 0.7-1.7 s)
        remote_job = ray.remote(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")(_ray_job)
        cpus = max(1, int(ray.cluster_resources().get("CPU", workers)))
        streams: dict = {}

        def submit() -> None:
            # while Ray starts, few jobs go to it (the driver plays from the other end of the queue)
            capacity = cpus * (RAY_JOBS_PER_CPU if helper.stopped.is_set() else RAY_JOBS_PER_CPU_STARTING)
            while len(streams) < capacity and (job := helper.take_first()) is not None:
                streams[remote_job.remote(job)] = job

        submit()
        # only now: a playing thread holds the GIL, and the imports, ray.init and the submissions above
        # waited for it at every file read and system call (the first Ray job reported ~15 s into a
        # 20 s run, the driver having played most of it alone)
        helper.begin()
        while streams or helper.playing():
            for item in helper.finished():
                finish(*item)
            submit()
            if not streams:  # the driver plays the last jobs itself
                item = helper.wait_finished(0.25)
                if item is not None:
                    finish(*item)
                continue
            ready, _ = ray.wait(list(streams), num_returns=1, timeout=0.25)
            if not ready:
                continue
            stream = ready[0]
            job = streams[stream]
            helper.stop()  # Ray's workers are up: the driver finishes its job and takes no other
            try:
                kind, payload = ray.get(next(stream))
            except Exception as exc:  # the job raised: what it wrote before came in earlier batches
                del streams[stream]
                finish(job, None, _failure(job, exc))
                submit()
                continue
            if kind == "ops":
                _write(writer, payload)
            else:
                del streams[stream]
                finish(job, payload, None)
                submit()
        for item in helper.finished():
            finish(*item)
        return errors
    finally:
        helper.stop()
        writer.close()
        if started:
            ray.shutdown()
        if lifeline:
            lifeline.close()


class _DriverPlays:
    """The Ray driver as a worker while Ray starts: a thread playing jobs from the end of the
    queue (the shortest; Ray is handed them from the front) until `stop`, each in this process
    through its own LocalSink (appends to results.jsonl take the file lock as every writer's do).
    What it finished is collected by the driver's loop (`finished`), which reports it."""

    def __init__(self, jobs: list[Job]):
        self.queue = collections.deque(jobs)
        self.lock = threading.Lock()
        self.done: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._play, name="clbench-driver-plays", daemon=True)

    def begin(self) -> None:
        if not self.thread.is_alive() and not self.thread.ident:
            self.thread.start()

    #: at most this many jobs (None: until stopped); tests set it to see Ray play the others
    most: int | None = None

    def _play(self) -> None:
        played = 0
        while not self.stopped.is_set() and (self.most is None or played < self.most):
            with self.lock:
                job = self.queue.pop() if self.queue else None
            if job is None:
                return
            played += 1
            try:
                self.done.put((job, run_job(job), None))
            except Exception as exc:
                self.done.put((job, None, _failure(job, exc)))

    def take_first(self) -> Job | None:
        with self.lock:
            return self.queue.popleft() if self.queue else None

    def stop(self) -> None:
        self.stopped.set()

    def playing(self) -> bool:
        return self.thread.is_alive() or not self.done.empty()

    def finished(self) -> list[tuple]:
        out = []
        while not self.done.empty():
            out.append(self.done.get())
        return out

    def wait_finished(self, timeout: float) -> tuple | None:
        try:
            return self.done.get(timeout=timeout)
        except queue_mod.Empty:
            return None


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


def _write(sink: LocalSink, ops: list[tuple]) -> None:
    for rel, data, line in ops:
        if data is None:
            sink.checkpoint(rel, line)
        else:
            sink.write(rel, data)


class _ListSink:
    """A Ray job's sink: its writes, in order, until the job's generator sends them. Lines are
    encoded here, in the worker, as the local pool's workers do: bytes cost Ray nothing to move,
    and the driver, which writes every job's lines, only writes them (encoding and unpickling every
    job's records there made it the bottleneck of a busy cluster)."""

    def __init__(self):
        self.ops: list[tuple] = []
        self.lock = threading.Lock()

    def append(self, rel: str, lines: list[dict]) -> None:
        self.write(rel, encode_lines(lines))

    def write(self, rel: str, data: bytes | bytearray) -> None:
        """Lines encoded already (JobFiles encodes each instance as it is handed over)."""
        with self.lock:
            self.ops.append((rel, data, None))

    def checkpoint(self, rel: str, line: bytes) -> None:
        with self.lock:
            self.ops.append((rel, None, line))

    def take(self) -> list[tuple]:
        with self.lock:
            ops, self.ops = self.ops, []
        return ops


def _ray_job(job: Job):
    """Plays `job` in a thread and yields ("ops", writes) every FLUSH_SECONDS, then ("done", records)
    (or raises the job's error after yielding what it wrote)."""
    sink, outcome, finished = _ListSink(), {}, threading.Event()

    def play():
        try:
            outcome["records"] = run_job(job, sink)
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            finished.set()

    threading.Thread(target=play, name="clbench-job", daemon=True).start()
    while not finished.wait(FLUSH_SECONDS):
        ops = sink.take()
        if ops:
            yield "ops", ops
    ops = sink.take()
    if ops:
        yield "ops", ops
    if "error" in outcome:
        raise outcome["error"]
    yield "done", outcome["records"]


_SWEEP = r"""
import os, select, signal, sys, time
tag = ("%s=" % sys.argv[1] + sys.argv[2]).encode()
def procs():
    # pid -> (parent, start time, tagged); the start time tells a reused pid apart
    found = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open("/proc/%s/stat" % pid, "rb") as f:
                    stat = f.read().rsplit(b")", 1)[1].split()
                with open("/proc/%s/environ" % pid, "rb") as f:
                    tagged = tag in f.read().split(b"\0")
            except OSError:
                continue
            found[int(pid)] = (int(stat[1]), stat[19], tagged)
    return found
def ray_processes(seen):
    # the tagged processes and their descendants (setproctitle wipes some helpers' environ)
    now = procs()
    mine = {pid for pid, (_, start, tagged) in now.items() if tagged or seen.get(pid) == start}
    grew = True
    while grew:
        more = {pid for pid, (parent, _, _) in now.items() if parent in mine} - mine
        mine |= more
        grew = bool(more)
    return {pid: now[pid][1] for pid in mine}
seen, began = {}, time.monotonic()
# until the driver's end closes (exit or kill); Ray's helpers start with it, so later scans are rarer
while not select.select([sys.stdin], [], [], 0.5 if time.monotonic() - began < 20 else 2.0)[0]:
    seen.update(ray_processes(seen))
deadline, quiet = time.monotonic() + 60, 0
while quiet < 3 and time.monotonic() < deadline:  # a raylet may still be starting workers
    found = ray_processes(seen)
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    seen.update(found)
    quiet = 0 if found else quiet + 1
    time.sleep(0.2)
"""


class RayLifeline:
    """Ends every process of a Ray instance clbench starts itself when the driver ends, however it
    ends. Ray's helpers outlived a SIGKILLed driver (its node agents wait minutes for a dead GCS).

    Every process Ray starts inherits RAY_RUN_TAG from the driver; a watcher in its own session
    notes the tagged processes and their descendants while the driver lives (some helpers' titles
    overwrite their environment), holds a pipe from the driver, and when the pipe closes kills them.
    """

    def __init__(self):
        import secrets
        import subprocess
        import sys

        self.tag = f"{os.getpid()}-{secrets.token_hex(8)}"
        env = {k: v for k, v in os.environ.items() if k != RAY_RUN_TAG}
        self.watcher = subprocess.Popen([sys.executable, "-I", "-c", _SWEEP, RAY_RUN_TAG, self.tag],
                                        stdin=subprocess.PIPE, env=env, start_new_session=True)
        os.environ[RAY_RUN_TAG] = self.tag

    def untag(self) -> None:
        if os.environ.get(RAY_RUN_TAG) == self.tag:
            del os.environ[RAY_RUN_TAG]

    def close(self) -> None:
        """After ray.shutdown: sweep what is left and wait for the sweep."""
        self.untag()
        self.watcher.stdin.close()
        try:
            self.watcher.wait(timeout=70)
        except Exception:
            pass


def execute(jobs: list[Job], workers: int, on_done: OnDone, executor: str = "local",
            ray_address: str | None = None, poll: Callable[[], None] | None = None) -> list[str]:
    if executor == "local":
        return run_local(jobs, workers, on_done, poll)
    if executor == "ray":
        return run_ray(jobs, workers, on_done, ray_address)
    raise ValueError(f"unknown executor {executor!r}: use local or ray")
