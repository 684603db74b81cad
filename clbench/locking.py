"""Inter-process file locks for caches that several worker processes fill at once.

A run directory's one-writer lock belongs to its owner, clbench.run_dir (`RunDirectory.writer`);
the names it had here still resolve.
"""
from __future__ import annotations

import contextlib
import fcntl
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


def run_directory_writer(run_dir: str | Path):
    """Be the one writer of `run_dir` for the with-block (clbench.run_dir.RunDirectory.writer)."""
    from clbench.run_dir import RunDirectory

    return RunDirectory(run_dir).writer()


def __getattr__(name: str):
    if name in ("RUN_LOCK", "RunDirectoryBusy"):
        from clbench import run_dir

        return getattr(run_dir, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
