"""Registration of every clbench env with Gymnasium.

Each domain package `clbench.envs.<domain>` lists its envs in `REGISTRATIONS` (dicts of
`gym.register` arguments) and keeps its `__init__` free of heavy imports, so `import clbench`
stays fast. Domains are discovered, not listed: a new folder under envs/ registers itself.
"""
from __future__ import annotations

import functools
import importlib
import os
import pkgutil
import warnings
from pathlib import Path

import gymnasium as gym

_DONE = False
#: domain packages that could not be registered, by module name -> the reason (`clbench list` shows them)
BROKEN: dict[str, str] = {}
#: what a registration may say (the arguments of gym.register clbench uses)
_KEYS = {"id", "entry_point", "kwargs", "max_episode_steps", "nondeterministic", "disable_env_checker",
         "order_enforce", "autoreset", "apply_api_compatibility", "additional_wrappers", "vector_entry_point"}


#: os.pathsep-separated task roots outside the installed package, each laid out like the repository
#: (envs/<task>/, tasks/<task>/, agents/<task>.py): for developing a task without installing it
PATH_VAR = "CLBENCH_PATH"


def extra_roots() -> list[Path]:
    """The task roots named by $CLBENCH_PATH (an unknown folder is an error, not silence)."""
    roots = [Path(p).resolve() for p in os.environ.get(PATH_VAR, "").split(os.pathsep) if p]
    for root in roots:
        if not (root / "envs").is_dir():
            raise ValueError(f"{PATH_VAR} names {root}, which has no envs/ folder (expected envs/<task>/, "
                             "tasks/<task>/, agents/<task>.py, as `clbench new-env --root` writes them)")
    return roots


def _extend_paths() -> None:
    """Put $CLBENCH_PATH's envs/, tasks/ and agents/ folders into clbench.envs/.tasks/.agents."""
    import clbench.agents
    import clbench.envs
    import clbench.tasks

    for root in extra_roots():
        for package, folder in ((clbench.envs, "envs"), (clbench.tasks, "tasks"), (clbench.agents, "agents")):
            path = str(root / folder)
            if (root / folder).is_dir() and path not in package.__path__:
                package.__path__.append(path)


def env_modules() -> list[str]:
    import clbench.envs

    try:
        _extend_paths()
    except ValueError as exc:  # a wrong $CLBENCH_PATH must not break the installed envs
        BROKEN[PATH_VAR] = str(exc)
        warnings.warn(f"clbench: {exc}", stacklevel=2)
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


def _make_vector(env_id: str, num_envs: int = 1, **kwargs):
    from clbench.vector import BatchedVectorEnv  # imported when used: `import clbench` stays fast

    return BatchedVectorEnv(env_id, num_envs, **kwargs)


def register_all() -> None:
    global _DONE
    if _DONE:
        return
    for reg in registrations():
        if reg["id"] not in gym.registry:  # make_vec's "vector_entry_point" mode: clbench.vector
            gym.register(**{"vector_entry_point": functools.partial(_make_vector, reg["id"]), **reg})
    _DONE = True


def clbench_env_ids() -> list[str]:
    register_all()
    return sorted(k for k in gym.registry if k.startswith("clbench/"))


def env_id_for(task: str) -> str:
    """The registered env id of `task` ("poker" -> "clbench/Poker-v9"), whatever its version."""
    ids = [e for e in clbench_env_ids() if env_class(e).task == task]
    if len(ids) != 1:
        raise KeyError(f"{len(ids)} registered env ids for task {task!r}")
    return ids[0]


def env_class(env_id: str) -> type:
    """The env class registered as `env_id`, without making the env (imports its module only)."""
    from clbench.agent import load_object

    register_all()
    entry = gym.spec(env_id).entry_point
    return load_object(entry) if isinstance(entry, str) else entry
