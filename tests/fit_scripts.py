"""The reference-fitting scripts (tasks/<task>/fit_reference.py) as modules: they are scripts, not a package."""
import importlib.util
from pathlib import Path


def fit_script(task: str):
    path = Path(__file__).resolve().parents[1] / "tasks" / task / "fit_reference.py"
    spec = importlib.util.spec_from_file_location(f"{task}_fit_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
