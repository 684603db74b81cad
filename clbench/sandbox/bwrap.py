"""The bubblewrap backend: every command runs in a fresh bwrap sandbox over the workspace.

Isolation: new pid, network (loopback only), ipc, uts and cgroup namespaces; the system folders
(/usr and the /bin, /lib, ... links) and a few files of /etc are mounted read-only, the runtime's
binds read-only, the workspace read-write at `workdir`, a /tmp of its own (kept between the
sandbox's commands, like a container's); nothing else of the host exists (no /home, /root,
/work, /var, no host /etc/passwd). `--die-with-parent` and `--new-session` are set.

Bounds of the whole sandbox, not of each process: its memory and its process count are one
budget for all its processes (a control group per command, clbench.sandbox.cgroup; a summed-RSS
watchdog where no cgroup can be made); every writable place (the workspace, /tmp, /var/tmp,
/dev/shm) lives in the one disk quota (clbench.sandbox.quota). Per-process rlimits (NPROC, AS,
CPU, FSIZE, NOFILE, CORE; set on the held command before it starts bwrap) also apply, and a
wall-clock timeout kills the process group. A seccomp
filter refuses new user namespaces (clbench.sandbox.seccomp). bwrap reads its arguments from a
file descriptor (`--args`), so no host path shows in the sandbox's /proc/1/cmdline.

When run as root, the command drops to a dedicated unprivileged uid with no capabilities
(`setpriv`), so RLIMIT_NPROC applies and the read-only mounts and host files stay out of reach;
the workspace is chowned to that uid. Unprivileged users get a user namespace from bwrap.
"""
from __future__ import annotations

import functools
import os
import resource
from dataclasses import replace
import shutil
import subprocess
from pathlib import Path

from clbench.sandbox import cgroup, seccomp
from clbench.sandbox.base import MiB, CommandResult, Limits, Runtime, Sandbox, SandboxUnavailable, chown_tree
from clbench.sandbox.process import HOLD, run_process

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

    def argv(self, command: str, limits: Limits) -> list[str]:
        """The full bwrap command line for one shell command (public for inspection and tests); it runs
        as `bwrap --args FD` with the rest read from FD (`_run`)."""
        namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        if not self._as_root:
            namespaces.append("--unshare-user")
        drop = []
        if self._as_root:
            drop = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        return ([bwrap_path(), *namespaces, "--die-with-parent", "--new-session", "--hostname", "sandbox",
                 *self._mounts(), "--chdir", self.workdir, "--"]
                + drop + ["/bin/bash", "-c", command])

    def rlimits(self, limits: Limits) -> dict[int, int]:
        """Per-process limits (soft = hard) of a command's processes: set on the held process that
        then starts bwrap (`_bounded`), so every process of the sandbox inherits them."""
        nproc = limits.processes if self._as_root else limits.processes + _user_process_count()
        return {resource.RLIMIT_NPROC: nproc, resource.RLIMIT_AS: limits.memory_mb * MiB,
                resource.RLIMIT_CPU: limits.cpu_limit, resource.RLIMIT_FSIZE: limits.file_bytes,
                resource.RLIMIT_NOFILE: limits.open_files, resource.RLIMIT_CORE: 0}

    def _run(self, command: str, limits: Limits) -> CommandResult:
        env = self.runtime.environment(self.workdir)
        env["USER"] = env["LOGNAME"] = "sandbox"
        exe, *args = self.argv(command, limits)
        cut = args.index("--")  # bwrap's options, then the command
        options, tail = args[:cut], args[cut:]
        fds = []
        try:
            bpf = seccomp.compiled_filter()
            if bpf is not None:
                fds.append(seccomp.memfd("clbench-seccomp", bpf))
                options = ["--seccomp", str(fds[-1]), *options]
            # the options (every host path of every mount) through a descriptor, not the command line
            fds.append(seccomp.memfd("clbench-bwrap-args", b"".join(a.encode() + b"\0" for a in options)))
            argv = [exe, "--args", str(fds[-1]), *tail]
            return self._bounded(argv, limits, env, tuple(fds))
        finally:
            for fd in fds:
                os.close(fd)

    def _bounded(self, argv: list[str], limits: Limits, env: dict, fds: tuple[int, ...]) -> CommandResult:
        """Run argv with the sandbox's memory and processes bounded as a whole (clbench.sandbox.cgroup).

        The command starts held (process.HOLD): before it starts anything, this process sets its
        rlimits and puts it into the command's control group, then lets it go on; one process
        start fewer per command than a `prlimit` (or a shell joining the group) inside."""
        disk = self._disk_watch()
        memory = limits.memory_mb * MiB
        rlimits = self.rlimits(limits)

        def limit(pid: int) -> None:
            for which, value in rlimits.items():
                resource.prlimit(pid, which, (value, value))

        if cgroup.mechanism() == "rss-watchdog":
            rss = cgroup.RssWatch(memory, limits.memory_mb)

            def watch():
                return (disk() if disk else None) or rss()

            def started(pid: int) -> None:
                limit(pid)
                rss.root = pid

            return run_process(HOLD + argv, limits, env=env, watch=watch, pass_fds=fds, started=started, held=True)
        group = cgroup.SandboxGroup(memory, limits.processes)
        try:

            def started(pid: int) -> None:
                limit(pid)
                group.join(pid)

            result = run_process(HOLD + argv, limits, env=env, watch=disk, pass_fds=fds, started=started, held=True)
            why = group.verdict(limits.memory_mb)
        finally:
            group.close()
        if why and not result.killed:
            result = replace(result, killed=why, exit_code=None)
        return result
