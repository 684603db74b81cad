"""Choosing a backend: `open_sandbox(..., backend="auto")`.

auto: Docker when the runtime names an image, an engine answers and the image exists locally;
otherwise bubblewrap when it works here; otherwise a `SandboxUnavailable` that says what to
install. `unsafe-local` (no isolation) is never chosen automatically: it must be asked for by name.
"""
from __future__ import annotations

from pathlib import Path

from clbench.sandbox.base import Limits, Runtime, Sandbox, SandboxError, SandboxUnavailable

BACKENDS = ("auto", "docker", "bwrap", "unsafe-local")


def docker_ready(runtime: Runtime) -> tuple[bool, str]:
    from clbench.sandbox.docker_backend import engine_status, image_exists

    if not runtime.image:
        return False, "the runtime names no Docker image"
    ok, why = engine_status()
    if not ok:
        return False, why
    if not image_exists(runtime.image):
        hint = f" (build it with `{runtime.build_hint}`)" if runtime.build_hint else ""
        return False, f"Docker image {runtime.image!r} is not present locally{hint}"
    return True, ""


def choose_backend(backend: str = "auto", runtime: Runtime | None = None) -> str:
    """Resolve "auto" to a concrete backend name, or raise SandboxUnavailable explaining why none works."""
    if backend not in BACKENDS:
        raise SandboxError(f"unknown sandbox backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend
    from clbench.sandbox.bwrap import bwrap_works

    runtime = runtime or Runtime()
    docker_ok, docker_why = docker_ready(runtime)
    if docker_ok:
        return "docker"
    bwrap_ok, bwrap_why = bwrap_works()
    if bwrap_ok:
        return "bwrap"
    raise SandboxUnavailable(
        f"no sandbox backend is available: docker: {docker_why}; bwrap: {bwrap_why}. Install bubblewrap "
        "(apt-get install bubblewrap) or Docker; backend='unsafe-local' runs without any isolation.")


def open_sandbox(source: str | Path | None = None, *, backend: str = "auto", runtime: Runtime | None = None,
                 workdir: str = "/workspace", limits: Limits | None = None,
                 baseline: str | Path | None = None, prestart: bool = False) -> Sandbox:
    """Create a sandbox whose workspace starts as a copy of `source` (or the image's `workdir`).

    `baseline`: an unchanging copy of the starting tree that `changes()` compares with (saves
    copying `source` twice when the caller keeps one anyway); by default the sandbox copies it.
    `prestart`: docker starts the next sandbox's container of the same configuration in the
    background (clbench.sandbox.docker_backend); the other backends start at the first command.
    """
    name = choose_backend(backend, runtime)
    if name == "docker":
        from clbench.sandbox.docker_backend import DockerSandbox as cls
    elif name == "bwrap":
        from clbench.sandbox.bwrap import BwrapSandbox as cls
    else:
        from clbench.sandbox.local import UnsafeLocalSandbox as cls
    if source is None and name != "docker":
        raise SandboxError(f"the {name} backend starts from a folder; pass `source`")
    extra = {"prestart": prestart} if name == "docker" else {}
    return cls(source, workdir=workdir, limits=limits, runtime=runtime, baseline=baseline, **extra)
