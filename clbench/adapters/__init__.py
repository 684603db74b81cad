"""Adapters that put clbench tasks inside RL training frameworks (docs/training.md).

Each adapter is an optional extra and imports its framework only when its module is imported:

* `clbench.adapters.verifiers_env` (`pip install clbench[verifiers]`): PrimeIntellect `verifiers`
  (v1 API): a taskset, a multi-turn env whose rollout plays one clbench instance (or a whole
  stateful schedule) with the instance reward recorded on the trace, and a local chat harness.
* `clbench.adapters.skyrl` (`pip install clbench[skyrl]`): `skyrl-gym`: a `BaseTextEnv`
  registered as "clbench", its dataset rows, and the generator's text agent loop.

`clbench.adapters.core` holds what both share and imports no framework. `import clbench` never
imports this package's framework modules.
"""
