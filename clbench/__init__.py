"""clbench: Gymnasium-style stateful environments for measuring whether agents learn.

    import gymnasium as gym, clbench
    env = gym.make("clbench/SpectrumMonitor-v2")

`import clbench` registers every env (Gymnasium 1.x has no plugin entry points);
`gym.make("clbench:clbench/DBExplore-v1")` and `gym.register_envs(clbench)` work too.
"""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("clbench")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"

from clbench.registry import clbench_env_ids, register_all

register_all()

__all__ = ["__version__", "clbench_env_ids", "register_all"]
