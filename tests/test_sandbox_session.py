"""The bwrap backend's long-lived sandbox (clbench.sandbox.session), against real bubblewrap.

One bwrap and one command runner per sandbox (issue 34) must keep every guarantee of a fresh
bwrap per command (issue 31): a command's timeout kills that command's processes only, nothing
a command starts outlives it, commands cannot reach the runner, the sandbox dies with a
SIGKILLed clbench (idle or busy), a dead runner is a clear error followed by a fresh sandbox, and
a command reaches bash exactly as it was given.
"""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from clbench.sandbox import session as session_mod
from tests.test_sandbox import _runtime, small_bwrap


@pytest.fixture
def sb(tmp_path):
    box = small_bwrap(tmp_path, timeout=10)
    yield box
    box.close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _pids_running(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                args = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
                if marker.encode() in args and _alive(int(entry)) and int(entry) != os.getpid():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_one_bwrap_serves_every_command(sb, monkeypatch):
    started = []
    popen = subprocess.Popen
    monkeypatch.setattr(session_mod.subprocess, "Popen", lambda *a, **k: started.append(a) or popen(*a, **k))
    for i in range(5):
        assert sb.run(f"echo {i}").stdout == f"{i}\n"
    assert sum("bwrap" in " ".join(a[0]) for a in started) == 1, started  # (ctypes runs ldconfig)


def test_a_timeout_kills_only_that_commands_processes(sb):
    assert sb.run("echo kept > /tmp/state").ok
    infra = set(sb._session.infra)
    start = time.monotonic()
    res = sb.run("sleep 4101 & (sleep 4102 &); sleep 4103", timeout=1)
    assert res.timed_out and res.exit_code is None and "timed out after 1 s" in res.killed
    assert time.monotonic() - start < 5
    assert sb._session.infra == infra and all(_alive(p) for p in infra)  # the sandbox itself lives on
    res = sb.run("cat /tmp/state; ps -eo args | grep -c '[s]leep 410' || true")
    assert res.stdout == "kept\n0\n", res.output()


def test_nothing_a_command_started_outlives_it(sb):
    res = sb.run("sleep 5101 & (setsid sleep 5102 &); nohup sleep 5103 >/dev/null 2>&1 & echo started")
    assert res.ok and res.stdout == "started\n"
    assert _pids_running("sleep 510") == []
    assert sb.run("ps -e --no-headers | wc -l").stdout.strip() in ("4", "5")  # bwrap, runner, bash, ps, wc


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root-run sandbox gives the runner a uid of its own")
def test_commands_cannot_reach_the_runner(sb):
    sb.run("true")
    infra = set(sb._session.infra)
    res = sb.run("kill -9 1 2; kill -STOP 2; cat /proc/2/fd/0 /proc/2/environ; "
                 "echo x > /proc/2/fd/0; python3 -c 'import os; os.kill(2, 9)'; echo done")
    assert res.stdout.endswith("done\n") and res.stderr.count("Operation not permitted") >= 3, res.output()
    assert res.stderr.count("Permission denied") >= 3, res.output()
    assert sb._session.infra == infra and sb.run("echo fine").stdout == "fine\n"


def test_a_dead_runner_is_a_clear_error_and_the_next_command_gets_a_fresh_sandbox(sb):
    assert sb.run("echo kept > /tmp/state").ok
    runner = sb._session.runner
    import threading

    threading.Timer(0.5, os.kill, (runner, signal.SIGKILL)).start()
    res = sb.run("sleep 3077")
    assert res.exit_code is None and "sandbox was killed" in res.killed and "next command" in res.killed
    assert _pids_running("sleep 3077") == []
    res = sb.run("cat /tmp/state")
    assert res.stdout == "kept\n", res.output()
    assert sb._session.runner != runner


def test_a_sandbox_started_by_an_ended_thread_serves_the_next_command(sb):
    """bwrap dies with the thread that started it (--die-with-parent): a pool thread that ran
    the first command and ended must not cost the next command its result."""
    import threading

    first = []
    t = threading.Thread(target=lambda: first.append(sb.run("echo kept > /tmp/state; echo one")))
    t.start()
    t.join()
    assert first[0].stdout == "one\n"
    for _ in range(3):
        res = sb.run("cat /tmp/state")
        assert (res.stdout, res.killed) == ("kept\n", None), res.output()


def test_a_command_reaches_bash_as_given(sb):
    for payload in ["a\\b 'q' \"d\" $HOME `x` \n\n", "é" * 10 + "\n", "x" * 70_000 + "\n\n"]:
        res = sb.run(f"cat <<'CLBENCH_EOF' | sha256sum\n{payload}CLBENCH_EOF")
        assert res.stdout.split()[0] == hashlib.sha256(payload.encode()).hexdigest(), (payload[:20], res.output())
    res = sb.run("echo $0 $SHLVL $-; exit 300")
    assert (res.stdout, res.exit_code) == ("/bin/bash 1 hBc\n", 44)
    assert sb.run("kill -9 $$").exit_code == 137  # as bwrap reported a signal before


def test_the_sandbox_and_its_command_die_with_a_sigkilled_clbench(tmp_path):
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent("""
        import pathlib, sys
        from clbench.sandbox import Limits, open_sandbox
        src = pathlib.Path(sys.argv[1]); src.mkdir()
        sb = open_sandbox(src, backend="bwrap", workdir="/testbed", limits=Limits(timeout=600))
        sb.run("true")
        print(*sorted(sb._session.infra), flush=True)
        if sys.argv[2] == "busy":
            sb.run("sleep 6123")
        else:
            import time; time.sleep(600)
    """))
    _runtime("bwrap")
    for state in ("idle", "busy"):
        owner = subprocess.Popen([sys.executable, str(script), str(tmp_path / state), state], stdout=subprocess.PIPE,
                                 text=True, cwd=Path(__file__).resolve().parents[1])
        try:
            infra = [int(p) for p in owner.stdout.readline().split()]
            assert len(infra) == 3, "the owner did not start its sandbox"
            deadline = time.monotonic() + 10
            while state == "busy" and not _pids_running("sleep 6123") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert state == "idle" or _pids_running("sleep 6123")
        finally:
            owner.send_signal(signal.SIGKILL)
            owner.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (any(map(_alive, infra)) or _pids_running("sleep 6123")):
            time.sleep(0.05)
        assert not any(map(_alive, infra)) and not _pids_running("sleep 6123"), state
