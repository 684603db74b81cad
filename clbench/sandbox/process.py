"""Running one host process tree under a wall-clock limit with capped output.

Used by the bwrap and unsafe-local backends: the process starts in a new session, both pipes
are drained by threads into `OutputCapture`s, and on timeout or an output flood the whole
process group is killed (bwrap's --die-with-parent then takes down the sandbox's pid namespace).
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from typing import Callable

from clbench.sandbox.base import MiB, CommandResult, Limits, OutputCapture, pump


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


#: seconds between two checks of a command's watchdog (disk quota without a tmpfs)
WATCH_INTERVAL = 0.2


class _Exit:
    """Waits for a child's exit the moment it happens: `Popen.wait(timeout)` polls with sleeps of up
    to 50 ms, which was most of a short sandboxed command's round trip. A pidfd (Linux 5.3+) becomes
    readable when the child exits; without one, this falls back to `Popen.wait`."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        try:
            self.fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self.fd = None

    def wait(self, timeout: float) -> None:
        """Like `proc.wait(timeout)`: returns once the child ended, else raises TimeoutExpired."""
        if self.fd is not None:
            poll = select.poll()
            poll.register(self.fd, select.POLLIN)
            if not poll.poll(max(0.0, timeout) * 1000):
                raise subprocess.TimeoutExpired(self.proc.args, timeout)
            self.proc.wait()
            return
        self.proc.wait(timeout=timeout)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def run_process(argv: list[str], limits: Limits, *, env: dict[str, str] | None = None,
                cwd: str | None = None, watch: Callable[[], str | None] | None = None,
                pass_fds: tuple[int, ...] = (), started: Callable[[int], None] | None = None) -> CommandResult:
    """Run argv; kill its process group after `limits.timeout` s or `limits.output_kill_mb` of output,
    or as soon as `watch()` returns a reason. `pass_fds` stay open in the child; `started(pid)` is
    told the child's pid before anything is watched."""
    out = OutputCapture(limits.output_chars, limits.output_kill_mb * MiB)
    err = OutputCapture(limits.output_chars, limits.output_kill_mb * MiB)
    reason: list[str] = []
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=cwd, start_new_session=True, close_fds=True, pass_fds=pass_fds)
    exit_ = _Exit(proc)
    if started is not None:
        started(proc.pid)

    def flood():
        if not reason:
            reason.append(f"output exceeded {limits.output_kill_mb} MB; the command was killed")
        _kill_group(proc)

    threads = [threading.Thread(target=pump, args=(proc.stdout, out, flood), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, err, flood), daemon=True)]
    for t in threads:
        t.start()
    timed_out = False
    deadline = start + limits.timeout
    try:
        while watch is not None:
            try:
                exit_.wait(max(0.0, min(WATCH_INTERVAL, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                why = watch()
                if why and not reason:
                    reason.append(why)
                    _kill_group(proc)
                if time.monotonic() >= deadline:
                    raise
        exit_.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        if not reason:
            reason.append(f"timed out after {limits.timeout:g} s; the command and all its processes were killed")
        _kill_group(proc)
        proc.wait()
    finally:
        exit_.close()
        _kill_group(proc)  # stray members of the group (unsafe-local) must not outlive the command
    for t in threads:
        t.join(timeout=5)
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
