"""The wheel maps envs/, agents/ and tasks/ into the clbench namespace and works when installed."""
from __future__ import annotations

import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]



def borrowing_venv(env_dir: Path) -> Path:
    """A fresh venv that borrows the dependencies of the Python running the tests (a venv, conda or
    the system's, and the site dirs those add through .pth files, e.g. a shared dependency folder) as
    plain path entries: their .pth files, an editable clbench among them, stay inactive. Its python."""
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    borrowed = [p for p in dict.fromkeys(site.getsitepackages() + [site.getusersitepackages()] + sys.path)
                if p and Path(p).is_dir() and ("site-packages" in p or "dist-packages" in p) and not p.startswith(str(REPO))]
    (Path(purelib) / "_borrowed_deps.pth").write_text("".join(p + "\n" for p in borrowed))
    return py

def test_wheel_layout_and_fresh_venv_install(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q",
                    "-w", str(tmp_path / "dist")], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("clbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top <= {"clbench", "clbench_verifiers.py", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    for needed in ("clbench/envs/spectrummonitor/spectrummonitor_env.py", "clbench/agents/spectrummonitor.py",
                   "clbench/tasks/spectrummonitor/default.yaml", "clbench/schemas/run_card.schema.json",
                   "clbench/containers/coderepair/Dockerfile", "clbench/containers/make-offline-base.sh",
                   "clbench/templates/new_env/envs_env.py.tmpl",
                   "clbench/tasks/coderepair/tablib-01/bug.diff", "clbench/data/prices.yaml"):
        assert needed in names

    py = borrowing_venv(tmp_path / "venv")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, capture_output=True)
    code = ("import clbench, gymnasium as gym, pathlib; "
            "assert 'site-packages' in clbench.__file__ and 'venv' in clbench.__file__, clbench.__file__; "
            "env = gym.make('clbench/SpectrumMonitor-v6'); print(env.unwrapped.r_max)")
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"
    # every env builds from the installed package data alone (task specs, questions, issue diffs)
    cli = subprocess.run([str(py.parent / "clbench"), "list"], capture_output=True, text=True, cwd=tmp_path)
    assert cli.returncode == 0, cli.stderr
    assert "unavailable" not in cli.stdout and cli.stdout.count("| clbench/") >= 7
