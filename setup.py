"""Maps the top-level envs/, agents/, tasks/ and containers/ folders into the clbench namespace.

The folders sit at the repository root (see docs/contract.md) but install as clbench.envs,
clbench.agents and clbench.tasks, so no top-level `envs`/`agents`/`tasks` lands in
site-packages. Subpackages are found automatically: adding a domain needs no edit here.
"""
from setuptools import find_packages, setup

MAPPED = {"clbench": "clbench", "clbench.envs": "envs", "clbench.agents": "agents", "clbench.tasks": "tasks",
          "clbench.containers": "containers"}


def _packages():
    found = []
    for name, folder in MAPPED.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_packages(folder)]
    return found


def _package_dir():
    mapping = dict(MAPPED, **{"": "examples"})  # the top-level plugin module below lives in examples/
    for name, folder in MAPPED.items():
        for sub in find_packages(folder):
            mapping[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return mapping


setup(
    packages=_packages(),
    # verifiers imports a plugin by the module its id names: `vf-eval clbench-verifiers ...` needs
    # a top-level `clbench_verifiers` (a three-line alias of clbench.adapters.verifiers_env)
    py_modules=["clbench_verifiers"],
    package_dir=_package_dir(),
    package_data={
        "clbench": ["schemas/*.json", "data/*.yaml", "templates/new_env/*.tmpl"],
        "clbench.containers": ["*.sh", "*/Dockerfile"],
        "clbench.tasks": ["*/*.yaml", "*/*.json", "*/*/*.yaml", "*/*/*.json", "*/*/*.diff", "*/*/*.md"],
    },
    include_package_data=True,
)
