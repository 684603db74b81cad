"""Sandboxes bounded as a whole (issue 31): memory and processes for all of a sandbox's processes
together, every writable place inside the disk quota, no nested user namespaces, no host path in
/proc/1/cmdline, and a container that does not outlive a SIGKILLed clbench.

Each attack here got through before: four children held 6 GB under a "2 GB" bubblewrap limit
(RLIMIT_AS is per process), /var/tmp was an unbounded tmpfs, `unshare -r id` gave uid 0, and
/proc/1/cmdline listed the host folders of every mount.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from clbench.sandbox import Limits, open_sandbox
from clbench.sandbox import cgroup
from tests.test_sandbox import _docker_image, _runtime, small_bwrap

#: four children of 300 MB resident each: 1.2 GB, against a sandbox limit of 512 MB
HOG = ("python3 -c \"import time; b = bytearray(300 * 1024 * 1024); b[::4096] = b'x' * (len(b) // 4096); "
       "time.sleep(4)\"")
FOUR_HOGS = f"for i in 1 2 3 4; do {HOG} & done; wait; echo survived"


@pytest.fixture
def bwrap(tmp_path):
    sb = small_bwrap(tmp_path, timeout=30)
    yield sb
    sb.close()


def _peak_resident(sb, command: str) -> tuple[object, int]:
    """Run `command`; the result and the most host memory (MemAvailable drop, MB) it took meanwhile."""
    def available() -> int:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
        return 0

    import threading

    base, low, done = available(), [available()], threading.Event()

    def sample():
        while not done.is_set():
            low[0] = min(low[0], available())
            time.sleep(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        result = sb.run(command)
    finally:
        done.set()
        t.join()
    return result, base - low[0]


@pytest.mark.parametrize("bound", ["cgroup", "rss-watchdog"])
def test_memory_is_one_budget_for_all_the_sandbox_processes(bwrap, bound, monkeypatch):
    if bound == "rss-watchdog":
        monkeypatch.setenv("CLBENCH_SANDBOX_BOUND", "rss-watchdog")
    cgroup.mechanism.cache_clear()
    try:
        if bound == "cgroup" and not cgroup.mechanism().startswith("cgroup"):
            pytest.skip("no cgroup can be created on this machine (the watchdog variant still runs)")
        result, peak = _peak_resident(bwrap, FOUR_HOGS)
    finally:
        cgroup.mechanism.cache_clear()
    assert result.killed and "memory limit of 512 MB" in result.killed, result.output()
    # far below the 1.2 GB the four children would hold (the watchdog polls, so it may overshoot a little)
    assert peak < 900, peak
    assert bwrap.run("echo still works").stdout == "still works\n"


def test_every_writable_place_is_inside_the_disk_quota(bwrap):
    for place in ("/var/tmp", "/dev/shm", "/tmp", "/testbed"):
        # files of 20 MB (below the per-file limit): the 64 MB quota, not RLIMIT_FSIZE, stops them
        res = bwrap.run(f"for i in 1 2 3 4 5; do dd if=/dev/zero of={place}/fill$i bs=1M count=20 2>&1 | grep -v records; "
                        f"done; du -sm {place} | cut -f1; rm -f {place}/fill*")
        assert "No space left on device" in res.output(), (place, res.output())
        assert int(res.stdout.split()[-1]) <= 64, (place, res.output())
    # nothing else is writable: the sandbox's user finds only these folders
    res = bwrap.run("find / -xdev -writable -type d 2>/dev/null; find /dev/shm -maxdepth 0 -writable")
    assert set(res.stdout.split()) <= {"/testbed", "/tmp", "/var/tmp", "/dev/shm"}, res.stdout


def test_no_user_namespace_can_be_made_inside(bwrap):
    res = bwrap.run("unshare -r id; echo rc=$?; unshare -U true; echo rc=$?; "
                    "python3 -c 'import os; os.unshare(os.CLONE_NEWUSER)'; echo rc=$?")
    assert "uid=0" not in res.stdout
    assert res.stdout.count("rc=1") == 3 and "Operation not permitted" in res.stderr, res.output()
    # threads and processes still start (clone3 falls back to clone)
    assert bwrap.run("python3 -c 'import threading; t = threading.Thread(target=print, args=(1,)); "
                     "t.start(); t.join()'").stdout == "1\n"


def test_proc_1_shows_no_host_path(bwrap):
    res = bwrap.run("tr '\\0' ' ' < /proc/1/cmdline; echo; cat /proc/self/mountinfo | head -0")
    assert res.ok
    assert "clbench-sandbox-" not in res.stdout and str(bwrap.host_workspace) not in res.stdout
    assert "--bind" not in res.stdout and "--ro-bind" not in res.stdout


def test_the_docker_container_dies_with_its_clbench(tmp_path):
    image = _docker_image()
    if image is None:
        pytest.skip("docker: no engine or no test image")
    import docker

    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent(f"""
        import pathlib, sys, time
        from clbench.sandbox import Limits, Runtime, open_sandbox
        src = pathlib.Path(sys.argv[1]); src.mkdir()
        sb = open_sandbox(src, backend="docker", runtime=Runtime(image={image!r}), workdir="/testbed",
                          limits=Limits(timeout=20))
        print(sb.container.id, flush=True)
        time.sleep(600)
    """))
    owner = subprocess.Popen([sys.executable, str(script), str(tmp_path / "src")], stdout=subprocess.PIPE, text=True)
    cid = owner.stdout.readline().strip()
    assert cid, "the owner did not start its container"
    client = docker.from_env()
    assert client.containers.get(cid).status == "running"
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            status = client.containers.get(cid).status
        except docker.errors.NotFound:
            status = "removed"
        if status in ("exited", "removed", "dead"):
            break
        time.sleep(0.25)
    try:
        client.containers.get(cid).remove(force=True)
    except docker.errors.NotFound:
        pass
    assert status in ("exited", "removed", "dead"), status


def test_one_docker_exec_serves_every_command_and_reaps_what_each_left(tmp_path):
    if _docker_image() is None:
        pytest.skip("docker: no engine or no test image")
    (tmp_path / "src").mkdir()
    sb = open_sandbox(tmp_path / "src", backend="docker", runtime=_runtime("docker"), workdir="/testbed",
                      limits=Limits(timeout=20))
    created = []
    exec_create = sb.client.api.exec_create
    sb.client.api.exec_create = lambda *a, **k: created.append(a) or exec_create(*a, **k)
    try:
        res = sb.run("sleep 300 & (sleep 300 &); echo started; exit 7")
        assert (res.exit_code, res.stdout) == (7, "started\n")
        left = sb.run("ps -eo user,cmd | grep -c '[s]leep 300'")
        assert left.stdout.strip() == "0", left.output()
        assert len(created) == 1  # the runner's exec serves both commands (issue 34), no reaper exec
    finally:
        sb.close()


