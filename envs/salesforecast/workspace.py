"""The agent's sandboxed workspace: the host Python bound read-only, an inbox the env rewrites.

The sandbox runs the host interpreter (which has numpy, scipy, scikit-learn and pandas) from its
installation prefix mounted read-only; clbench's own package folder (generator code and task
data) is hidden, and the repository of an editable install is never mounted, so neither the
seed nor future sales can be reached from inside.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from clbench.sandbox import Limits, Runtime, Sandbox, open_sandbox

INBOX = "inbox"
#: one thread per numeric library: commands share the machine with parallel rollouts
_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "JOBLIB_MULTIPROCESSING")


def host_python_runtime(image: str | None = None) -> Runtime:
    """Read-only binds of the running interpreter (and its venv), first on PATH; clbench hidden.

    `image` is for the docker backend: any image with python3, numpy, scipy, scikit-learn and pandas.
    """
    import clbench

    prefixes = dict.fromkeys(str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix))
    binds = tuple((p, p) for p in prefixes if not p.startswith("/usr/")) + _outside_site_dirs(prefixes)
    path = ":".join(f"{p}/bin" for p in prefixes) + ":/usr/local/bin:/usr/bin:/bin"
    env = [("PATH", path)] + [(name, "0" if name.startswith("JOBLIB") else "1") for name in _THREADS]
    return Runtime(image=image, binds=binds, hide=(str(Path(clbench.__file__).resolve().parent),), env=tuple(env))


def _outside_site_dirs(prefixes) -> tuple[tuple[str, str], ...]:
    """Site folders on sys.path outside the interpreter's prefixes (a venv's .pth may add one, e.g.
    a shared dependency folder): bound too, or the sandbox's python3 would not find numpy there.
    Folders holding clbench itself are never bound."""
    import clbench

    own = Path(clbench.__file__).resolve().parent.parent
    found = []
    for entry in sys.path:
        path = Path(entry).resolve() if entry else None
        if path is None or not path.is_dir() or str(path).startswith("/usr/") or (path / "clbench").exists():
            continue
        if any(path.is_relative_to(p) for p in prefixes) or own.is_relative_to(path):
            continue
        found.append((str(path), str(path)))
    return tuple(dict.fromkeys(found))


def open_workspace(backend: str, timeout: float, image: str | None = None) -> Sandbox:
    """A sandbox over a new, empty workspace."""
    empty = tempfile.mkdtemp(prefix="clbench-salesforecast-")
    try:
        return open_sandbox(empty, backend=backend, runtime=host_python_runtime(image), limits=Limits(timeout=timeout))
    finally:
        shutil.rmtree(empty, ignore_errors=True)


def refresh_inbox(sb: Sandbox, files: dict[str, str]) -> None:
    """Replace inbox/ with `files`; whatever the agent put there (even a link) is removed first."""
    inbox = sb.host_workspace / INBOX
    if inbox.is_symlink() or inbox.is_file():
        inbox.unlink()
    elif inbox.exists():
        shutil.rmtree(inbox)
    for rel, content in files.items():
        sb.write_file(rel, content)
