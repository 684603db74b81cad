"""Bounding a whole bubblewrap sandbox: one memory and process budget for all its processes.

RLIMIT_AS and RLIMIT_NPROC bound each process (and each uid), not the sandbox: four children of
one command could each take the per-process limit. So every sandbox runs in a control group of
its own (one for all its commands, clbench.sandbox.session), created under this process's cgroup
(so it also stays inside whatever bounds clbench itself runs under), holding the sandbox's
memory limit (swap included where the kernel accounts it; the pages of the quota tmpfs its
commands wrote count too, as in a container) and its process limit:

- cgroup v2, where this process's cgroup delegates the memory and pids controllers to children;
- cgroup v1, where the memory and pids hierarchies are mounted and writable (root in a container);
- otherwise a watchdog (`RssWatch`) sums the resident memory of the sandbox's process tree every
  watch interval and kills the tree past the limit. It cannot stop a burst between two polls, so
  it is the fallback, and `mechanism()` says which one is active (docs/contract.md).

A command killed by the memory bound ends like one killed by a time limit: its result says why.
"""
from __future__ import annotations

import functools
import os
import signal
import time
import uuid
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_paths() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                paths[c] = path
    except OSError:
        pass
    return paths


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


@functools.cache
def mechanism() -> str:
    """"cgroup-v2", "cgroup-v1" or "rss-watchdog": how a sandbox's memory is bounded here."""
    if os.environ.get("CLBENCH_SANDBOX_BOUND") == "rss-watchdog":  # forced, for tests of the fallback
        return "rss-watchdog"
    own = _own_paths()
    if "" in own:
        base = CGROUP_ROOT / own[""].lstrip("/")
        try:
            delegated = set((base / "cgroup.subtree_control").read_text().split())
        except OSError:
            delegated = set()
        if {"memory", "pids"} <= delegated and _writable_dir(base) and _probe(lambda: _V2(base)):
            return "cgroup-v2"
    if "memory" in own and "pids" in own:
        mem = CGROUP_ROOT / "memory" / own["memory"].lstrip("/")
        pids = CGROUP_ROOT / "pids" / own["pids"].lstrip("/")
        if _writable_dir(mem) and _writable_dir(pids) and _probe(lambda: _V1(mem, pids)):
            return "cgroup-v1"
    return "rss-watchdog"


def _probe(make) -> bool:
    try:
        group = make()
        group.limit(64 * 1024 * 1024, 16)
        group.remove()
        return True
    except OSError:
        return False


class _V2:
    def __init__(self, base: Path):
        self.dirs = [base / f"clbench-{uuid.uuid4().hex[:12]}"]
        self.dirs[0].mkdir()

    def limit(self, memory: int, processes: int) -> None:
        d = self.dirs[0]
        (d / "memory.max").write_text(str(memory))
        if (d / "memory.swap.max").exists():
            (d / "memory.swap.max").write_text("0")
        (d / "pids.max").write_text(str(processes))

    def oom_kills(self) -> int:
        try:
            for line in (self.dirs[0] / "memory.events").read_text().splitlines():
                key, value = line.split()
                if key == "oom_kill":
                    return int(value)
        except OSError:
            pass
        return 0

    def procs_files(self) -> list[Path]:
        return [self.dirs[0] / "cgroup.procs"]

    def remove(self) -> None:
        _remove(self.dirs)


class _V1:
    def __init__(self, mem: Path, pids: Path):
        name = f"clbench-{uuid.uuid4().hex[:12]}"
        self.dirs = [mem / name, pids / name]
        for d in self.dirs:
            d.mkdir()

    def limit(self, memory: int, processes: int) -> None:
        mem, pids = self.dirs
        (mem / "memory.limit_in_bytes").write_text(str(memory))
        memsw = mem / "memory.memsw.limit_in_bytes"
        if memsw.exists():  # swap counts too, where the kernel accounts it
            try:
                memsw.write_text(str(memory))
            except OSError:
                pass
        (pids / "pids.max").write_text(str(processes))

    def oom_kills(self) -> int:
        try:
            return _v1_oom(self.dirs[0])
        except (OSError, ValueError):
            return 0

    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs]

    def remove(self) -> None:
        _remove(self.dirs)


def _v1_oom(mem: Path) -> int:
    for line in (mem / "memory.oom_control").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    # a kernel without the counter (before 4.13): the limit was reached if the usage peaked at it
    return int(int((mem / "memory.max_usage_in_bytes").read_text()) >= int((mem / "memory.limit_in_bytes").read_text()))


def _remove(dirs: list[Path]) -> None:
    """Kill what is left in the groups and remove them (a group with processes cannot be removed)."""
    for d in dirs:
        # usually one process is still exiting (the sandbox's pid 1): look again soon, then back off
        # to 20 ms; about a second in all, as before
        delay, deadline = 0.0005, time.monotonic() + 1.0
        while True:
            try:
                pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
            except OSError:
                break
            if not pids or time.monotonic() > deadline:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(delay)
            delay = min(2 * delay, 0.02)
        try:
            d.rmdir()
        except OSError:
            pass


class SandboxGroup:
    """The control group of one sandbox (clbench.sandbox.session): `join(pid)` puts a held
    process into it, `members()` lists its processes, `verdict()` says whether the memory bound
    killed one."""

    def __init__(self, memory_bytes: int, processes: int):
        kind = mechanism()
        own = _own_paths()
        if kind == "cgroup-v2":
            self._group = _V2(CGROUP_ROOT / own[""].lstrip("/"))
        elif kind == "cgroup-v1":
            self._group = _V1(CGROUP_ROOT / "memory" / own["memory"].lstrip("/"),
                              CGROUP_ROOT / "pids" / own["pids"].lstrip("/"))
        else:
            raise RuntimeError("no cgroup can be created here; use RssWatch")
        self._group.limit(memory_bytes, processes)

    def join(self, pid: int) -> None:
        """Move process `pid` (held before it starts anything) into the group; its children follow."""
        for procs in self._group.procs_files():
            procs.write_text(str(pid))

    def members(self) -> set[int]:
        """Host pids of the processes in the group."""
        try:
            return {int(p) for p in self._group.procs_files()[0].read_text().split()}
        except OSError:
            return set()

    def oom_kills(self) -> int:
        return self._group.oom_kills()

    def verdict(self, limit_mb: int, since: int = 0) -> str | None:
        """Why the command was killed, if the memory bound killed something (after `since` kills)."""
        if self._group.oom_kills() > since:
            return f"the sandbox exceeded its memory limit of {limit_mb} MB (all its processes together); " \
                   "a process was killed"
        return None

    def close(self) -> None:
        self._group.remove()


class RssWatch:
    """The fallback bound: the resident memory of a process tree, summed, checked at every poll."""

    def __init__(self, memory_bytes: int, limit_mb: int):
        self.memory_bytes, self.limit_mb = memory_bytes, limit_mb
        self.root: int | None = None

    def __call__(self) -> str | None:
        if self.root is None:
            return None
        total = sum(_rss(pid) for pid in _tree(self.root))
        if total > self.memory_bytes:
            return f"the sandbox exceeded its memory limit of {self.limit_mb} MB (all its processes together, " \
                   f"{total // (1024 * 1024)} MB resident); the command and all its processes were killed"
        return None


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process on the host (a walk of all of /proc)."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
                ppid = int(stat.rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def children_of(pid: int) -> list[int] | None:
    """The children of `pid` (of all its threads), None where /proc cannot list them (a kernel
    without CONFIG_PROC_CHILDREN)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found  # gone
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                found += [int(p) for p in fh.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return None
        except OSError:
            continue
    return found


def _tree(root: int) -> list[int]:
    """`root` and all its descendants: from each process's children list (a few reads for a
    sandbox), or from a walk of all of /proc where the kernel does not list children."""
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        kids = children_of(pid)
        if kids is None:
            return _tree_by_walk(root)
        seen.append(pid)
        todo += kids
    return seen


def _tree_by_walk(root: int) -> list[int]:
    kids, seen, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo += kids.get(pid, [])
    return seen


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
