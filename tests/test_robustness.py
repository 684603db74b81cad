"""Issue 17: hostile use never raises from step(), never corrupts a result, and the CLI says what is
wrong in one line. Real envs, real DuckDB, real bubblewrap, real `clbench` subprocesses and signals.
"""
from __future__ import annotations

import copy
import gc
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import gymnasium as gym
import platformdirs
import pytest

import clbench  # noqa: F401
from clbench import sqlguard
from clbench.agents.dbexplore import DBExploreReference
from clbench.registry import clbench_env_ids
from clbench.results import load_records
from clbench.sandbox import SandboxError
from clbench.sandbox.bwrap import bwrap_works

REPO = Path(__file__).resolve().parents[1]
SCALE = 0.02
[DB, POKER, SPECTRUM, SALES, MEMORY] = [next(e for e in clbench_env_ids() if f"/{name}-v" in e) for name in
                                        ("DBExplore", "Poker", "SpectrumMonitor", "SalesForecast", "MemoryProbe")]
#: the user's real cache (CodeRepair's sdists and venvs), read before conftest.py redirects XDG_CACHE_HOME
REAL_CACHE = os.environ.get("CLBENCH_CACHE_DIR") or platformdirs.user_cache_dir("clbench")
#: a DuckDB query that runs for about a second on one thread
SLOW_SQL = "SELECT count(*) AS n FROM range(6000000000)"


def needs_bwrap():
    if not bwrap_works()[0]:
        pytest.skip(f"bwrap: {bwrap_works()[1]}")


def make(env_id: str, tmp_path_factory=None, **kwargs):
    if "DBExplore" in env_id:
        kwargs.setdefault("scale", SCALE)
    if "SalesForecast" in env_id or "CodeRepair" in env_id:
        needs_bwrap()
        kwargs.setdefault("backend", "bwrap")
    return gym.make(env_id, **kwargs).unwrapped


# ---------------------------------------------------------------------------------- step() never raises
def _hostile_params():
    """Every env but CodeRepair. SalesForecast runs the 100 KB replies as shell commands (~40 s, bash
    expanding the brackets): slow, a larger-scale re-run of test_fuzz.py (replies of up to 6,000
    characters, huge integers) and of test_salesforecast_shell_command_with_a_lone_surrogate_..."""
    return [pytest.param(e, marks=pytest.mark.slow) if "SalesForecast" in e else e
            for e in clbench_env_ids() if "CodeRepair" not in e]


@pytest.mark.parametrize("env_id", _hostile_params())
def test_hostile_actions_are_invalid_actions_and_parsing_is_bounded(env_id):
    env = make(env_id)
    try:
        env.reset(seed=0)
        tool = env.tools[0]["function"]["name"]
        arg = next(iter(env.tools[0]["function"]["parameters"]["properties"]), "x")
        hostile = [
            '{"tool": "%s", "arguments": {"%s": %s}}' % (tool, arg, "7" * 4400),  # over Python's int digits
            '{"tool": "%s", "arguments": {"%s": "a\\ud800b"}}' % (tool, arg),  # a lone surrogate
            "{" * 50_000 + "[" * 50_000,  # 100 KB of nested brackets
            '{"a":' * 20_000,
        ]
        for action in hostile:
            if env._done:
                env.reset()
            start = time.process_time()
            obs, reward, terminated, truncated, info = env.step(action)
            assert time.process_time() - start < 1.0, f"{len(action)} chars took too long to parse"
            assert env.observation_space.contains(obs) and (reward == 0.0 or terminated)
            if env.task != "salesforecast":  # where any text that is no tool call is a shell command
                assert "Invalid action" in obs or terminated or truncated, obs[:300]
            elif "ud800" in action:
                assert "lone surrogate" in obs
    finally:
        env.close()


def test_poker_raise_with_5000_digits_is_an_invalid_action():
    env = make(POKER)
    env.reset(seed=0)
    obs, *_ = env.step("RAISE " + "9" * 5000)
    assert obs.startswith("Invalid action") and "digits" in obs
    assert "Invalid action" not in env.step("CALL")[0]  # the hand goes on


def test_salesforecast_shell_command_with_a_lone_surrogate_is_an_invalid_action():
    env = make(SALES)
    try:
        env.reset(seed=0)
        obs, *_ = env.step('{"tool": "bash", "arguments": {"command": "echo \\ud800"}}')
        assert obs.startswith("Invalid action") and "lone surrogate" in obs
        obs, *_ = env.step("echo still here")
        assert "still here" in obs
    finally:
        env.close()


# ---------------------------------------------------------------------------------- copies
@pytest.mark.parametrize("env_id", clbench_env_ids())
def test_copy_and_pickle_are_exact_or_refused_and_never_damage_the_original(env_id, tmp_path, monkeypatch):
    kwargs = {"cache_dir": str(tmp_path)} if "DBExplore" in env_id else {}
    if "CodeRepair" in env_id:  # the verified sdists and test venvs live in the user's real cache
        monkeypatch.setenv("CLBENCH_CACHE_DIR", REAL_CACHE)
    env = make(env_id, **kwargs)
    try:
        env.reset(seed=0)
        action = {"salesforecast": "ls inbox", "coderepair": "ls"}.get(env.task, "nonsense action")
        sb = getattr(env, "_sb", None) or getattr(env, "_sandbox", None)
        for dup in (copy.deepcopy, lambda e: pickle.loads(pickle.dumps(e))):
            try:
                twin = dup(env)
            except TypeError as exc:
                assert "cannot be" in str(exc) and "gym.make" in str(exc)
                continue
            assert sb is None, f"{env_id}: a live sandbox must never be shared with a copy"
            assert twin.step(action)[0] == env.step(action)[0]  # an exact, independent copy
            del twin
            if env._done:
                env.reset()
        gc.collect()  # a copy's finalizers must not touch the original's resources
        if sb is not None:
            assert sb.host_workspace.is_dir() and sb.run("true").ok
        obs, *_ = env.step(action)  # the original still plays
        assert env.observation_space.contains(obs)
    finally:
        env.close()


# ---------------------------------------------------------------------------------- SalesForecast workspace
def test_salesforecast_observations_name_no_host_path_and_repeat_across_processes():
    actions = ["SUBMIT missing.json", "pwd; ls -a", "SUBMIT inbox"]
    seen = []
    for _ in range(2):  # two sandboxes on different host folders
        env = make(SALES)
        try:
            obs = [env.reset(seed=3)[0]] + [env.step(a)[0] for a in actions]
        finally:
            env.close()
        assert not any("clbench-sandbox-" in o or "/tmp/" in o for o in obs), obs
        seen.append(obs)
    assert seen[0] == seen[1]
    assert "No such file or directory" in seen[0][1]


def test_salesforecast_reset_fails_clearly_when_the_toolchain_cannot_import(tmp_path, monkeypatch):
    """A python3 without pandas & co. must fail reset with the fix, never score forecasts 0."""
    import venv

    from clbench.envs.salesforecast import salesforecast_env, workspace
    from clbench.sandbox import Runtime

    needs_bwrap()
    bare = tmp_path / "bare"
    venv.create(bare)  # no site packages: numpy, scipy, sklearn and pandas are missing
    base = str(Path(sys.base_prefix).resolve())
    runtime = Runtime(binds=tuple((p, p) for p in dict.fromkeys([str(bare), base]) if not p.startswith("/usr/")),
                      env=(("PATH", f"{bare}/bin:/usr/bin:/bin"),))
    monkeypatch.setattr(workspace, "host_python_runtime", lambda image=None: runtime)
    env = make(SALES)
    with pytest.raises(SandboxError) as err:
        env.reset(seed=0)
    msg = str(err.value)
    assert "cannot import numpy, scipy, sklearn, pandas" in msg and "pip install" in msg and "No module named" in msg
    assert env._sb is None  # the workspace was closed, not left behind
    monkeypatch.undo()
    salesforecast_env._TOOLCHAIN_OK.clear()
    env.reset(seed=0)  # the real toolchain passes the same check
    env.close()


# ---------------------------------------------------------------------------------- DuckDB and signals
@pytest.fixture
def ctrl_c():
    """SIGINT as an interactive Python has it. A shell starts background jobs (`cmd &`, CI runners,
    nohup scripts) with SIGINT ignored, and Python then installs no KeyboardInterrupt handler: the
    signal would never arrive and these checks could not measure anything."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _default_sigint() -> None:  # a child's Popen preexec_fn: SIGINT not ignored (see ctrl_c)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sigint_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_sigint_during_a_query_is_a_keyboard_interrupt_not_a_slow_query(ctrl_c):
    con = duckdb.connect(config={"threads": 1})
    _sigint_after(0.3)
    with pytest.raises(KeyboardInterrupt):
        sqlguard.run_query(con, SLOW_SQL, timeout=30)
    # the time limit itself still reads as a slow query to the agent
    res = sqlguard.run_query(con, SLOW_SQL, timeout=0.2)
    assert not res.ok and "time limit" in res.text
    assert sqlguard.run_query(con, "SELECT 42 AS x", timeout=5).rows == [(42,)]


def test_sigint_during_a_dbexplore_step_stops_the_step(ctrl_c):
    env = make(DB)
    env.reset(seed=0)
    _sigint_after(0.3)
    with pytest.raises(KeyboardInterrupt):
        env.step(f"QUERY: {SLOW_SQL}")
    env.close()


def test_query_time_limits_share_one_watchdog_thread():
    cons = [duckdb.connect(config={"threads": 1}) for _ in range(3)]
    with sqlguard.time_limit(cons[0], 5):
        pass
    threads = threading.active_count()
    start = time.perf_counter()
    for _ in range(2000):
        with sqlguard.time_limit(cons[0], 5):
            pass
    per_query = (time.perf_counter() - start) / 2000
    assert threading.active_count() == threads
    assert per_query < 50e-6, f"{per_query * 1e6:.1f} us to arm and disarm a time limit"
    # concurrent deadlines: each query is interrupted at its own limit, the others finish
    results = {}

    def query(i, sql, timeout):
        results[i] = sqlguard.run_query(cons[i], sql, timeout=timeout)

    jobs = [threading.Thread(target=query, args=(0, SLOW_SQL, 0.2)),
            threading.Thread(target=query, args=(1, "SELECT count(*) FROM range(1000)", 0.1)),
            threading.Thread(target=query, args=(2, SLOW_SQL, 0.4))]
    for j in jobs:
        j.start()
    for j in jobs:
        j.join()
    assert "0.2 s time limit" in results[0].text and "0.4 s time limit" in results[2].text
    assert results[1].ok and results[1].rows == [(1000,)]
    assert threading.active_count() == threads
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="finite number of seconds"):
            sqlguard.run_query(cons[0], "SELECT 1", timeout=bad)


class SlowQueryReference(DBExploreReference):
    """DBExplore reference that, at position 1, first runs a ~1 s query and only goes on if it saw
    the query's result. Before the query it touches $CLBENCH_TEST_MARKER so a test can signal then."""

    def begin_instance(self, observation, info):
        super().begin_instance(observation, info)
        self._slow = info["position"] == 1
        self._opening = (observation, info)

    def act(self, observation, info):
        if self._slow:
            self._slow = False
            self._checking = True
            Path(os.environ["CLBENCH_TEST_MARKER"]).touch()
            return f"QUERY: {SLOW_SQL}"
        if getattr(self, "_checking", False):
            self._checking = False
            if "6000000000" not in observation:  # e.g. "interrupted": answer at once, a different record
                return "ANSWER: interrupted"
            return super().act(*self._opening)
        return super().act(observation, info)


def _rollout_cmd(out, workers: int, rollouts: int, cache: str):
    return [sys.executable, "-m", "clbench.cli", "rollout", "--env", DB, "--agent",
            "tests.test_robustness:SlowQueryReference", "--mode", "stateful", "--rollouts", str(rollouts),
            "--workers", str(workers), "--env-arg", f"scale={SCALE}", "--env-arg", f"cache_dir={cache}",
            "--quiet", "--out", str(out)]


def _canonical(out) -> dict:
    return {(r["rollout"], r["instance_id"]): {k: v for k, v in r.items() if k != "wall_time"}
            for r in load_records(out)}


@pytest.fixture(scope="module")
def db_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("db-cache"))


@pytest.mark.parametrize("sig,workers,code", [(signal.SIGINT, 1, 130), (signal.SIGTERM, 2, 143)],
                         ids=["sigint-inline", "sigterm-pool"])
def test_a_signal_mid_query_stops_the_run_and_resume_replays_the_instance(sig, workers, code, tmp_path, db_cache):
    env = dict(os.environ, PYTHONPATH=str(REPO), CLBENCH_TEST_MARKER=str(tmp_path / "marker"))
    whole = subprocess.run(_rollout_cmd(tmp_path / "whole", workers, 2, db_cache), cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0, whole.stderr
    expected = _canonical(tmp_path / "whole")
    assert len(expected) == 80 and not any(r["error"] for r in expected.values())
    (tmp_path / "marker").unlink()

    out = tmp_path / "interrupted"
    # SIGINT goes to the whole process group (Ctrl-C), SIGTERM only to the driver (`kill PID`)
    proc = subprocess.Popen(_rollout_cmd(out, workers, 2, db_cache), cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    deadline = time.time() + 300
    while not (tmp_path / "marker").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    time.sleep(0.3)  # inside the slow query
    (os.killpg if sig == signal.SIGINT else os.kill)(proc.pid, sig)
    stderr = proc.communicate(timeout=120)[1]
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and "--resume" in stderr
    partial = _canonical(out)
    assert 1 <= len(partial) < 80
    assert all(expected[k] == rec for k, rec in partial.items())  # nothing recorded differs from a clean run
    assert (0, expected_id(expected, 0, 1)) not in partial  # the interrupted instance is not recorded

    resumed = subprocess.run([sys.executable, "-m", "clbench.cli", "rollout", "--resume", str(out), "--quiet"],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert _canonical(out) == expected


def expected_id(records: dict, rollout: int, position: int) -> str:
    return next(iid for (k, iid), r in records.items() if k == rollout and r["position"] == position)


# ---------------------------------------------------------------------------------- CLI errors
def _cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clbench.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONWARNINGS="ignore"))


def test_cli_errors_are_one_line_and_leave_no_run_directory(tmp_path):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "results.jsonl").write_text('{"not": "a record"}\n')
    run = ["rollout", "--env", SPECTRUM, "--agent", "reference", "--rollouts", "1", "--env-arg", "schedule=short"]
    cases = {
        "bogus": (run + ["--env-arg", "bogus=1", "--out", "o1"], "unexpected keyword argument 'bogus'"),
        "out-file": (run + ["--out", "a-file"], "a-file is an existing file"),
        "out-not-a-run": (run + ["--out", "notes"], "not a clbench run directory"),
        "report-file": (["report", "a-file"], "a-file is a file, not a run directory"),
        "report-empty": (["report", "junk"], "holds no valid records"),
        "agent": (["rollout", "--env", SPECTRUM, "--agent", "nobody", "--out", "o2"], "unknown agent 'nobody'"),
        "probe-env": (["probe-ladder", "--env", SPECTRUM, "--agent", "llm", "--memory", "icl", "--model", "m",
                       "--base-url", "http://127.0.0.1:9/v1", "--out", "o3"], "cannot be used by the probe ladder"),
        "probe-agent": (["probe-ladder", "--env", MEMORY, "--agent", "random", "--out", "o4"],
                        "does not support the probe ladder"),
    }
    for timeout in ("0", "-1", "inf"):
        cases[f"timeout{timeout}"] = (["rollout", "--env", DB, "--agent", "reference", "--env-arg", f"scale={SCALE}",
                                       "--env-arg", f"query_timeout={timeout}", "--out", f"o-{timeout}"],
                                      "query_timeout must be a finite number of seconds > 0")
    for name, (args, message) in cases.items():
        res = _cli(*args, cwd=tmp_path)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 1 and len(lines) == 1 and message in lines[0], (name, res.stderr)
        assert "Traceback" not in res.stdout + res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "junk", "notes"]  # no run directory made
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"


def test_a_finished_run_is_not_run_again_without_resume(tmp_path):
    run = ["rollout", "--env", SPECTRUM, "--rollouts", "1", "--env-arg", "schedule=short", "--workers", "1",
           "--quiet", "--out", "r"]
    assert _cli(*run, "--agent", "reference", cwd=tmp_path).returncode == 0
    before = (tmp_path / "r" / "results.jsonl").read_bytes()
    again = _cli(*run, "--agent", "reference", cwd=tmp_path)
    assert again.returncode == 1 and "already holds a run" in again.stderr and "--resume" in again.stderr
    assert (tmp_path / "r" / "results.jsonl").read_bytes() == before  # no duplicate records
    # another system may join the same run directory (that is how comparisons are built)
    assert _cli(*run, "--agent", "random", cwd=tmp_path).returncode == 0
    assert {r["system"] for r in load_records(tmp_path / "r")} == {"reference", "random"}
