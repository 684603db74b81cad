"""The front door: after `pip install .` (not editable), the README's commands work inside the checkout.

There `import clbench` finds the checkout's clbench/ (the current directory comes first on
sys.path), not the installed copy; its subpackages clbench.envs, clbench.agents and
clbench.tasks live in the root folders envs/, agents/ and tasks/, which clbench/__init__.py adds.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.test_packaging import REPO, borrowing_venv


def test_import_and_contract_tests_inside_the_checkout_after_pip_install(tmp_path):
    py = borrowing_venv(tmp_path / "venv")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(tmp_path / "dist")],
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("clbench-*.whl")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, capture_output=True)
    code = ("import clbench, clbench.envs, clbench.agents, gymnasium as gym; "
            "print(clbench.__file__); print(gym.make('clbench/SpectrumMonitor-v6').unwrapped.env_id)")
    out = subprocess.run([str(py), "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith(str(REPO))  # the checkout's copy, as a contributor runs it
    assert "SpectrumMonitor" in out.stdout
    tests = subprocess.run([str(py), "-m", "pytest", "tests/test_contract.py", "-k", "SpectrumMonitor", "-q",
                            "--collect-only", "-p", "no:cacheprovider"], cwd=REPO, capture_output=True, text=True)
    assert tests.returncode == 0, tests.stdout[-2000:] + tests.stderr[-2000:]
    assert "SpectrumMonitor" in tests.stdout
