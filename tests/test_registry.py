"""Registration fails soft: one env package that cannot be imported, or whose registration table is
misspelled or malformed, is reported with its reason and never stops the other envs."""
from __future__ import annotations

import sys
import warnings

import gymnasium as gym
import pytest

import clbench.envs
from clbench import registry
from clbench.cli import main

BROKEN_PACKAGES = {
    "zz_import_error": "import not_a_module_anywhere\nREGISTRATIONS = []\n",
    "zz_misspelled": 'REGISTRATION = [{"id": "clbench/Misspelled-v0", "entry_point": "x:Y"}]\n',
    "zz_bad_key": 'REGISTRATIONS = [{"id": "clbench/BadKey-v0", "entry_pont": "x:Y"}]\n',
}


@pytest.fixture
def broken_envs(tmp_path, monkeypatch):
    for name, source in BROKEN_PACKAGES.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(source)
    monkeypatch.setattr(clbench.envs, "__path__", [*clbench.envs.__path__, str(tmp_path)])
    monkeypatch.setattr(registry, "_DONE", False)
    monkeypatch.setattr(registry, "BROKEN", {})
    yield
    for name in BROKEN_PACKAGES:
        sys.modules.pop(f"clbench.envs.{name}", None)


def test_a_broken_env_package_is_reported_and_the_others_still_register(broken_envs, capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registry.register_all()
    reasons = registry.BROKEN
    assert set(reasons) == {f"clbench.envs.{n}" for n in BROKEN_PACKAGES}
    assert "ModuleNotFoundError" in reasons["clbench.envs.zz_import_error"]
    assert "found REGISTRATION: misspelled?" in reasons["clbench.envs.zz_misspelled"]
    assert "unknown keys ['entry_pont']" in reasons["clbench.envs.zz_bad_key"]
    assert len([w for w in caught if "is not registered" in str(w.message)]) == 3
    assert "clbench/Misspelled-v0" not in gym.registry and "clbench/BadKey-v0" not in gym.registry
    assert "clbench/SpectrumMonitor-v6" in gym.registry  # the healthy envs are unaffected

    assert main(["list", "--ids-only"]) == 0
    out = capsys.readouterr().out
    assert "clbench/SpectrumMonitor-v6" in out and "clbench/Poker-v9" in out
    for name in BROKEN_PACKAGES:
        line = next(line for line in out.splitlines() if line.startswith(f"| {name} "))
        assert "not registered:" in line


def test_python_m_clbench_from_the_folder_holding_a_checkout_named_clbench_says_what_is_wrong(tmp_path):
    """`git clone .../clbench` then `python -m clbench` one folder up: Python imports the checkout
    folder as an empty namespace package. The checkout's own __main__.py says so and what to do."""
    import subprocess

    from tests.conftest import REPO

    (tmp_path / "clbench").symlink_to(REPO, target_is_directory=True)
    ran = subprocess.run([sys.executable, "-m", "clbench", "list", "--ids-only"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 1 and "the folder that holds the clbench checkout" in ran.stderr
    assert f"cd {REPO}" in ran.stderr and "Traceback" not in ran.stderr
    # from anywhere else the same command is the CLI
    ok = subprocess.run([sys.executable, "-m", "clbench", "list", "--ids-only"], cwd=REPO.parent / "..",
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "clbench/Poker-v9" in ok.stdout
