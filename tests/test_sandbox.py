"""clbench.sandbox against real bubblewrap and a real Docker engine, with hostile commands.

Every backend test runs for bwrap and for docker; the docker variants are marked `docker` and
skip with the reason when no engine answers or no test image is built. Hostile commands: fork
bomb, infinite loop, output flood, memory hog, writes outside the workspace, network access,
reading host files and the CodeRepair task data (hidden tests, fixes). Each must be contained
with a clear message, and the next command must work.
"""
from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest

from clbench.sandbox import Limits, Runtime, SandboxError, SandboxUnavailable, choose_backend, open_sandbox
from clbench.sandbox.base import MiB, OutputCapture
from clbench.sandbox.bwrap import BwrapSandbox, bwrap_works
from clbench.sandbox.docker_backend import engine_status, image_exists

#: images made by `clbench containers build --offline-base`; any one serves these tests
DOCKER_IMAGES = ["clbench/coderepair-tenacity:8.2.3-v4", "clbench/coderepair-tablib:3.5.0-v4",
                 "clbench/offline-base:bookworm"]
TASK_DATA = Path(__file__).resolve().parents[1] / "tasks" / "coderepair"


def _docker_image() -> str | None:
    if not engine_status()[0]:
        return None
    return next((img for img in DOCKER_IMAGES if image_exists(img)), None)


def _runtime(backend: str) -> Runtime:
    if backend == "docker":
        image = _docker_image()
        if image is None:
            why = engine_status()[1] or "no test image; run `clbench containers build --offline-base`"
            pytest.skip(f"docker: {why}")
        return Runtime(image=image, build_hint="clbench containers build --offline-base")
    ok, why = bwrap_works()
    if not ok:
        pytest.skip(f"bwrap: {why}")
    return Runtime()


def small_bwrap(tmp_path, timeout: float):
    """A bwrap sandbox over an empty source folder, with small whole-sandbox bounds (512 MB, 64
    processes, 64 MB of disk) for tests that push against them."""
    (tmp_path / "src").mkdir()
    return open_sandbox(tmp_path / "src", backend="bwrap", runtime=_runtime("bwrap"), workdir="/testbed",
                        limits=Limits(timeout=timeout, memory_mb=512, processes=64, disk_mb=64))


BACKENDS = ["bwrap", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(params=[*BACKENDS, pytest.param("docker-prestarted", marks=pytest.mark.docker)])
def sandbox(request, tmp_path):
    """A sandbox of each backend; docker-prestarted: the container a sandbox of the same configuration
    prestarted for it (`prestart=True`), so every hostile command also meets a taken spare."""
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("VALUE = 1\n")
    (src / "README").write_text("hello\n")
    backend = request.param.split("-")[0]
    opts = dict(backend=backend, runtime=_runtime(backend), workdir="/testbed",
                limits=Limits(timeout=4, memory_mb=512, processes=64, file_size_mb=8))
    spare = None
    if request.param == "docker-prestarted":
        open_sandbox(tmp_path, prestart=True, **opts).close()
        spare = _spare_container()
    sb = open_sandbox(src, **opts)
    assert spare is None or sb.container.id == spare.id
    yield sb
    sb.close()


def still_works(sb) -> None:
    res = sb.run("echo ok && cat pkg/mod.py")
    assert res.ok and res.stdout == "ok\nVALUE = 1\n", res.output()


# ---------------------------------------------------------------------------------- basics
def test_run_reports_code_streams_and_cwd(sandbox):
    res = sandbox.run("pwd; echo out; echo err >&2; exit 3")
    assert (res.exit_code, res.stdout, res.stderr, res.killed) == (3, "/testbed\nout\n", "err\n", None)
    assert not res.ok


def test_shell_state_does_not_persist_but_files_do(sandbox, tmp_path):
    marker = f"clbench-{tmp_path.name}"
    assert sandbox.run(f"cd /tmp && export X=1 && echo data > /testbed/new.txt && echo tmp > /tmp/{marker}").ok
    res = sandbox.run(f'pwd; echo "X=${{X:-unset}}"; cat new.txt /tmp/{marker}')
    assert res.stdout == "/testbed\nX=unset\ndata\ntmp\n"
    assert not Path("/tmp", marker).exists()  # the sandbox's /tmp is its own


def test_read_write_changes_and_diff(sandbox):
    sandbox.write_file("pkg/mod.py", "VALUE = 2\n")
    sandbox.write_file("/testbed/pkg/extra.py", "X = 1\n")
    assert sandbox.run("rm README && python3 -c 1 2>/dev/null; cat pkg/mod.py").stdout == "VALUE = 2\n"
    assert sandbox.read_file("pkg/extra.py") == b"X = 1\n"
    kinds = {c.path: c.kind for c in sandbox.changes()}
    assert kinds == {"README": "deleted", "pkg/extra.py": "added", "pkg/mod.py": "modified"}
    diff = sandbox.diff()
    assert "-VALUE = 1\n+VALUE = 2\n" in diff and "+++ b/pkg/extra.py" in diff


def test_paths_outside_the_workspace_are_refused(sandbox):
    with pytest.raises(SandboxError):
        sandbox.read_file("/etc/passwd")
    with pytest.raises(SandboxError):
        sandbox.read_file("../../etc/passwd")
    assert sandbox.run("ln -s /etc/shadow leak && ln -s /root/.bashrc leak2").ok
    with pytest.raises(SandboxError):
        sandbox.read_file("leak")
    diff = sandbox.diff()
    assert "root:" not in diff and "leak" in diff  # links are reported, never followed on the host


# ---------------------------------------------------------------------------------- hostile commands
def test_infinite_loop_is_killed_at_the_time_limit(sandbox):
    start = time.monotonic()
    res = sandbox.run("while true; do :; done")
    assert res.timed_out and res.exit_code is None and "timed out after 4 s" in res.output()
    assert time.monotonic() - start < 15
    still_works(sandbox)


def test_background_processes_do_not_outlive_their_command(sandbox):
    sandbox.run("(sleep 300; echo late > late.txt) > /dev/null 2>&1 &")
    res = sandbox.run("ps -eo args 2>/dev/null | grep -c 'sleep 30[0]' || true")
    assert res.stdout.strip() in ("0", ""), res.output()
    still_works(sandbox)


def test_fork_bomb_is_contained(sandbox):
    start = time.monotonic()
    res = sandbox.run(":(){ :|:& };: ; sleep 2; echo after-bomb", timeout=6)
    assert time.monotonic() - start < 20
    assert res.killed or "Resource temporarily unavailable" in res.output() or "after-bomb" in res.stdout
    still_works(sandbox)
    assert int(sandbox.run("ps -e --no-headers | wc -l").stdout) < 10  # nothing of the bomb is left


def test_output_flood_is_cut_and_killed(sandbox):
    res = sandbox.run("yes clbench", timeout=20)
    assert res.exit_code is None and "output exceeded 4 MB" in res.killed and res.truncated
    assert "output truncated" in res.stdout and len(res.stdout) < 25_000
    still_works(sandbox)


def test_memory_hog_is_stopped(sandbox):
    res = sandbox.run("python3 -c 'x = bytearray(2 * 1024 ** 3); print(len(x))'", timeout=20)
    assert "2147483648" not in res.stdout
    assert res.exit_code != 0 or res.killed
    still_works(sandbox)


def test_large_files_are_refused(sandbox):
    res = sandbox.run("head -c 20000000 /dev/zero > big.bin; echo rc=$?; stat -c %s big.bin")
    assert "rc=0" not in res.stdout and int(res.stdout.split()[-1]) <= 8 * MiB
    still_works(sandbox)


def test_writing_outside_the_workspace_fails(sandbox, tmp_path):
    target = tmp_path / "escaped.txt"
    res = sandbox.run(f"for p in /usr/x /etc/x /x {target} /root/x; do echo pwn > $p; done 2>&1; echo done")
    assert res.stdout.count("Permission denied") + res.stdout.count("Read-only file system") \
        + res.stdout.count("No such file or directory") >= 5, res.output()
    assert not target.exists() and not Path("/usr/x").exists() and not Path("/x").exists()
    still_works(sandbox)


def test_network_is_unreachable(sandbox):
    res = sandbox.run("timeout 3 bash -c 'echo > /dev/tcp/pypi.org/443' 2>&1; echo rc=$?; "
                      "timeout 3 bash -c 'echo > /dev/tcp/151.101.0.223/443' 2>&1; echo rc=$?")
    assert res.stdout.count("rc=0") == 0, res.output()
    assert "Network is unreachable" in res.stdout or "Cannot assign" in res.stdout, res.output()
    still_works(sandbox)


def test_host_files_and_task_data_are_not_readable(sandbox):
    assert TASK_DATA.is_dir()
    probe = " ".join([str(TASK_DATA), str(Path.home()), "/work", "/etc/shadow", "/root/.bash_history"])
    res = sandbox.run(f"for p in {probe}; do ls $p 2>&1 | head -3; done; "
                      "grep -rls fail_to_pass / --include=*.yaml 2>/dev/null | head -3; echo scanned")
    assert "meta.yaml" not in res.stdout and "fix.diff" not in res.stdout and "bug.diff" not in res.stdout
    assert "fail_to_pass" not in res.stdout.replace("grep -rls fail_to_pass", "")
    assert res.stdout.rstrip().endswith("scanned")
    still_works(sandbox)


# ---------------------------------------------------------------------------------- the command runner
# One runner per sandbox runs every command (issue 34); as root it keeps a few capabilities to drop
# to the sandbox's uid. None of it may reach the commands, and no command may reach it.
def _needs_root_runner(sb) -> None:
    if sb.backend == "bwrap" and os.geteuid() != 0:
        pytest.skip("unprivileged bwrap: runner and commands share the one mapped uid")


def _runner_of(sb):
    """What identifies the sandbox's running runner: a new one means it was restarted."""
    if sb.backend == "docker":
        return sb.container.id, id(sb._runner)
    return id(sb._session), sb._session.runner


def test_a_command_holds_no_capabilities(sandbox):
    _needs_root_runner(sandbox)
    res = sandbox.run("grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status; "
                      "(sleep 0.1; grep -E '^Cap(Prm|Eff|Bnd):' /proc/self/status) & wait")
    caps = dict(line.split(":\t") for line in res.stdout.splitlines())
    assert res.ok and len(res.stdout.splitlines()) == 9, res.output()
    assert all(v == "0000000000000000" for k, v in caps.items() if k.startswith("Cap")), res.output()
    assert sandbox.backend == "bwrap" or caps["NoNewPrivs"] == "1"
    assert "Uid:\t0\t" not in sandbox.run("cat /proc/self/status").stdout


def test_a_command_cannot_kill_trace_or_feed_the_runner(sandbox):
    """The runner is the command's parent: signals, ptrace, its memory and its stdin (the channel the
    next command arrives on) are all refused; it serves the next command as before."""
    _needs_root_runner(sandbox)
    first = sandbox.run("echo $PPID")
    runner, started = first.stdout.strip(), _runner_of(sandbox)
    attack = f"""
kill -9 {runner}; echo "kill=$?"
kill -STOP {runner}; echo "stop=$?"
kill -9 -1; echo "killall=$?"
echo 'echo fed' > /proc/{runner}/fd/0; echo "feed=$?"
cat /proc/{runner}/environ >/dev/null; echo "environ=$?"
head -c1 /proc/{runner}/mem >/dev/null; echo "mem=$?"
python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(16, {runner}, 0, 0); print("ptrace=%d" % (r == 0))'
"""
    res = sandbox.run(attack)
    assert "ptrace=0" in res.stdout, res.output()
    for what in ("kill", "stop", "feed", "environ", "mem"):
        assert f"{what}=0" not in res.stdout, res.output()
    after = sandbox.run("echo $PPID; echo fine")
    assert after.ok and after.stdout == f"{runner}\nfine\n", (res.output(), after.output())
    assert _runner_of(sandbox) == started


def test_a_command_cannot_forge_another_commands_reply(sandbox):
    """Output written after a command (by what it left) never reaches the next one, whose exit status
    and output are its own; a command printing what looks like replies gets it back as its output."""
    _needs_root_runner(sandbox)
    fake = "".join(f"{'%032x' % i} 0 1\n{i}\n" for i in range(50))
    plant = ("(sleep 0.3; echo FORGED; echo FORGED >&2) & "
             "setsid sh -c 'sleep 0.3; echo FORGED' & "
             "(trap '' HUP TERM INT; sleep 0.3; echo FORGED) & disown; "
             "nohup sh -c 'sleep 0.3; echo FORGED' >/dev/null 2>&1 & "
             f"printf '%s' '{fake}'; printf '%s' '{fake}' >&2; exit 4")
    res = sandbox.run(plant)
    # the fake replies come back as output, the status is the command's own; what its leftovers wrote before
    # they were reaped may follow (on a loaded machine the shell can take longer than their 0.3 s to exit)
    assert res.exit_code == 4 and res.stdout.startswith(fake) and res.stderr.startswith(fake), res.output()
    tails = (res.stdout[len(fake):] + res.stderr[len(fake):]).splitlines()
    assert all(line == "FORGED" or "Killed" in line for line in tails), res.output()
    later = sandbox.run("sleep 0.8; echo mine; exit 3")
    assert (later.exit_code, later.stdout, later.stderr, later.killed) == (3, "mine\n", "", None), later.output()


def test_nothing_a_command_starts_reaches_the_next_command(sandbox):
    """Daemons of every kind (new session, double fork, ignoring signals, respawning) are gone before
    the next command: no process of the sandbox's uid but the next command's own."""
    _needs_root_runner(sandbox)
    res = sandbox.run("setsid sleep 300 & (sleep 301 &) & nohup sleep 302 >/dev/null 2>&1 & "
                      "(trap '' HUP TERM INT; exec sleep 303) & "
                      "(while :; do sleep 304 & sleep 0.01; done) >/dev/null 2>&1 & "
                      "(while :; do kill -9 -1 2>/dev/null; done) & sleep 0.3; echo started")
    assert "started" not in res.stderr, res.output()  # it may well have killed itself
    look = sandbox.run("for p in /proc/[0-9]*; do [ -O $p ] && [ ${p#/proc/} != $$ ] && "
                       "tr '\\0' ' ' < $p/cmdline && echo; done; true")
    assert look.ok and "sleep" not in look.stdout and "kill" not in look.stdout, look.output()
    still_works(sandbox)


def test_a_docker_reply_ends_at_its_tag_only():
    """The runner's stream: what precedes each stream's tag is output (a look-alike tag, a tag split
    across frames, bytes that begin like it); the status counts only with its CLEAN flag."""
    import struct

    from clbench.sandbox.base import OutputCapture
    from clbench.sandbox.docker_backend import Reply

    def frame(stream: int, data: bytes) -> bytes:
        return struct.pack(">BxxxL", stream, len(data)) + data

    tag = b"0123456789abcdef" * 2

    def reply(*frames) -> Reply:
        r = Reply(tag, OutputCapture(1000, 1 << 20), OutputCapture(1000, 1 << 20))
        stream = b"".join(frames)
        for i in range(0, len(stream), 5):  # in pieces that cut headers and tags
            assert r.feed(stream[i:i + 5])
        return r

    out = b"fake " + tag[:-1] + b"X 0 1\n" + tag[:7]
    r = reply(frame(1, out + tag[:9]), frame(2, b"err"), frame(1, tag[9:] + b" 3 1\n"), frame(2, tag + b"\n"))
    assert r.done and r.status == 3 and r.out.text() == (out.decode(), False) and r.err.text() == ("err", False)
    assert reply(frame(1, tag + b" 0 0\n"), frame(2, tag + b"\n")).status is None  # leftovers not killed
    assert reply(frame(1, tag + b" x 1\n"), frame(2, tag + b"\n")).status is None
    assert not reply(frame(1, tag + b" 0 1\n")).done  # stderr's tag not seen yet


# ---------------------------------------------------------------------------------- bwrap specifics
def test_bwrap_runtime_binds_and_hides(tmp_path):
    if not bwrap_works()[0]:
        pytest.skip(f"bwrap: {bwrap_works()[1]}")
    tool = tmp_path / "tool"
    (tool / "secret").mkdir(parents=True)
    (tool / "bin").mkdir()
    (tool / "bin" / "hello").write_text("#!/bin/sh\necho hello from the runtime\n")
    (tool / "bin" / "hello").chmod(0o755)
    (tool / "secret" / "key").write_text("s3cret")
    tool.chmod(0o755)
    runtime = Runtime(binds=((str(tool), "/opt/tool"),), hide=("/opt/tool/secret",),
                      env=(("PATH", "/opt/tool/bin:/usr/bin:/bin"),))
    src = tmp_path / "src"
    src.mkdir()
    with open_sandbox(src, backend="bwrap", runtime=runtime, workdir="/work/repo") as sb:
        res = sb.run("hello; ls /opt/tool/secret | wc -l; touch /opt/tool/x 2>&1; id -un")
        assert res.stdout.splitlines()[:2] == ["hello from the runtime", "0"]
        assert "Read-only file system" in res.stdout
        if os.geteuid() == 0:
            assert res.stdout.strip().endswith("sandbox")  # root drops to an unprivileged uid


# ---------------------------------------------------------------------------------- selection and helpers
def test_auto_never_picks_unsafe_local_and_unsafe_warns(tmp_path):
    assert choose_backend("auto", Runtime()) in ("bwrap", "docker")
    with pytest.raises(SandboxError, match="unknown sandbox backend"):
        choose_backend("chroot")
    src = tmp_path / "src"
    src.mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with open_sandbox(src, backend="unsafe-local", limits=Limits(timeout=3)) as sb:
            res = sb.run("echo $WORKSPACE")
            assert res.stdout.strip() == str(sb.host_workspace)
            assert sb.run("sleep 30").timed_out
    assert any("WITHOUT isolation" in str(w.message) for w in caught)


@pytest.mark.docker
def test_missing_image_names_the_build_command(tmp_path):
    if not engine_status()[0]:
        pytest.skip(f"docker: {engine_status()[1]}")
    with pytest.raises(SandboxUnavailable, match="clbench containers build"):
        open_sandbox(tmp_path, backend="docker",
                     runtime=Runtime(image="clbench/does-not-exist:0", build_hint="clbench containers build"))


def test_output_capture_keeps_head_and_tail():
    cap = OutputCapture(limit=20, kill_bytes=1000)
    assert cap.feed(b"a" * 10 + b"b" * 30)
    assert cap.feed(b"c" * 10)
    text, cut = cap.text()
    assert cut and text.startswith("a" * 10) and text.endswith("c" * 10) and "30 bytes omitted" in text
    small = OutputCapture(limit=20, kill_bytes=1000)
    small.feed(b"x" * 20)
    assert small.text() == ("x" * 20, False)
    assert not OutputCapture(limit=20, kill_bytes=5).feed(b"123456")


@pytest.mark.docker
def test_docker_workspace_can_start_from_the_image():
    if _docker_image() is None or not image_exists("clbench/offline-base:bookworm"):
        pytest.skip("docker: needs the offline base image (`clbench containers build --offline-base`)")
    with open_sandbox(None, backend="docker", runtime=Runtime(image="clbench/offline-base:bookworm"),
                      workdir="/etc/apt") as sb:
        assert "sources.list" in sb.run("ls").stdout and sb.changes() == []
        sb.run("echo '# local' >> sources.list")
        assert [(c.path, c.kind) for c in sb.changes()] == [("sources.list", "modified")]


def test_host_backends_need_a_source_folder():
    with pytest.raises(SandboxError, match="starts from a folder"):
        open_sandbox(None, backend="bwrap")


# ---------------------------------------------------------------------------------- issue 17: quotas, orphans
WRITE_400MB = "for i in $(seq 1 100); do head -c 4000000 /dev/zero > f$i || exit 3; done; echo all written"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["tmpfs", "watchdog"])
def test_disk_quota_stops_a_command_writing_past_it(backend, mode, tmp_path, monkeypatch):
    from clbench.sandbox import quota

    runtime = _runtime(backend)
    if mode == "tmpfs" and not (os.geteuid() == 0 and quota._mount_allowed()):
        pytest.skip("a tmpfs quota needs root with CAP_SYS_ADMIN; the watchdog variant covers this machine")
    if mode == "watchdog":
        monkeypatch.setattr(quota, "mount_tmpfs", lambda *a: False)
    (tmp_path / "src").mkdir()
    free_before = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    with open_sandbox(tmp_path / "src", backend=backend, runtime=runtime,
                      limits=Limits(timeout=30, disk_mb=64, file_size_mb=256)) as sb:
        res = sb.run(WRITE_400MB)
        used = quota.disk_usage([sb._data], 1 << 40)
        free_after = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
        assert "all written" not in res.stdout
        if mode == "tmpfs":  # the filesystem itself is full: no byte past the quota exists
            assert res.exit_code == 3 and "No space left on device" in res.stderr, res.output()
            assert used <= 64 * MiB
        else:  # killed within a poll interval; far less than the 400 MB it tried
            assert res.killed == "the workspace exceeded its 64 MB disk quota; the command was killed"
            assert used < 300 * MiB
        assert free_before - free_after < 300 * MiB
        # a file larger than the quota is refused on its own (RLIMIT_FSIZE follows disk_mb)
        assert not sb.run("head -c 80000000 /dev/zero > big").ok
        # deleting works over quota, and the next command runs as usual
        assert sb.run("rm -f f* big && echo cleaned").stdout.strip() == "cleaned"
        assert sb.run("head -c 1000000 /dev/zero > small && echo ok").stdout.strip() == "ok"


ORPHAN_OWNER = """
import sys, time
from clbench.sandbox import Runtime, open_sandbox
sb = open_sandbox(sys.argv[1], backend=sys.argv[2], runtime=Runtime(image=sys.argv[3] or None))
print(sb._root, sb.container.id if sb.backend == "docker" else "", flush=True)
time.sleep(600)
"""


def _orphan(backend: str, src: Path) -> tuple[Path, str]:
    """A sandbox whose owner process was SIGKILLed: (its host folder, its container id or '')."""
    import subprocess
    import sys

    image = _runtime(backend).image or ""
    proc = subprocess.Popen([sys.executable, "-c", ORPHAN_OWNER, str(src), backend, image],
                            stdout=subprocess.PIPE, text=True)
    root, _, container = proc.stdout.readline().strip().partition(" ")
    proc.kill()
    proc.wait()
    return Path(root), container


def _container_exists(container_id: str) -> bool:
    import docker.errors

    from clbench.sandbox.docker_backend import docker_client

    try:
        docker_client().containers.get(container_id)
        return True
    except docker.errors.NotFound:
        return False


@pytest.mark.parametrize("backend", BACKENDS)
def test_sandboxes_of_a_killed_owner_are_reaped(backend, tmp_path):
    import subprocess
    import sys

    (tmp_path / "src").mkdir()
    # reaped when the next clbench process opens a sandbox
    root, container = _orphan(backend, tmp_path / "src")
    assert root.is_dir() and root.name.startswith("clbench-sandbox-")
    assert not container or _container_exists(container)  # `sleep infinity` outlives its owner
    opener = subprocess.run([sys.executable, "-c", ORPHAN_OWNER.replace("time.sleep(600)", "sb.close()"),
                             str(tmp_path / "src"), backend, _runtime(backend).image or ""],
                            capture_output=True, text=True, timeout=120)
    assert opener.returncode == 0, opener.stderr
    assert not root.exists() and not (container and _container_exists(container))
    # reaped by `clbench containers prune`
    root, container = _orphan(backend, tmp_path / "src")
    assert root.is_dir()
    pruned = subprocess.run([sys.executable, "-m", "clbench.cli", "containers", "prune"],
                            capture_output=True, text=True, timeout=120)
    assert pruned.returncode == 0, pruned.stderr
    assert f"removed {1 if container else 0} orphaned sandbox container(s)" in pruned.stdout
    assert not root.exists() and not (container and _container_exists(container))
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(root) not in mounts


def test_a_lone_surrogate_is_not_run(sandbox):
    res = sandbox.run("echo \ud800")
    assert res.exit_code is None and "lone surrogate" in res.killed
    still_works(sandbox)


def test_a_runtime_folder_the_sandbox_user_cannot_enter_is_a_clear_error(tmp_path):
    """Run as root, the sandbox drops to an unprivileged uid: a venv in a 0700 folder (what `mktemp
    -d` makes) would be invisible and python3 would silently be another interpreter; it is refused
    with the folder and the fix named."""
    if os.geteuid() != 0:
        pytest.skip("only root-run sandboxes drop to another uid")
    if not bwrap_works()[0]:
        pytest.skip(f"bwrap: {bwrap_works()[1]}")
    closed = tmp_path / "venv"
    closed.mkdir(mode=0o700)
    closed.chmod(0o700)
    runtime = Runtime(binds=((str(closed), "/opt/venv"),))
    with pytest.raises(SandboxUnavailable, match=rf"cannot enter {closed} \(mode 0o700\).*chmod o\+rx"):
        BwrapSandbox(runtime=runtime)
    closed.chmod(0o755)
    sb = BwrapSandbox(runtime=runtime)
    try:
        assert sb.run("test -d /opt/venv && echo visible").stdout.strip() == "visible"
    finally:
        sb.close()


def test_a_python_environment_under_tmp_stays_visible_inside(tmp_path):
    """clbench running from a venv under /tmp: the sandbox's own /tmp must not cover that venv."""
    import subprocess
    import sys
    import venv

    if not bwrap_works()[0]:
        pytest.skip(f"bwrap: {bwrap_works()[1]}")
    if not str(tmp_path).startswith("/tmp/"):
        pytest.skip("the test needs its temporary folder under /tmp")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True)  # borrows clbench and its dependencies
    py = env_dir / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "only_in_this_venv.py").write_text("WHERE = 'venv'\n")
    if sys.prefix != sys.base_prefix:  # running in a venv: the new one borrows its packages too
        site_dirs = subprocess.run([sys.executable, "-c", "import site; print(*site.getsitepackages())"],
                                   check=True, capture_output=True, text=True).stdout.split()
        # addsitedir, not bare paths: an editable clbench is found through a .pth file in those
        # folders, and only site dirs get their .pth files read
        (Path(purelib) / "_outer.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n"
                                                          for p in site_dirs))
    code = ("from clbench.envs.salesforecast.workspace import open_workspace\n"
            "sb = open_workspace('bwrap', 60)\n"
            "print(sb.run(\"python3 -c 'import sys, only_in_this_venv as m; print(sys.prefix, m.WHERE)'\").output())\n"
            "sb.close()\n")
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(env_dir), "venv"], out.stdout


# ---------------------------------------------------------------------------------- prestarted containers
def _spare_container(timeout: float = 60):
    """The container this process prestarted (waiting for it to run)."""
    from clbench.sandbox.docker_backend import _SPARES

    return _SPARES[os.getpid()]._next.result(timeout).container


def _gone(container_id: str, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while _container_exists(container_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.docker
def test_a_prestarted_container_is_the_one_a_fresh_open_makes(tmp_path):
    """A spare is created with the same arguments as the sandbox that takes it would have used, runs no
    command before it is taken, is taken once, and is discarded (folder and container) on a mismatch."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a\n")
    opts = dict(backend="docker", runtime=_runtime("docker"), workdir="/testbed",
                limits=Limits(timeout=4, memory_mb=512, processes=64))
    first = open_sandbox(tmp_path / "src", prestart=True, **opts)
    spare = _spare_container()
    taken = open_sandbox(tmp_path / "src", **opts)
    fresh = open_sandbox(tmp_path / "src", **opts)  # no spare is left: a container of its own
    try:
        assert taken.container.id == spare.id != first.container.id and fresh.container.id != spare.id
        seen, made = (c.client.api.inspect_container(c.container.id) for c in (taken, fresh))
        assert seen["ExecIDs"] is None and seen["State"]["Running"]  # nothing ran in it before it was taken
        assert seen["Config"] == made["Config"]
        assert seen["HostConfig"].pop("Binds") == [f"{taken.host_workspace}:/testbed:rw"]
        assert made["HostConfig"].pop("Binds") == [f"{fresh.host_workspace}:/testbed:rw"]
        assert seen["HostConfig"] == made["HostConfig"]
        uid = 1000 if os.geteuid() == 0 else os.getuid()
        for sb in (taken, fresh):
            res = sb.run("cat a.txt && id -u && ls -A /tmp")
            assert res.ok and res.stdout == f"a\n{uid}\n", res.output()
            assert sb.changes() == []
    finally:
        for sb in (first, taken, fresh):
            sb.close()
    # a spare of another configuration is never handed out: removed with its folder
    with open_sandbox(tmp_path / "src", prestart=True, **opts):
        spare = _spare_container()
        root = Path(spare.attrs["HostConfig"]["Binds"][0].split(":")[0]).parents[1]
        other = dict(opts, limits=Limits(timeout=4, memory_mb=256, processes=64))
        with open_sandbox(tmp_path / "src", **other) as sb:
            assert sb.container.id != spare.id
            assert _gone(spare.id) and not root.exists()


@pytest.mark.docker
def test_a_prestarted_container_goes_with_its_owner(tmp_path):
    """The spare is removed when its process exits, and stops with it when it is SIGKILLed."""
    import signal
    import subprocess
    import sys

    (tmp_path / "src").mkdir()
    code = ("import sys, time\n"
            "from clbench.sandbox import Runtime, open_sandbox\n"
            "from tests.test_sandbox import _spare_container\n"
            f"sb = open_sandbox(sys.argv[1], backend='docker', runtime=Runtime(image={_runtime('docker').image!r}), "
            "prestart=True)\n"
            "print(_spare_container().id, flush=True)\n"
            "sb.close()\n"
            "time.sleep(float(sys.argv[2]))\n")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "src"), "0"], capture_output=True, text=True,
                          timeout=120, cwd=root)
    assert done.returncode == 0, done.stderr
    assert not _container_exists(done.stdout.strip())
    owner = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "src"), "600"], stdout=subprocess.PIPE,
                             text=True, cwd=root)
    spare = owner.stdout.readline().strip()
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    from clbench.sandbox.docker_backend import docker_client, reap_orphan_containers

    deadline = time.monotonic() + 20
    while docker_client().containers.get(spare).status == "running" and time.monotonic() < deadline:
        time.sleep(0.25)
    assert docker_client().containers.get(spare).status != "running"  # its lifeline ended with its owner
    reap_orphan_containers()
    assert not _container_exists(spare)
    from clbench.sandbox.quota import reap_orphan_folders

    reap_orphan_folders()


# ---------------------------------------------------------------------------------- per-command cost
def test_commands_cost_one_docker_exec_per_container(sandbox, monkeypatch):
    """One exec (the runner) serves every command of a container, the reaping of what each one left
    running included (issue 34); a restarted container gets a runner of its own."""
    if sandbox.backend != "docker":
        pytest.skip("docker only")
    api, calls = sandbox.client.api, []
    create = api.exec_create
    monkeypatch.setattr(api, "exec_create", lambda *a, **k: calls.append(a) or create(*a, **k))
    sandbox.run("sleep 300 > /dev/null 2>&1 &")
    res = sandbox.run("ps -eo args 2>/dev/null | grep -c 'sleep 30[0]' || true")
    assert len(calls) == 1 and res.stdout.strip() in ("0", ""), (calls, res.output())
    assert sandbox.run("sleep 30", timeout=0.5).timed_out
    assert sandbox.run("echo again").stdout == "again\n" and len(calls) == 2


def test_bwrap_mounts_are_made_once_per_sandbox(sandbox):
    """The mount options are the same for every command: made once, equal to a fresh making."""
    if sandbox.backend != "bwrap":
        pytest.skip("bwrap only")
    first = sandbox.argv("true", sandbox.limits)
    assert sandbox._mounts() is sandbox._mounts() and sandbox._mounts() == sandbox._make_mounts()
    assert sandbox.argv("true", sandbox.limits) == first and "--ro-bind" in first
    still_works(sandbox)


def test_a_short_command_returns_as_soon_as_it_exits(monkeypatch):
    """The wait for a command's exit is woken by the exit (a pidfd), not a sleep-and-poll loop,
    whose backoff added up to 50 ms to every command."""
    from clbench.sandbox import process

    if not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd on this platform (the fallback polls)")
    slept = []
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: slept.append(s) or real_sleep(s))  # Popen.wait's polling
    res = process.run_process(["/bin/sh", "-c", "sleep 0.2; echo done"], Limits(timeout=5))
    monkeypatch.undo()
    assert res.ok and res.stdout == "done\n" and slept == []
    res = process.run_process(["/bin/sh", "-c", "sleep 5"], Limits(timeout=0.3))
    assert res.timed_out and res.elapsed < 3


@pytest.mark.docker
def test_what_a_sandbox_leaves_never_reaches_the_prestarted_next_one(tmp_path):
    """An agent that plants files (workspace, /tmp, /var/tmp, its home) and a background process in its
    sandbox, hoping the next sandbox (grading or review, which takes the spare) finds them: the spare was
    started before any of its commands, over its own folder, so it sees none of it."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a\n")
    opts = dict(backend="docker", runtime=_runtime("docker"), workdir="/testbed",
                limits=Limits(timeout=4, memory_mb=512, processes=64))
    with open_sandbox(tmp_path / "src", prestart=True, **opts) as first:
        spare = _spare_container()
        plant = ("echo planted > /testbed/planted; echo planted > /tmp/planted; echo planted > /var/tmp/planted; "
                 "(nohup sleep 300 >/dev/null 2>&1 &); ls /proc | grep -c '^[0-9]'")
        assert first.run(plant).ok
    with open_sandbox(tmp_path / "src", **opts) as taken:
        assert taken.container.id == spare.id
        look = taken.run("cat /testbed/planted /tmp/planted /var/tmp/planted 2>&1; "
                         "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")
        assert "planted\n" not in look.stdout and "sleep 300" not in look.stdout, look.output()
        assert sorted(p.name for p in taken.host_workspace.iterdir()) == ["a.txt"]
