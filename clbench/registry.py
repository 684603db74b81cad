"""Registration of every clbench env with Gymnasium.

Each domain package `clbench.envs.<domain>` lists its envs in `REGISTRATIONS` (dicts of
`gym.register` arguments) and keeps its `__init__` free of heavy imports, so `import clbench`
stays fast. Domains are discovered, not listed: a new folder under envs/ registers itself.
"""
from __future__ import annotations

import importlib
import pkgutil
import warnings

import gymnasium as gym

_DONE = False
#: domain packages that could not be registered, by module name -> the reason (`clbench list` shows them)
BROKEN: dict[str, str] = {}
#: what a registration may say (the arguments of gym.register clbench uses)
_KEYS = {"id", "entry_point", "kwargs", "max_episode_steps", "nondeterministic", "disable_env_checker",
         "order_enforce", "autoreset", "apply_api_compatibility", "additional_wrappers", "vector_entry_point"}


def env_modules() -> list[str]:
    import clbench.envs

    return sorted(m.name for m in pkgutil.iter_modules(clbench.envs.__path__, "clbench.envs.") if m.ispkg)


def _checked(name: str, module) -> list[dict]:
    """The module's REGISTRATIONS, or ValueError saying what is wrong with them."""
    regs = getattr(module, "REGISTRATIONS", None)
    if regs is None:
        near = [k for k in vars(module) if k.upper().startswith("REGIST")]
        hint = f" (found {', '.join(near)}: misspelled?)" if near else ""
        raise ValueError(f"{name} defines no REGISTRATIONS list{hint}")
    if not isinstance(regs, (list, tuple)) or not all(isinstance(r, dict) for r in regs):
        raise ValueError(f"{name}.REGISTRATIONS must be a list of dicts of gym.register arguments")
    for reg in regs:
        unknown = sorted(set(reg) - _KEYS)
        if unknown or "id" not in reg or "entry_point" not in reg:
            raise ValueError(f"{name}.REGISTRATIONS entry {reg.get('id', reg)!r}: needs 'id' and 'entry_point'"
                             + (f"; unknown keys {unknown}" if unknown else ""))
        if not str(reg["id"]).startswith("clbench/"):
            raise ValueError(f"{name}.REGISTRATIONS id {reg['id']!r} must start with 'clbench/'")
    return list(regs)


def registrations() -> list[dict]:
    """Every domain's registrations; a domain that fails to import or lists bad ones is recorded
    in BROKEN and warned about, so one broken env never stops the others."""
    regs = []
    for name in env_modules():
        try:
            regs += _checked(name, importlib.import_module(name))
        except Exception as exc:  # a contributor's half-written env must not break `import clbench`
            BROKEN[name] = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"clbench: {name} is not registered: {BROKEN[name]}", stacklevel=2)
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
