"""The verifiers plugin id `clbench-verifiers` as an importable top-level module.

verifiers finds a taskset/env/harness by importing the module its id names, so clbench installs
this module next to the `clbench` package (setup.py's py_modules) and verifiers' own CLI works
after `pip install clbench[verifiers]`:

    vf-eval clbench-verifiers -m MODEL --client.base-url URL --no-push \
        --env.taskset.env-id clbench/Poker-v9 --env.taskset.split train -n 8
"""
import sys

import clbench.adapters.verifiers_env as _adapter

sys.modules[__name__] = _adapter
