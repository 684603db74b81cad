"""Built database files, cached in the user's cache directory.

Both releases live in `<cache>/dbexplore/<key>/release{1,2}.duckdb`, where the key holds the
generator version, a hash of the generator spec and code, the seed and the scale. A file is built under
a temporary name and renamed into place atomically, so parallel workers never read a half-built
file; a lock file (where the platform has one) keeps them from building the same file twice.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

import platformdirs

from clbench.locking import file_lock

#: the code the files are built by (read, not imported: a cache hit must not pay for pandas)
_BUILD_CODE = ("generator.py", "migration.py")


#: spec keys that do not change the data (excluded from the cache key)
_NOT_DATA = {"schedules", "drifts", "r_max", "r_reference", "max_steps", "query_discount", "query_timeout_s",
             "result_max_rows", "result_max_chars"}


def cache_key(spec: dict, scale: float) -> str:
    """Generator version, a digest of the generator's numbers and code, seed and scale."""
    data = {k: v for k, v in spec.items() if k not in _NOT_DATA}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode())
    for name in _BUILD_CODE:  # a code change must not reuse files built by older code
        digest.update(Path(__file__).with_name(name).read_bytes())
    return f"gen{spec['generator_version']}-{digest.hexdigest()[:10]}-seed{spec['seed']}-scale{scale:g}"


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    base = Path(cache_dir) if cache_dir is not None else Path(platformdirs.user_cache_dir("clbench"))
    return base / "dbexplore"


def _build_atomically(final: Path, build) -> None:
    tmp = final.with_name(f".{final.stem}-{os.getpid()}-{uuid.uuid4().hex[:8]}.duckdb")
    try:
        build(str(tmp))
        os.replace(tmp, final)
    finally:
        for leftover in (tmp, Path(f"{tmp}.wal")):
            leftover.unlink(missing_ok=True)


def database_paths(spec: dict, scale: float, cache_dir: str | os.PathLike | None = None) -> dict[int, Path]:
    """{release: path} of both database files, building whichever is missing."""
    folder = cache_root(cache_dir) / cache_key(spec, scale)
    paths = {1: folder / "release1.duckdb", 2: folder / "release2.duckdb"}
    if all(p.exists() for p in paths.values()):
        return paths
    from clbench.envs.dbexplore import generator, migration

    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / ".lock"):
        if not paths[1].exists():
            _build_atomically(paths[1], lambda tmp: generator.build_release1(spec, scale, tmp))
        if not paths[2].exists():
            _build_atomically(paths[2], lambda tmp: migration.migrate(spec, str(paths[1]), tmp))
    return paths
