"""Inter-process file locks: for caches that several worker processes fill at once, and the one
writer a run directory may have."""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: str | Path):
    """Hold an exclusive `flock` on `path` (created if missing) for the with-block."""
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


#: the lock file of a run directory; held by the one clbench process writing it
RUN_LOCK = ".writer.lock"


class RunDirectoryBusy(RuntimeError):
    """Another clbench process writes this run directory."""


@contextlib.contextmanager
def run_directory_writer(run_dir: str | Path):
    """Be the one writer of `run_dir` for the with-block, or raise RunDirectoryBusy at once (two
    processes appending the same run, e.g. two `--resume`s, would duplicate its records). The lock
    goes with the process, however it ends, so a SIGKILLed run never leaves the directory locked."""
    path = Path(run_dir) / RUN_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
            raise RunDirectoryBusy(f"{run_dir} is being written by another clbench process ({holder}); "
                                   "wait for it to finish or stop it, then --resume") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
