"""A contributor's first task env works on the first try, following docs/adding-an-environment.md
step by step, in a fresh folder on $CLBENCH_PATH and through the command line only:

1. `clbench new-env CoinBandit --root TMP` (a second time it refuses to overwrite);
2. the scaffold runs: `clbench list` shows it uncalibrated, `clbench rollout` warns so, and its
   own tests pass;
3. a first documented edit: one number in tasks/coinbandit/default.yaml;
4. `clbench calibrate --env clbench/CoinBandit-v0 --write` writes r_max and r_reference into that
   file (only those lines), after which `clbench list` shows them;
5. `clbench rollout` (reference, 2 rollouts) and `clbench report` succeed, and the shared contract
   checks pass on the new id (tests/test_contract.py when it exists, else check_env, determinism
   and the reset modes directly).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ENV = "clbench/CoinBandit-v0"
#: the command line (`clbench`); clbench/__main__.py makes `python -m clbench` work too
CLI = [sys.executable, "-m", "clbench" if (REPO / "clbench" / "__main__.py").is_file() else "clbench.cli"]
SCAFFOLD = ["envs/coinbandit/__init__.py", "envs/coinbandit/coinbandit_env.py", "tasks/coinbandit/default.yaml",
            "agents/coinbandit.py", "tests/test_coinbandit.py", "benchmarks/bench_coinbandit.py"]


def run(args: list[str], root: Path, check: bool = True, timeout: float = 120,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `args` with $CLBENCH_PATH naming `root` (the new task's folder), in `cwd` (default: root)."""
    env = {**os.environ, "CLBENCH_PATH": str(root), "CI": "1", "PYTHONWARNINGS": "ignore"}
    out = subprocess.run(args, cwd=cwd or root, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert out.returncode == 0, f"{args} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return out


def clbench(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run([*CLI, *args], root, check=check)


def list_row(root: Path) -> str:
    out = clbench(root, "list").stdout
    rows = [line for line in out.splitlines() if f"| {ENV} |" in line]
    assert len(rows) == 1, out
    return rows[0]


#: the shared contract, when tests/test_contract.py is not there: check_env, determinism, reset modes
CONTRACT_FALLBACK = """
import gymnasium as gym, pytest, clbench
from gymnasium.utils.env_checker import check_env
from clbench.agent import make_agent
from clbench.env import ScheduleExhausted
from clbench.runner import play_instance

ENV = "clbench/CoinBandit-v0"
check_env(gym.make(ENV).unwrapped)

def rollout(seed):
    env = gym.make(ENV, schedule="short")
    agent = make_agent("reference", env, seed=seed)
    obs, info = env.reset(seed=seed)
    out = []
    for pos in range(len(env.unwrapped.schedule)):
        if pos:
            obs, info = env.reset()
        traj = []
        out.append((info["instance_id"], play_instance(env, agent, obs, info, traj)["reward"],
                    [t.get("observation") for t in traj]))
    with pytest.raises(ScheduleExhausted):
        env.reset()
    return out

assert rollout(3) == rollout(3) and [i for i, *_ in rollout(3)] != [i for i, *_ in rollout(0)]
env = gym.make(ENV)
env.reset(seed=1)
first = {}
for slot in env.unwrapped.order:
    first[slot.instance_id] = env.reset(options={"instance": slot.instance_id})[0]
for slot in env.unwrapped.schedule.order(0):
    obs, info = env.reset(seed=0, options={"instance": slot.instance_id, "stateless": True})
    assert info["instance_id"] == slot.instance_id and obs == first[slot.instance_id]
print("contract ok")
"""


def test_a_first_task_env_works_on_the_first_try(tmp_path):
    root = tmp_path / "mytask"
    root.mkdir()

    # 1. scaffold; nothing is ever overwritten
    made = clbench(root, "new-env", "CoinBandit", "--root", str(root))
    for rel in SCAFFOLD:
        assert (root / rel).is_file() and rel in made.stdout
    assert "clbench calibrate --env clbench/CoinBandit-v0 --write" in made.stdout
    again = clbench(root, "new-env", "CoinBandit", "--root", str(root), check=False)
    assert again.returncode == 1 and "exists already" in again.stderr
    bad = clbench(root, "new-env", "coin_bandit", "--root", str(tmp_path / "other"), check=False)
    assert bad.returncode == 1 and "CamelCase" in bad.stderr and not (tmp_path / "other").exists()
    spec_path = root / "tasks/coinbandit/default.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    assert spec["max_steps"] >= 1 and "r_max" not in spec and "r_reference" not in spec

    # 2. it runs as is, uncalibrated
    row = list_row(root)
    assert row.count("uncalibrated") == 2 and "season-1(10)" in row
    warned = clbench(root, "rollout", "--env", ENV, "--agent", "reference", "--rollouts", "1",
                     "--workers", "1", "--out", str(tmp_path / "uncalibrated"), "--quiet")
    warning = [line for line in warned.stderr.splitlines() if "uncalibrated" in line]
    assert len(warning) == 1 and "normalized metrics are undefined" in warning[0] and "--write" in warning[0]
    # stateful and stateless both played: raw metrics are there, normalized ones undefined with the reason
    [task] = json.loads((tmp_path / "uncalibrated/run_card.json").read_text())["tasks"].values()
    assert task["r_max"] is None and task["mean_reward"]["mean"] is not None
    assert task["normalized_gain"]["mean"] is None and "uncalibrated" in task["normalized_gain"]["undefined"]
    assert task["normalized_reward"]["mean"] is None and "uncalibrated" in task["normalized_reward"]["undefined"]
    own = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests/test_coinbandit.py")],
              root)
    assert re.search(r"5 passed, 1 skipped", own.stdout), own.stdout  # the calibration check waits for step 4

    # 3. the documented first edit: one number in the task's YAML, no code
    text = spec_path.read_text()
    assert text.count("best: 0.9 ") == 1
    spec_path.write_text(text.replace("best: 0.9 ", "best: 0.85"))

    # 4. calibrate into the YAML: only r_max and r_reference change, comments stay
    before = spec_path.read_text()
    cal = clbench(root, "calibrate", "--env", ENV, "--write")
    after = spec_path.read_text()
    assert after.startswith(before) and "+r_max: " in cal.stdout and "+r_reference: " in cal.stdout
    new = yaml.safe_load(after)
    r_max, r_ref = new.pop("r_max"), new.pop("r_reference")
    assert new == yaml.safe_load(before) and new["odds"]["best"] == 0.85
    assert f"r_max: {r_max!r}" in cal.stdout and 0 < r_ref < r_max <= 1
    assert "BEATS" not in cal.stdout  # no degenerate agent beats the stateless reference
    row = list_row(root)
    assert "uncalibrated" not in row and f"{r_max:.4g}" in row and f"{r_ref:.4g}" in row
    again = clbench(root, "calibrate", "--env", ENV, "--write", "--no-degenerate")
    assert "nothing written" in again.stdout and spec_path.read_text() == after

    # 5. a run and its report; the task's own tests, calibration included; the shared contract
    out = tmp_path / "run"
    ran = clbench(root, "rollout", "--env", ENV, "--agent", "reference", "--rollouts", "2", "--workers", "2",
                  "--out", str(out), "--quiet")
    assert "uncalibrated" not in ran.stderr and "coinbandit" in ran.stdout
    assert (out / "run_card.json").is_file()
    report = clbench(root, "report", str(out), "--no-plots", "--n-boot", "200")
    assert "coinbandit" in report.stdout
    own = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests/test_coinbandit.py")],
              root)
    assert "6 passed" in own.stdout, own.stdout
    if (REPO / "tests" / "test_contract.py").is_file():
        shared = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                      str(REPO / "tests" / "test_contract.py"), "-k", "CoinBandit"], root, check=False, timeout=300, cwd=REPO)
        assert shared.returncode == 0 and " passed" in shared.stdout, shared.stdout[-3000:] + shared.stderr[-2000:]
    else:
        assert "contract ok" in run([sys.executable, "-c", CONTRACT_FALLBACK], root).stdout


@pytest.mark.parametrize("name", ["coinBandit", "Coin-Bandit", "Coin_Bandit", "COIN", "1Coin", "Class"])
def test_new_env_validates_the_name(name):
    from clbench.commands.new_env import check_name

    if name == "Class":  # `class` is a keyword
        with pytest.raises(ValueError, match="not a Python module name"):
            check_name(name)
    else:
        with pytest.raises(ValueError, match="CamelCase"):
            check_name(name)


def test_the_templates_cover_every_scaffold_file():
    from clbench.commands.new_env import FILES, render

    assert sorted(rel.format(task="coinbandit") for rel in FILES.values()) == sorted(SCAFFOLD)
    for tmpl in FILES:
        text = render(tmpl, "CoinBandit", "coinbandit", ENV)
        assert not re.search(r"\{\{\w+\}\}", text), tmpl  # every placeholder filled in
        compile(text, tmpl, "exec") if tmpl.endswith(".py.tmpl") else yaml.safe_load(text)
