"""Registration of every clbench env with Gymnasium.

Each domain package `clbench.envs.<domain>` lists its envs in `REGISTRATIONS` (dicts of
`gym.register` arguments) and keeps its `__init__` free of heavy imports, so `import clbench`
stays fast. Domains are discovered, not listed: a new folder under envs/ registers itself.
"""
from __future__ import annotations

import importlib
import pkgutil

import gymnasium as gym

_DONE = False


def env_modules() -> list[str]:
    import clbench.envs

    return sorted(m.name for m in pkgutil.iter_modules(clbench.envs.__path__, "clbench.envs.") if m.ispkg)


def registrations() -> list[dict]:
    regs = []
    for name in env_modules():
        regs += list(getattr(importlib.import_module(name), "REGISTRATIONS", []))
    return regs


def register_all() -> None:
    global _DONE
    if _DONE:
        return
    for reg in registrations():
        if reg["id"] not in gym.registry:
            gym.register(**reg)
    _DONE = True


def clbench_env_ids() -> list[str]:
    register_all()
    return sorted(k for k in gym.registry if k.startswith("clbench/"))
