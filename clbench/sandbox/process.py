"""Running one host process tree under a wall-clock limit with capped output.

Used by the unsafe-local backend (bwrap's long-lived sandbox has a loop of its own,
clbench.sandbox.session): the process starts in a new session; one loop waits on both pipes and
on the process's exit together (`select.poll` over the pipes and a pidfd), feeding the output
into `OutputCapture`s, and on timeout or an output flood the whole process group is killed.
No thread is started and nothing sleeps: a command returns the moment it ends (issue 34: reader
threads and `Popen.wait`'s sleep-and-poll were most of a short command's round trip).
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from typing import Callable

from clbench.sandbox.base import MiB, CommandResult, Limits, OutputCapture


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


#: seconds between two checks of a command's watchdog (disk quota without a tmpfs)
WATCH_INTERVAL = 0.2
#: seconds between two checks of the process's exit where no pidfd can wake the loop
EXIT_POLL = 0.005
#: seconds the pipes are still read after the process ended (what it left running holds them)
DRAIN = 5.0


def _pidfd(proc: subprocess.Popen) -> int | None:
    """A descriptor that becomes readable when `proc` exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return None


def run_process(argv: list[str], limits: Limits, *, env: dict[str, str] | None = None,
                cwd: str | None = None, watch: Callable[[], str | None] | None = None) -> CommandResult:
    """Run argv; kill its process group after `limits.timeout` s or `limits.output_kill_mb` of output,
    or as soon as `watch()` returns a reason."""
    captures = {}
    reason: list[str] = []
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=cwd, start_new_session=True, close_fds=True)
    exit_fd = _pidfd(proc)
    out = captures[proc.stdout.fileno()] = OutputCapture(limits.output_chars, limits.output_kill_mb * MiB)
    err = captures[proc.stderr.fileno()] = OutputCapture(limits.output_chars, limits.output_kill_mb * MiB)
    poller = select.poll()
    for fd in (*captures, *([exit_fd] if exit_fd is not None else [])):
        poller.register(fd, select.POLLIN)
    open_pipes = set(captures)

    def stop(why: str) -> None:
        if not reason:
            reason.append(why)
        _kill_group(proc)

    timed_out, ended_at = False, None
    deadline, next_watch = start + limits.timeout, start + WATCH_INTERVAL
    try:
        while True:
            now = time.monotonic()
            if ended_at is None and proc.poll() is not None:
                ended_at = now
                _kill_group(proc)  # stray members of the group (unsafe-local) must not outlive the command
            if ended_at is not None:
                if not open_pipes or now >= ended_at + DRAIN:
                    break
                wake = ended_at + DRAIN
            else:
                if now >= deadline:
                    timed_out = True
                    stop(f"timed out after {limits.timeout:g} s; the command and all its processes were killed")
                    proc.wait()
                    continue
                if watch is not None and now >= next_watch:
                    why = watch()
                    if why:
                        stop(why)
                    next_watch = now + WATCH_INTERVAL
                wake = min(deadline, next_watch) if watch is not None else deadline
                if exit_fd is None:
                    wake = min(wake, now + EXIT_POLL)
            for fd, _ in poller.poll(max(0.0, wake - now) * 1000):
                if fd == exit_fd:
                    poller.unregister(fd)  # the loop's next turn reaps the process
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    poller.unregister(fd)
                    open_pipes.discard(fd)
                elif not captures[fd].feed(chunk):
                    stop(f"output exceeded {limits.output_kill_mb} MB; the command was killed")
    finally:
        if exit_fd is not None:
            os.close(exit_fd)
        _kill_group(proc)
        if proc.returncode is None:
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            pipe.close()
    stdout, cut_out = out.text()
    stderr, cut_err = err.text()
    killed = reason[0] if reason else None
    code = None if killed else proc.returncode
    if code is not None and code < 0:
        killed = f"killed by signal {signal.Signals(-code).name}"
        code = None
    return CommandResult(code, stdout, stderr, time.monotonic() - start, timed_out=timed_out, killed=killed,
                         truncated=cut_out or cut_err)
