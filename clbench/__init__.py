"""clbench: Gymnasium-style stateful environments for measuring whether agents learn.

    import gymnasium as gym, clbench
    env = gym.make("clbench/SpectrumMonitor-v6")

`import clbench` registers every env (Gymnasium 1.x has no plugin entry points);
`gym.make("clbench:clbench/DBExplore-v3")` and `gym.register_envs(clbench)` work too.
"""
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path as _Path


def _source_checkout() -> None:
    """Imported from a source checkout (e.g. `python -c "import clbench"` or `python -m pytest` in
    the repository after `pip install .`, where the checkout's clbench/ shadows the installed one):
    the root folders envs/, agents/, tasks/ and containers/ are clbench.envs, clbench.agents, ...
    (setup.py maps them so when installing), so the root joins this package's search path."""
    here = _Path(__file__).resolve().parent
    root = here.parent
    if not (here / "envs").is_dir() and (root / "envs" / "__init__.py").is_file() and (root / "setup.py").is_file():
        __path__.append(str(root))


_source_checkout()

try:
    __version__ = version("clbench")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"

from clbench.registry import clbench_env_ids, register_all

register_all()

__all__ = ["__version__", "clbench_env_ids", "register_all"]
