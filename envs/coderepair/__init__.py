"""CodeRepair: fix 26 reported bugs in real open-source Python projects, one per instance.

The sources are the real sdists of tablib 3.5.0, tenacity 7.0.0 and tenacity 8.2.3 from PyPI
(fetched with pip and checked against pinned sha256 hashes); each issue injects a reviewed
regression and hides the tests that catch it. Between the two tenacity releases the tests moved
out of the package: the task's concept drift. Agents work in a sandbox (Docker or bubblewrap, see
clbench.sandbox).
"""
REGISTRATIONS = [{"id": "clbench/CodeRepair-v6", "entry_point": "clbench.envs.coderepair.coderepair_env:CodeRepairEnv"}]
