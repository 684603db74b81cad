"""What the repositories' test suites run with: a host venv (bwrap) or a Docker image.

bwrap: `<cache>/venv-<repo>-<hash of requirements>` made with the running interpreter and pip
from PyPI on the host, then mounted read-only at /opt/venv in every sandbox; scripts are
rewritten to /opt/venv, and a .pth file puts the checkout's import root on sys.path (the
repository itself is never installed, so tests import the agent's code). Docker: the image
built from containers/coderepair/Dockerfile by `clbench containers build`, with the same layout
and the same .pth line.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from clbench.envs.coderepair.sources import cache_lock, cache_root
from clbench.sandbox import Runtime, venv_runtime

VENV_MOUNT = "/opt/venv"
BUILD_HINT = "clbench containers build --offline-base"


#: the venv layout: bump when what a venv holds changes (2: pip removed, it vendors a release under repair)
VENV_LAYOUT = 2


def requirements_hash(repo: dict) -> str:
    text = ("\n".join(sorted(repo["requirements"])) + f"\n{sys.version_info[:2]}\n{repo['import_root']}"
            + f"\nlayout {VENV_LAYOUT}")
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def pth_line(repo: dict, workdir: str) -> str:
    """The sys.path entry of the checkout inside the sandbox (src layout or flat)."""
    root = repo["import_root"].strip("/")
    return workdir if root in ("", ".") else f"{workdir}/{root}"


def ensure_venv(name: str, repo: dict, workdir: str) -> Path:
    """Build (once) and return the host venv with `repo`'s pinned test dependencies."""
    venv = cache_root() / f"venv-{name}-{requirements_hash(repo)}"
    marker = venv / ".clbench-ready"
    if marker.is_file():
        return venv
    with cache_lock(f"venv-{name}"):
        if marker.is_file():
            return venv
        tmp = Path(tempfile.mkdtemp(dir=cache_root(), prefix=f".venv-{name}-"))
        try:
            subprocess.run([sys.executable, "-m", "venv", str(tmp)], check=True, capture_output=True)
            proc = subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "install", "--no-deps",
                                   "--disable-pip-version-check", "--no-input", *repo["requirements"]],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"installing the {name} test dependencies failed:\n{proc.stderr[-3000:]}")
            purelib = Path(subprocess.run([str(tmp / "bin" / "python"), "-c",
                                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                          check=True, capture_output=True, text=True).stdout.strip())
            (purelib / "clbench-workspace.pth").write_text(pth_line(repo, workdir) + "\n")
            remove_pip(tmp, purelib)
            _relocate(tmp, VENV_MOUNT)
            shutil.rmtree(venv, ignore_errors=True)
            os.replace(tmp, venv)
            for path in [venv, *venv.rglob("*")]:  # world-readable for the sandbox's uid
                if not path.is_symlink():
                    path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
            marker.write_text(requirements_hash(repo))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return venv


def remove_pip(venv: Path, purelib: Path) -> None:
    """No pip at test time: it vendors other packages' sources (tenacity among them), a copy of the
    code under repair, and nothing in a sandbox installs anything."""
    for path in [*purelib.glob("pip"), *purelib.glob("pip-*.dist-info"), *(venv / "bin").glob("pip*")]:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


#: folders of the host's Python installations that hold copies of released packages (pip vendors
#: tenacity; the bundled pip wheels contain it): hidden in every bwrap sandbox (a tmpfs over them)
def hidden_copies() -> list[str]:
    import glob

    base = sys.base_prefix
    patterns = ["/usr/lib/python3/dist-packages/pip", "/usr/lib/python3*/dist-packages/pip",
                "/usr/local/lib/python3*/*-packages/pip", "/usr/share/python-wheels", "/usr/lib/python3*/ensurepip",
                f"{base}/lib/python3*/ensurepip", f"{base}/lib/python3*/site-packages"]
    return sorted({p for pattern in patterns for p in glob.glob(pattern) if os.path.isdir(p)})


def _relocate(venv: Path, mount: str) -> None:
    """Point the venv's scripts (shebangs, activate) at `mount`, where the sandbox sees it."""
    old = str(venv)
    for script in (venv / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        data = script.read_bytes()
        if old.encode() in data[:4096] or script.name.startswith("activate"):
            script.write_bytes(data.replace(old.encode(), mount.encode()))
    cfg = venv / "pyvenv.cfg"
    cfg.write_text(cfg.read_text().replace(old, mount))


def runtime_for(name: str, repo: dict, workdir: str, backend: str) -> Runtime:
    """The Runtime of `repo` for `backend` (the venv is only built when a host backend needs it)."""
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PYTHONPATH": pth_line(repo, workdir)}  # as the .pth file; also where nothing is mounted
    if backend == "docker":
        return Runtime(image=repo["image"], env=tuple(sorted({**env, "PATH": f"{VENV_MOUNT}/bin:/usr/local/sbin:"
                       "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "VIRTUAL_ENV": VENV_MOUNT}.items())),
                       build_hint=BUILD_HINT)
    venv = ensure_venv(name, repo, workdir)
    runtime = venv_runtime(venv, mount=VENV_MOUNT, image=repo["image"], env=env, build_hint=BUILD_HINT)
    return dataclasses.replace(runtime, hide=tuple(dict.fromkeys([*runtime.hide, *hidden_copies()])))



def runtime_key(backend: str, runtime: Runtime) -> str:
    """What the fixed tree's records depend on besides the issue: the backend and its image or venv."""
    return f"{backend}:{runtime.image if backend == 'docker' else ','.join(h for h, _ in runtime.binds)}"
