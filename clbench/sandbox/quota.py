"""Disk quotas of sandbox workspaces and the cleanup of what killed owners leave behind.

Quota: when clbench runs as root, each sandbox's writable folders (the workspace and bwrap's
/tmp) live on a tmpfs of `Limits.disk_mb` mounted on the host, so writing past it fails with
ENOSPC inside the sandbox and never reaches the host's disk. Without the privilege to mount, a
watchdog polls the folders' size while a command runs and kills a command that grows them past
the quota (`disk_watch`); RLIMIT_FSIZE bounds each file in both cases.

Owners: every sandbox folder and container carries an owner tag (host, pid namespace, pid, process
start time). A SIGKILLed owner cannot clean up, so the next sandbox a process opens, and
`clbench containers prune`, remove folders, mounts and containers whose owner is dead.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

ROOT_PREFIX = "clbench-sandbox-"
OWNER_FILE = "owner"
DATA_DIR = "data"
MNT_DETACH = 2
MS_NOSUID, MS_NODEV = 2, 4
#: entries a watched workspace may hold; walking more per poll would cost too much
MAX_ENTRIES = 100_000


# ------------------------------------------------------------------ owners
def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()  # field 22: start time in clock ticks since boot
    except (OSError, IndexError):
        return None


def _namespace() -> str:
    try:
        return f"{socket.gethostname()}:{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return socket.gethostname()


def owner_tag(pid: int | None = None) -> str:
    """`host:pidns/pid/starttime` of this process (or `pid`)."""
    pid = os.getpid() if pid is None else pid
    return f"{_namespace()}/{pid}/{_start_time(pid)}"


def owner_alive(tag: str) -> bool | None:
    """Whether the tagged process still runs; None when it lives elsewhere (another host or pid namespace)."""
    try:
        where, pid, start = tag.rsplit("/", 2)
        pid_no = int(pid)
    except ValueError:
        return None
    if where != _namespace():
        return None
    return _start_time(pid_no) == start


# ------------------------------------------------------------------ tmpfs quota
@functools.cache
def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def mount_tmpfs(target: Path, size_mb: int) -> bool:
    """Mount a tmpfs of `size_mb` at `target` (root only); False when this machine does not allow it."""
    if os.geteuid() != 0 or not _mount_allowed():
        return False
    opts = f"size={int(size_mb)}m,mode=0711".encode()
    return _libc().mount(b"clbench-quota", str(target).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts) == 0


@functools.cache
def _mount_allowed() -> bool:
    """Probe once per process (mounting needs CAP_SYS_ADMIN in the mount namespace)."""
    probe = Path(tempfile.mkdtemp(prefix="clbench-mount-probe-"))
    try:
        libc = _libc()
        if libc.mount(b"clbench-quota", str(probe).encode(), b"tmpfs", 0, b"size=1m") != 0:
            return False
        libc.umount2(str(probe).encode(), MNT_DETACH)
        return True
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def unmount(target: Path) -> None:
    _libc().umount2(str(target).encode(), MNT_DETACH)


def _mounts_under(root: Path) -> list[Path]:
    """Mount points at or below `root` (deepest first)."""
    found = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                point = line.split()[4].encode().decode("unicode_escape")
                if point == str(root) or point.startswith(f"{root}/"):
                    found.append(Path(point))
    except OSError:
        pass
    return sorted(found, key=lambda p: -len(str(p)))


def disk_usage(paths: list[Path], limit: int) -> int:
    """Bytes allocated under `paths` (links not followed); stops counting once past `limit`."""
    total, entries = 0, 0
    stack = [str(p) for p in paths]
    while stack and total <= limit:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    if entries > MAX_ENTRIES:  # a flood of empty files counts as over quota
                        return limit + 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def disk_watch(paths: list[Path], quota_mb: int):
    """A check for the wait loop of a running command: returns why to kill it, or None.

    A command is stopped when it grows the folders past the quota (or past their size at its
    start, so a command that deletes files is never stopped for what earlier ones wrote)."""
    limit = quota_mb * 1024 * 1024
    start = disk_usage(paths, limit)
    ceiling = max(limit, start)

    def check() -> str | None:
        if disk_usage(paths, ceiling) > ceiling:
            return f"the workspace exceeded its {quota_mb} MB disk quota; the command was killed"
        return None

    return check


# ------------------------------------------------------------------ orphans
def remove_root(root: Path) -> None:
    """Unmount and delete a sandbox folder."""
    for point in _mounts_under(root):
        unmount(point)
    shutil.rmtree(root, ignore_errors=True)


def reap_orphan_folders(tmpdir: str | None = None) -> int:
    """Remove sandbox folders (and their quota mounts) whose owner process is dead; returns how many."""
    base = Path(tmpdir or tempfile.gettempdir())
    removed = 0
    for root in base.glob(f"{ROOT_PREFIX}*"):
        try:
            tag = (root / OWNER_FILE).read_text().strip()
        except OSError:
            continue  # being created, or made by a clbench without owner tags: leave it
        if owner_alive(tag) is False:
            remove_root(root)
            removed += 1
    return removed


@functools.cache
def reap_orphan_folders_once() -> int:
    return reap_orphan_folders()
