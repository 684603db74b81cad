"""Finding each task's upstream facts: ``clbench.envs.<domain>.upstream`` through the registry.

Every domain package listed by `clbench.registry.env_modules` may hold an ``upstream.py`` defining
``UPSTREAM = UpstreamTask(...)``. A package without that file has no upstream counterpart; a file
that fails to import or declares something else raises `MappingError` naming it, since a task
read without its rules (scoring, r_max) would give wrong numbers, not missing ones. The
counterpart env id is the package's registration, so it is written once.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Iterable

from clbench import registry
from clbench.upstream.task import UpstreamTask


class MappingError(RuntimeError):
    """An env package's upstream mapping cannot be used."""


def _env_id(package: str, spec: UpstreamTask) -> str:
    """The counterpart env id: the package's one registration (or the one spec.env_id names)."""
    regs = getattr(importlib.import_module(package), "REGISTRATIONS", None)
    ids = [r.get("id") for r in regs if isinstance(r, dict)] if isinstance(regs, (list, tuple)) else []
    if spec.env_id is not None:
        if spec.env_id not in ids:
            raise MappingError(f"{package}.upstream: env_id {spec.env_id!r} is not among {package}'s "
                               f"REGISTRATIONS ({ids})")
        return spec.env_id
    if len(ids) != 1:
        raise MappingError(f"{package}.upstream: {package} registers {len(ids)} envs ({ids}); "
                           "say which one is the counterpart with UpstreamTask(env_id=...)")
    return ids[0]


def discover(modules: Iterable[str]) -> dict[str, UpstreamTask]:
    """Upstream task name -> its facts (env_id and module filled in), from the ``upstream``
    submodule of each package in `modules`; packages without one are skipped."""
    found: dict[str, UpstreamTask] = {}
    for package in modules:
        name = f"{package}.upstream"
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # no upstream counterpart
            raise MappingError(f"{name} cannot be imported: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            raise MappingError(f"{name} cannot be imported: {type(exc).__name__}: {exc}") from exc
        spec = getattr(module, "UPSTREAM", None)
        if not isinstance(spec, UpstreamTask):
            raise MappingError(f"{name} must define UPSTREAM = UpstreamTask(...) "
                               f"(clbench.upstream.task); found {type(spec).__name__}")
        if spec.name in found:
            raise MappingError(f"{name}: upstream task {spec.name!r} is already mapped by {found[spec.name].module}")
        found[spec.name] = dataclasses.replace(spec, env_id=_env_id(package, spec), module=name)
    return dict(sorted(found.items()))


@functools.cache
def tasks() -> dict[str, UpstreamTask]:
    """Every registered domain's upstream task, by upstream name (discovered once per process)."""
    return discover(registry.env_modules())


def get(name: str) -> UpstreamTask | None:
    """The facts of upstream task `name`; None for a name upstream does not have."""
    return tasks().get(name)


def unit_of(task_name: str) -> str | None:
    """The reward unit of upstream task `task_name` (e.g. ``"BB per hand"`` for exploitable_poker);
    None when upstream has no such task."""
    t = get(task_name)
    return t.unit if t else None


# ----------------------------------------------------------------------------- tables by task

def r_max() -> dict[str, float]:
    """r_max per instance as published."""
    return {n: t.r_max for n, t in tasks().items()}


def counterparts() -> dict[str, str]:
    """Each upstream task's counterpart among clbench's own environments."""
    return {n: t.env_id for n, t in tasks().items()}


def published_tasks() -> dict[tuple[str, str], tuple[float, float, float]]:
    """Paper appendix B.4: (task, system) -> (cumulative reward, its SE, cumulative gain)."""
    return {(n, s): tuple(row) for n, t in tasks().items() for s, row in t.published.items()}


def published_external() -> dict[str, float]:
    """External references (the reference system's baseline sums) published without an artifact."""
    return {n: t.external for n, t in tasks().items() if t.external is not None}


def variant_rules() -> dict:
    return {n: t.variant for n, t in tasks().items() if t.variant is not None}
