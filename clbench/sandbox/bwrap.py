"""The bubblewrap backend: one long-lived bwrap sandbox over the workspace, one command at a time.

The sandbox starts at its first command and runs each command through a runner inside it
(clbench.sandbox.session): the set-up that is the same for every command (bwrap, mounts,
control group, rlimits, seccomp filter) is made once per sandbox, as with a Docker container and
`docker exec`. Nothing a command starts outlives it: when it ends (or is stopped), every other
process it left in the sandbox is killed. If the sandbox itself dies, the next command starts a
fresh one over the same folders.

Isolation: new pid, network (loopback only), ipc, uts and cgroup namespaces; the system folders
(/usr and the /bin, /lib, ... links) and a few files of /etc are mounted read-only, the runtime's
binds read-only, the workspace read-write at `workdir`, a /tmp of its own (kept between the
sandbox's commands, like a container's); nothing else of the host exists (no /home, /root,
/work, /var, no host /etc/passwd). `--die-with-parent` and `--new-session` are set: the sandbox
dies with clbench, and with the thread that started it (the next command then starts a fresh one).

Bounds of the whole sandbox, not of each process: its memory and its process count are one
budget for all its processes (one control group per sandbox, clbench.sandbox.cgroup; a summed-RSS
watchdog where no cgroup can be made); every writable place (the workspace, /tmp, /var/tmp,
/dev/shm) lives in the one disk quota (clbench.sandbox.quota). Per-process rlimits (NPROC, AS,
FSIZE, NOFILE, CORE set before bwrap starts; CPU per command) also apply, and a wall-clock
timeout kills all the command's processes. A seccomp
filter refuses new user namespaces (clbench.sandbox.seccomp). bwrap reads its arguments from a
file descriptor (`--args`), so no host path shows in the sandbox's /proc/1/cmdline.

When run as root, every command drops to a dedicated unprivileged uid with no capabilities
(`setpriv`), so RLIMIT_NPROC applies and the read-only mounts and host files stay out of reach;
the workspace is chowned to that uid (the runner stays uid 0 with the few capabilities the drop
needs, out of the commands' reach). Unprivileged users get a user namespace from bwrap.
"""
from __future__ import annotations

import functools
import os
import resource
import shutil
import subprocess
import threading
from pathlib import Path

from clbench.sandbox import seccomp
from clbench.sandbox.base import MiB, CommandResult, Limits, Runtime, Sandbox, SandboxUnavailable, chown_tree
from clbench.sandbox.session import RUNNER_CAPS, SandboxSession, uid_drop

#: top-level system entries mounted read-only (or recreated as the same symlinks)
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: /etc entries the dynamic linker, shells and tools need; nothing with host secrets
ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf",
               "mime.types", "bash.bashrc", "inputrc", "ssl/certs")
#: uids handed to root-run sandboxes; far from any real account
UID_BASE, UID_SPAN = 2_000_000, 500_000


@functools.cache
def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def bwrap_works() -> tuple[bool, str]:
    """Whether bwrap can create its namespaces here (it cannot in some unprivileged containers)."""
    exe = bwrap_path()
    if exe is None:
        return False, "bubblewrap is not installed (apt-get install bubblewrap)"
    argv = [exe, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--die-with-parent"]
    if os.geteuid() != 0:
        argv.append("--unshare-user")
    try:
        proc = subprocess.run(argv + ["true"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap failed to start: {exc}"
    if proc.returncode != 0:
        return False, f"bwrap cannot create namespaces here: {proc.stderr.strip()[:300]}"
    return True, ""


def _user_process_count() -> int:
    uid = os.getuid()
    count = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def closed_binds(runtime: Runtime | None) -> list[str]:
    """Runtime folders that a root-run sandbox's unprivileged uid could not enter (no o+rx, e.g. a
    venv in a `mktemp -d` folder): bound as they are, python3 would silently resolve to another
    interpreter on PATH."""
    if runtime is None or os.geteuid() != 0:
        return []
    return [host for host, _ in runtime.binds if os.path.isdir(host) and os.stat(host).st_mode & 0o005 != 0o005]


class BwrapSandbox(Sandbox):
    backend = "bwrap"

    def __init__(self, source=None, *, workdir: str = "/workspace", limits: Limits | None = None,
                 runtime: Runtime | None = None, baseline=None):
        self._session: SandboxSession | None = None  # started by the first command
        self._starter = threading.current_thread()  # the thread that started the session
        self._lock = threading.Lock()
        ok, why = bwrap_works()
        if not ok:
            raise SandboxUnavailable(why)
        closed = closed_binds(runtime)
        if closed:
            raise SandboxUnavailable(
                f"the sandbox runs as an unprivileged user, who cannot enter {', '.join(closed)} (mode "
                f"{oct(os.stat(closed[0]).st_mode & 0o777)}): make it readable, e.g. chmod o+rx {closed[0]}")
        super().__init__(source, workdir=workdir, limits=limits, runtime=runtime, baseline=baseline)
        self._as_root = os.geteuid() == 0
        self._mount_args: list[str] | None = None
        if self._as_root:
            self.uid = self.gid = UID_BASE + (os.getpid() * 7919 + id(self)) % UID_SPAN
            chown_tree(self.host_workspace, self.uid, self.gid)
        else:
            self.uid, self.gid = os.getuid(), os.getgid()
        # the sandbox's own /tmp, /var/tmp and /dev/shm: kept from command to command (like a
        # container's), never the host's, and inside the disk quota like the workspace
        self._tmp, self._vartmp, self._shm = self._data / "tmp", self._data / "vartmp", self._data / "shm"
        for folder in (self._tmp, self._vartmp, self._shm):
            folder.mkdir(mode=0o1777)
            folder.chmod(0o1777)
        self._etc = self._root / "etc"
        self._etc.mkdir()
        (self._etc / "passwd").write_text(f"root:x:0:0:root:/root:/bin/bash\n"
                                          f"sandbox:x:{self.uid}:{self.gid}:sandbox:/tmp:/bin/bash\n")
        (self._etc / "group").write_text(f"root:x:0:\nsandbox:x:{self.gid}:\n")
        (self._etc / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
        (self._etc / "hostname").write_text("sandbox\n")

    def _own(self, path: Path) -> None:
        if self._as_root:
            os.lchown(path, self.uid, self.gid)

    def _mounts(self) -> list[str]:
        """The mount options: the same for every command of the sandbox, so made once."""
        if self._mount_args is None:
            self._mount_args = self._make_mounts()
        return self._mount_args

    def _make_mounts(self) -> list[str]:
        args: list[str] = []
        for name in SYSTEM_DIRS:
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), str(host)]
            elif host.is_dir():
                args += ["--ro-bind", str(host), str(host)]
        made: set[str] = set()
        for entry in ETC_ENTRIES:
            if os.path.lexists(f"/etc/{entry}"):
                args += self._parents(f"/etc/{entry}", made) + ["--ro-bind", f"/etc/{entry}", f"/etc/{entry}"]
        for name in ("passwd", "group", "hosts", "hostname"):
            args += self._parents(f"/etc/{name}", made) + ["--ro-bind", str(self._etc / name), f"/etc/{name}"]
        # /tmp before the runtime's binds: a venv or interpreter living under /tmp (or /var/tmp)
        # must stay visible on top of the sandbox's own /tmp, or python3 silently falls back
        args += ["--proc", "/proc", "--dev", "/dev", "--bind", str(self._shm), "/dev/shm",
                 "--bind", str(self._tmp), "/tmp", "--perms", "0755", "--dir", "/var",
                 "--bind", str(self._vartmp), "/var/tmp"]
        made.update(("/tmp", "/var", "/var/tmp"))
        for host, inside in self.runtime.binds:
            args += self._parents(inside, made) + ["--ro-bind", host, inside]
        for hidden in self.runtime.hide:
            host = self._host_path_of(hidden)
            # only paths that are visible at all; a tmpfs elsewhere would only reveal the path
            if host is not None and os.path.isdir(host):
                args += ["--tmpfs", hidden]
        args += self._parents(self.workdir, made) + ["--bind", str(self.host_workspace), self.workdir]
        return args

    def _host_path_of(self, inside: str) -> str | None:
        """The host path behind a sandbox path (system dirs and runtime binds), None if unmounted."""
        mounts = [(f"/{d}", f"/{d}") for d in SYSTEM_DIRS] + [(i, h) for h, i in self.runtime.binds]
        for mount, host in sorted(mounts, key=lambda m: -len(m[0])):
            if inside == mount or inside.startswith(mount.rstrip("/") + "/"):
                return host + inside[len(mount):]
        return None

    @staticmethod
    def _parents(path: str, made: set[str]) -> list[str]:
        """Create a bind target's missing parents world-readable (bwrap copies 0700 from /root)."""
        args: list[str] = []
        parts = Path(path).parts[1:-1]
        for i in range(len(parts)):
            parent = "/" + "/".join(parts[: i + 1])
            if parent in made or any(parent == f"/{d}" or parent.startswith(f"/{d}/") for d in SYSTEM_DIRS):
                continue
            made.add(parent)
            args += ["--perms", "0755", "--dir", parent]
        return args

    def _namespaces(self) -> list[str]:
        namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        if not self._as_root:
            namespaces.append("--unshare-user")
        return [bwrap_path(), *namespaces, "--die-with-parent", "--new-session", "--hostname", "sandbox",
                *self._mounts(), "--chdir", self.workdir]

    def _drop(self) -> list[str]:
        """Run as root: the argv prefix that drops a command to the sandbox's uid, no capabilities."""
        if not self._as_root:
            return []
        return uid_drop(self.uid, self.gid)

    def argv(self, command: str, limits: Limits) -> list[str]:
        """A one-shot bwrap command line for one shell command in this sandbox's isolation (for
        inspection, tests and the bare side of benchmarks); commands themselves run in the
        sandbox's long-lived session (`_run`)."""
        return self._namespaces() + ["--"] + self._drop() + ["/bin/bash", "-c", command]

    def rlimits(self, limits: Limits) -> dict[int, int]:
        """Per-process limits (soft = hard) of the sandbox's processes: set on the held process that
        then starts bwrap, so every process of the sandbox inherits them. CPU seconds are set per
        command by the runner (`ulimit -t`), since a command's timeout may differ."""
        # the runner is one process more than a one-shot bwrap had
        nproc = limits.processes + 1 if self._as_root else limits.processes + 1 + _user_process_count()
        return {resource.RLIMIT_NPROC: nproc, resource.RLIMIT_AS: limits.memory_mb * MiB,
                resource.RLIMIT_CPU: resource.RLIM_INFINITY, resource.RLIMIT_FSIZE: limits.file_bytes,
                resource.RLIMIT_NOFILE: limits.open_files, resource.RLIMIT_CORE: 0}

    def _start(self) -> SandboxSession:
        """Start the sandbox's bwrap and its command runner (clbench.sandbox.session)."""
        env = self.runtime.environment(self.workdir)
        env["USER"] = env["LOGNAME"] = "sandbox"
        exe, *options = self._namespaces()
        if self._as_root:
            options = ["--cap-drop", "ALL", *(x for cap in RUNNER_CAPS for x in ("--cap-add", cap)), *options]
        fds = []
        try:
            bpf = seccomp.compiled_filter()
            if bpf is not None:
                fds.append(seccomp.memfd("clbench-seccomp", bpf))
                options = ["--seccomp", str(fds[-1]), *options]
            # the options (every host path of every mount) through a descriptor, not the command line
            fds.append(seccomp.memfd("clbench-bwrap-args", b"".join(a.encode() + b"\0" for a in options)))
            return SandboxSession([exe, "--args", str(fds[-1]), "--"], env, tuple(fds), self.limits,
                                  self._drop(), self.rlimits(self.limits))
        finally:
            for fd in fds:
                os.close(fd)

    def _run(self, command: str, limits: Limits) -> CommandResult:
        with self._lock:
            # --die-with-parent ties bwrap to the thread that started it: a session whose thread
            # ended is dead or dying, so the next command starts a fresh one
            if self._session is not None and not (self._session.alive() and self._starter.is_alive()):
                self._session.close()
                self._session = None
            if self._session is None:
                try:
                    self._starter = threading.current_thread()
                    self._session = self._start()
                except (OSError, RuntimeError) as exc:
                    return CommandResult(1, "", f"the sandbox could not start: {exc}\n", 0.0)
            result = self._session.run(command, limits, self._disk_watch())
            if not self._session.alive() or result.killed and "sandbox was killed" in result.killed:
                self._session.close()
                self._session = None
            return result

    def _close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()
                self._session = None
