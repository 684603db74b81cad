"""The verifiers plugin id `clbench-verifiers` as an importable top-level module.

verifiers finds a taskset/env/harness by importing the module its id names. clbench installs no
top-level module besides `clbench`, so put this folder on the path to use verifiers' own CLI:

    PYTHONPATH=examples vf-eval clbench-verifiers -m MODEL --client.base-url URL --no-push \
        --env.taskset.env-id clbench/Poker-v2 --env.taskset.split train -n 8
"""
import sys

import clbench.adapters.verifiers_env as _adapter

sys.modules[__name__] = _adapter
