"""The real sdists from PyPI, fetched with pip, verified by sha256 and unpacked into the cache.

Cache: `platformdirs.user_cache_dir("clbench")/coderepair` (or `$CLBENCH_CACHE_DIR/coderepair`).
Everything is built under a file lock and moved into place atomically, so parallel workers can
share it. The unpacked trees (with their test suites) are never mounted into a sandbox as such:
each instance copies what it needs.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import platformdirs

from clbench.locking import file_lock
from clbench.sandbox.base import TAR_FILTER


class SourceError(RuntimeError):
    """An sdist could not be fetched or does not match its pinned hash."""


def cache_root() -> Path:
    base = os.environ.get("CLBENCH_CACHE_DIR") or platformdirs.user_cache_dir("clbench")
    root = Path(base) / "coderepair"
    root.mkdir(parents=True, exist_ok=True)
    return root


def cache_lock(name: str):
    """An exclusive inter-process lock on `<cache>/<name>.lock`."""
    return file_lock(cache_root() / f"{name}.lock")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sdist(path: Path, sha256: str) -> None:
    """Raise SourceError unless the file's sha256 is the pinned one."""
    actual = sha256_of(path)
    if actual != sha256:
        raise SourceError(f"{path.name}: sha256 {actual} does not match the pinned {sha256}; refusing to use it")


def fetch_sdist(name: str, version: str, sha256: str) -> Path:
    """The verified sdist `name==version` (downloaded with pip on first use)."""
    dest_dir = cache_root() / "sdists"
    dest = dest_dir / f"{name}-{version}.tar.gz"
    if dest.is_file() and sha256_of(dest) == sha256:
        return dest
    with cache_lock(f"sdist-{name}"):
        if dest.is_file() and sha256_of(dest) == sha256:
            return dest
        dest_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest_dir) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   "--disable-pip-version-check", "-d", tmp, f"{name}=={version}"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            got = list(Path(tmp).glob("*.tar.gz"))
            if proc.returncode != 0 or len(got) != 1:
                raise SourceError(f"pip download {name}=={version} failed:\n{proc.stderr[-2000:]}")
            verify_sdist(got[0], sha256)
            os.replace(got[0], dest)
    return dest


def pristine_tree(name: str, version: str, sha256: str) -> Path:
    """The unpacked sdist (read it, never modify it): `<cache>/src/<name>-<version>`."""
    tree = cache_root() / "src" / f"{name}-{version}"
    marker = tree / ".clbench-sha256"
    if marker.is_file() and marker.read_text() == sha256:
        return tree
    sdist = fetch_sdist(name, version, sha256)
    with cache_lock(f"src-{name}"):
        if marker.is_file() and marker.read_text() == sha256:
            return tree
        tree.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=tree.parent))
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, **TAR_FILTER)
        top = tmp / f"{name}-{version}"
        if not top.is_dir():
            raise SourceError(f"{sdist.name} does not contain {name}-{version}/")
        (top / ".clbench-sha256").write_text(sha256)
        shutil.rmtree(tree, ignore_errors=True)
        os.replace(top, tree)
        shutil.rmtree(tmp, ignore_errors=True)
    return tree
