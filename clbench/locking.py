"""Inter-process file locks for caches that several worker processes fill at once.

A run directory's one-writer lock belongs to its owner, clbench.run_dir (`RunDirectory.writer`).
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

