"""Preparing CodeRepair's runtimes: sdists, host venvs (bwrap) and Docker images (docker).

Docker images are built from containers/coderepair/Dockerfile, one per repository release, with
the release's import path as a build argument and a context holding its pinned
requirements and their wheels, downloaded on the host with pip (`pip download`, or `pip wheel`
for the few pure-Python packages published only as sdists), so the build needs no network:
it runs with `network_mode="none"`. `--offline-base` first makes a base image from Debian
packages (containers/make-offline-base.sh: debootstrap + docker import) for machines without
a container registry; otherwise the Dockerfiles' default `python:3.11-slim` is used.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from clbench.sandbox.base import BuildError
from clbench.env import load_task_spec
from clbench.envs.coderepair.runtime import ensure_venv, pth_line, requirements_hash
from clbench.envs.coderepair.sources import cache_lock, cache_root, pristine_tree

#: Python of both base images (Debian bookworm's python3 and python:3.11-slim)
IMAGE_PYTHON = "3.11"
OFFLINE_BASE = "clbench/offline-base:bookworm"


def containers_dir() -> Path:
    """The Dockerfiles and scripts, shipped as package data of clbench.containers."""
    import clbench.containers

    path = Path(clbench.containers.__file__).resolve().parent
    if not (path / "make-offline-base.sh").is_file():
        raise BuildError(f"containers/ is incomplete at {path}; reinstall clbench")
    return path


def repos() -> dict[str, dict]:
    return load_task_spec("coderepair")["repos"]


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "--no-input"],
                          capture_output=True, text=True)


def download_wheels(name: str, repo: dict, log=print) -> Path:
    """Wheels of every pinned requirement for the image's Python (cached per requirement set)."""
    dest = cache_root() / "wheels" / f"{name}-py{IMAGE_PYTHON}-{requirements_hash(repo)}"
    marker = dest / ".complete"
    if marker.is_file():
        return dest
    arch = platform.machine()
    platforms = [f"manylinux2014_{arch}", f"manylinux_2_17_{arch}", f"manylinux_2_28_{arch}"]
    with cache_lock(f"wheels-{name}"):
        dest.mkdir(parents=True, exist_ok=True)
        py = IMAGE_PYTHON.replace(".", "")
        for req in repo["requirements"]:
            args = ["download", "--no-deps", "--only-binary=:all:", "--python-version", IMAGE_PYTHON,
                    "--implementation", "cp", "--abi", f"cp{py}", "--abi", "abi3", "--abi", "none"]
            for plat in platforms:
                args += ["--platform", plat]
            proc = _pip(*args, "-d", str(dest), req)
            if proc.returncode != 0:  # published as an sdist only: build a (pure-Python) wheel here
                log(f"  {req}: no wheel on the index, building one")
                proc = _pip("wheel", "--no-deps", "-w", str(dest), req)
                if proc.returncode != 0:
                    raise BuildError(f"could not get a wheel of {req}:\n{proc.stderr[-2000:]}")
        marker.write_text("\n".join(repo["requirements"]))
    return dest


def image_present(client, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_image(client, name: str, repo: dict, base_image: str, force: bool = False, log=print) -> str:
    """Build `repo["image"]` from containers/coderepair/Dockerfile on `base_image`, offline."""
    tag = repo["image"]
    if image_present(client, tag) and not force:
        log(f"{tag}: present (--force rebuilds)")
        return tag
    wheels = download_wheels(name, repo, log)
    with tempfile.TemporaryDirectory(prefix=f"clbench-build-{name}-") as ctx:
        ctx_path = Path(ctx)
        shutil.copy(containers_dir() / "coderepair" / "Dockerfile", ctx_path / "Dockerfile")
        (ctx_path / "requirements.txt").write_text("\n".join(repo["requirements"]) + "\n")
        shutil.copytree(wheels, ctx_path / "wheels", ignore=shutil.ignore_patterns(".complete"))
        log(f"{tag}: building on {base_image}")
        # the checkout's import root inside the sandbox: the same .pth line as the bubblewrap venvs'
        args = {"BASE_IMAGE": base_image, "IMPORT_PATH": pth_line(repo, load_task_spec("coderepair")["workdir"])}
        try:
            client.images.build(path=ctx, tag=tag, buildargs=args, pull=False, rm=True,
                                forcerm=True, network_mode="none", labels={"clbench.repo": name})
        except Exception as exc:  # noqa: BLE001 - BuildError carries the docker message
            hint = "" if image_present(client, base_image) else (
                f" (base image {base_image} is not present locally; use --offline-base on machines "
                "without a container registry)")
            raise BuildError(f"building {tag} failed: {exc}{hint}") from None
    log(f"{tag}: built")
    return tag


def build_offline_base(force: bool = False, log=print) -> str:
    script = containers_dir() / "make-offline-base.sh"
    env = {"FORCE": "1"} if force else {}
    log(f"{OFFLINE_BASE}: making it from Debian packages ({script.name})")
    proc = subprocess.run(["bash", str(script), OFFLINE_BASE], env={**os.environ, **env})
    if proc.returncode != 0:
        raise BuildError(f"{script} failed with exit code {proc.returncode}")
    return OFFLINE_BASE


def prepare_sources(log=print) -> None:
    for name, repo in repos().items():
        tree = pristine_tree(repo["pypi"], repo["version"], repo["sdist_sha256"])
        log(f"{name} {repo['version']}: sdist verified, unpacked at {tree}")


def prepare_venvs(workdir: str, log=print) -> None:
    for name, repo in repos().items():
        venv = ensure_venv(name, repo, workdir)
        log(f"{name}: bwrap test venv at {venv}")


def build_images(offline_base: bool = False, force: bool = False, log=print) -> list[str]:
    from clbench.sandbox.docker_backend import docker_client

    client = docker_client()
    if client is None:
        raise BuildError("no Docker engine answers; start dockerd (or skip Docker with --skip-docker)")
    base = build_offline_base(force=False, log=log) if offline_base else "python:3.11-slim"
    return [build_image(client, name, repo, base, force=force, log=log) for name, repo in repos().items()]
