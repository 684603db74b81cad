"""A `Runtime` built from a virtualenv on the host (bwrap and unsafe-local backends).

The venv is mounted read-only at `mount`; its interpreter links to the base Python, whose
prefix is mounted at its own path when it lies outside /usr. The base interpreter's
site-packages (where clbench itself and its task data may be installed) are hidden, so only the
venv's packages and the standard library are visible.
"""
from __future__ import annotations

import site
import sys
import sysconfig
from pathlib import Path

from clbench.sandbox.base import Runtime


def base_site_packages() -> list[str]:
    """site-packages folders of the running interpreter and its base installation."""
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    paths.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    base = {p.replace(sys.prefix, sys.base_prefix, 1) for p in paths}
    return sorted(paths | base)


def venv_runtime(venv: str | Path, mount: str = "/opt/venv", image: str | None = None,
                 env: dict[str, str] | None = None, build_hint: str = "") -> Runtime:
    """Runtime with `venv` at `mount` first on PATH (and `image` for the docker backend)."""
    binds = [(str(Path(venv).resolve()), mount)]
    prefix = Path(sys.base_prefix).resolve()
    if not str(prefix).startswith("/usr/"):
        binds.append((str(prefix), str(prefix)))
    hide = [p for p in base_site_packages() if Path(p).is_dir()]
    clbench_pkg = Path(__file__).resolve().parents[1]
    hide.append(str(clbench_pkg))  # never let a sandbox read the package's task data
    full_env = {"PATH": f"{mount}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "VIRTUAL_ENV": mount}
    full_env.update(env or {})
    return Runtime(image=image, binds=tuple(binds), hide=tuple(dict.fromkeys(hide)),
                   env=tuple(sorted(full_env.items())), build_hint=build_hint)
