"""The agent's sandboxed workspace: the host Python bound read-only, an inbox the env rewrites.

The sandbox runs the host interpreter (which has numpy, scipy, scikit-learn and pandas) from its
installation prefix mounted read-only, plus any folder outside it that holds those libraries or
what they require; clbench's own package folder (generator code and task data) is hidden, and
neither the repository of an editable install nor any other sys.path folder (the current folder,
a script's folder, PYTHONPATH: where earlier runs and their answers live) is mounted, so neither
the seed, future sales nor another run's forecasts can be reached from inside.
"""
from __future__ import annotations

import re
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


#: what the workspace offers its commands' python3 (docs: numpy, scipy, scikit-learn and pandas)
SANDBOX_PACKAGES = ("numpy", "scipy", "scikit-learn", "pandas")


def _required(name: str) -> list[str]:
    """The distributions `name` needs at run time (extras left out), by the names they are installed under."""
    from importlib import metadata

    try:
        requires = metadata.distribution(name).requires or []
    except metadata.PackageNotFoundError:
        return []
    return [m.group(1) for r in requires if "extra ==" not in r and (m := re.match(r"\s*([A-Za-z0-9][\w.-]*)", r))]


def _outside_site_dirs(prefixes) -> tuple[tuple[str, str], ...]:
    """The folders outside the interpreter's prefixes that hold SANDBOX_PACKAGES or what they require (a
    venv's .pth may add a shared dependency folder): bound too, or the sandbox's python3 would not find
    numpy there. Only such folders: other sys.path entries (the current folder under `python -m`, a
    script's folder, PYTHONPATH) hold a user's files, such as earlier runs' trajectories with their
    answers, and are never bound. Nor is a folder holding clbench itself."""
    from importlib import metadata

    import clbench

    own = Path(clbench.__file__).resolve().parent.parent
    todo, seen, found = list(SANDBOX_PACKAGES), set(), []
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        todo += _required(name)
        try:
            path = Path(metadata.distribution(name).locate_file("")).resolve()
        except metadata.PackageNotFoundError:
            continue
        if not path.is_dir() or str(path).startswith("/usr/") or (path / "clbench").exists():
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
