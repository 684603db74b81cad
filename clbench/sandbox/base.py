"""The backend-independent parts of a sandbox: limits, results, output capture, the workspace.

Every backend keeps the workspace as a folder on the host that is mounted into the sandbox at
`workdir`; a pristine copy of the starting tree stays outside the sandbox, so `changes()` and
`diff()` compare the two on the host without trusting anything inside. Host-side file access
never follows links out of the workspace (an agent can plant `ln -s /etc/shadow x`).
"""
from __future__ import annotations

import difflib
import os
import shutil
import stat
import tarfile
import tempfile
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from clbench.sandbox import quota

MiB = 1024 * 1024
#: folders that never count as changes (tool caches, VCS data)
DEFAULT_IGNORED = (".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")
#: files larger than this are reported as changed but not diffed
MAX_DIFF_BYTES = 1 * MiB


class SandboxError(RuntimeError):
    """A sandbox could not be created or used."""


class BuildError(RuntimeError):
    """An image or sandbox runtime could not be built (`clbench containers build`); the message says
    what to do."""


class SandboxUnavailable(SandboxError):
    """The requested backend (or image) is not available on this machine; the message says how to get it."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of every command run in a sandbox.

    timeout: wall-clock seconds, after which the whole process tree is killed.
    memory_mb: the whole sandbox's memory (a control group, else a summed-RSS watchdog, for bwrap;
        the container's cgroup for docker); with bwrap each process's address space besides.
    processes: the whole sandbox's process count (pids control group; RLIMIT_NPROC besides, bwrap).
    cpu_seconds: RLIMIT_CPU per process (default: timeout + 5).
    file_size_mb: RLIMIT_FSIZE, the largest file a command may write.
    output_chars: bytes kept of each of stdout and stderr (head and tail, with a note between).
    output_kill_mb: a command that prints more than this is killed.
    cpus: CPU share (docker only).
    disk_mb: disk quota of the workspace plus the sandbox's /tmp (clbench.sandbox.quota).
    """

    timeout: float = 60.0
    memory_mb: int = 2048
    processes: int = 256
    cpu_seconds: int | None = None
    file_size_mb: int = 256
    open_files: int = 1024
    output_chars: int = 20_000
    output_kill_mb: int = 4
    cpus: float = 1.0
    disk_mb: int = 1024

    def with_timeout(self, timeout: float | None) -> "Limits":
        if timeout is None:
            return self
        return replace(self, timeout=float(timeout))

    @property
    def file_bytes(self) -> int:
        """RLIMIT_FSIZE: no file may be larger than the whole disk quota either."""
        return min(self.file_size_mb, self.disk_mb) * MiB

    @property
    def cpu_limit(self) -> int:
        return int(self.cpu_seconds if self.cpu_seconds is not None else self.timeout + 5)


@dataclass(frozen=True)
class Runtime:
    """What a sandbox runs with besides its workspace.

    image: Docker image (docker backend); must exist locally, it is never pulled.
    binds: read-only (host path, sandbox path) mounts for the bwrap and unsafe-local backends,
        e.g. a virtualenv with the test dependencies.
    hide: sandbox paths inside mounted trees that must look empty (a tmpfs is mounted over them).
    env: environment variables inside the sandbox (PATH, VIRTUAL_ENV, ...).
    build_hint: the command that creates the image, quoted in the error when it is missing.
    """

    image: str | None = None
    binds: tuple[tuple[str, str], ...] = ()
    hide: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    build_hint: str = ""

    def environment(self, workdir: str) -> dict[str, str]:
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp",
               "LANG": "C.UTF-8", "TMPDIR": "/tmp", "PWD": workdir, "PYTHONDONTWRITEBYTECODE": "1"}
        env.update(dict(self.env))
        return env


@dataclass
class CommandResult:
    """Outcome of one command. exit_code is None when the sandbox killed the command."""

    exit_code: int | None
    stdout: str
    stderr: str
    elapsed: float
    timed_out: bool = False
    #: why the sandbox stopped the command (timeout, output flood, ...), None if it ended itself
    killed: str | None = None
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed is None

    def output(self) -> str:
        """stdout and stderr joined, followed by the sandbox's note if it stopped the command."""
        text = self.stdout
        if self.stderr:
            text += ("" if not text or text.endswith("\n") else "\n") + self.stderr
        if self.killed:
            text += ("" if not text or text.endswith("\n") else "\n") + f"[sandbox: {self.killed}]"
        return text


class OutputCapture:
    """Collects one stream: keeps the first and the last `limit // 2` bytes, counts the rest.

    `feed` returns False once more than `kill_bytes` arrived, so the caller can stop the command.
    """

    def __init__(self, limit: int, kill_bytes: int):
        self.half = max(1, limit // 2)
        self.kill_bytes = kill_bytes
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self._lock = threading.Lock()

    def feed(self, chunk: bytes) -> bool:
        with self._lock:
            self.total += len(chunk)
            room = self.half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            self.tail += chunk
            if len(self.tail) > 2 * self.half:  # trim rarely, keep the last `half` bytes
                del self.tail[: len(self.tail) - self.half]
            return self.total <= self.kill_bytes

    def text(self) -> tuple[str, bool]:
        """(decoded text, whether something was cut out of the middle)."""
        with self._lock:
            if self.total <= 2 * self.half:
                return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace"), False
            tail = bytes(self.tail[-self.half:])
            omitted = self.total - len(self.head) - len(tail)
            note = f"\n[... output truncated: {omitted} bytes omitted ...]\n"
            return self.head.decode("utf-8", "replace") + note + tail.decode("utf-8", "replace"), True


@dataclass(frozen=True)
class FileChange:
    """One changed path of the workspace (POSIX path relative to the workspace root)."""

    path: str
    kind: str  # "added", "modified", "deleted"
    #: new content (None for deletions, links and files too large to read)
    content: bytes | None = field(default=None, repr=False)
    is_link: bool = False


def _walk(root: Path, ignored: tuple[str, ...]) -> dict[str, os.stat_result]:
    """Relative path -> lstat of every regular file and symlink under root (links not followed)."""
    found: dict[str, os.stat_result] = {}
    stack = [("", str(root))]
    while stack:
        rel, path = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:  # unreadable folder made by the sandbox user
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if entry.name not in ignored:
                    stack.append((f"{rel}{entry.name}/", entry.path))
            elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                found[f"{rel}{entry.name}"] = st
    return found


def _read_entry(path: Path, st: os.stat_result) -> tuple[bytes | None, bool]:
    """(content, is_link): a link's target text, a regular file's bytes (None if too large)."""
    if stat.S_ISLNK(st.st_mode):
        return os.readlink(path).encode(), True
    if st.st_size > MAX_DIFF_BYTES:
        return None, False
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    try:
        with os.fdopen(fd, "rb") as fh:
            return fh.read(MAX_DIFF_BYTES + 1), False
    except OSError:
        return None, False


def tree_changes(base: Path, work: Path, ignored: tuple[str, ...] = DEFAULT_IGNORED) -> list[FileChange]:
    """Files added, modified or deleted in `work` relative to `base`, sorted by path."""
    before, after = _walk(base, ignored), _walk(work, ignored)
    changes: list[FileChange] = []
    for rel in sorted(set(before) | set(after)):
        if rel not in after:
            changes.append(FileChange(rel, "deleted"))
            continue
        new, new_link = _read_entry(work / rel, after[rel])
        if rel not in before:
            changes.append(FileChange(rel, "added", None if new_link else new, new_link))
            continue
        old, old_link = _read_entry(base / rel, before[rel])
        if new != old or new_link != old_link or new is None:
            changes.append(FileChange(rel, "modified", None if new_link else new, new_link))
    return changes


def unified_diff(base: Path, changes: list[FileChange]) -> str:
    """A git-style unified diff of `changes` against the tree at `base`."""
    parts: list[str] = []
    for ch in changes:
        old_text = b""
        if ch.kind != "added":
            old_path = base / ch.path
            old, _ = _read_entry(old_path, os.lstat(old_path))
            old_text = old or b""
        new_text = ch.content or b""
        if ch.is_link or ch.content is None and ch.kind != "deleted" or b"\0" in old_text + new_text:
            parts.append(f"diff --git a/{ch.path} b/{ch.path}\nBinary, link or large file {ch.kind}\n")
            continue
        old_lines = old_text.decode("utf-8", "replace").splitlines(keepends=True)
        new_lines = new_text.decode("utf-8", "replace").splitlines(keepends=True)
        src = "/dev/null" if ch.kind == "added" else f"a/{ch.path}"
        dst = "/dev/null" if ch.kind == "deleted" else f"b/{ch.path}"
        body = "".join(_terminated(difflib.unified_diff(old_lines, new_lines, src, dst)))
        parts.append(f"diff --git a/{ch.path} b/{ch.path}\n{body}")
    return "".join(parts)


def _terminated(lines):
    for line in lines:
        yield line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"


#: tarfile's safe extraction filter where this Python has it (3.10.12+, 3.11.4+)
TAR_FILTER = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def copy_tree(src: Path, dst: Path, into: bool = False) -> None:
    """Copy a folder keeping symlinks as links (never following them); `into`: `dst` exists (empty)."""
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=into)


def chown_tree(root: Path, uid: int, gid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        os.lchown(dirpath, uid, gid)
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


def workspace_of(root: Path) -> Path:
    """The workspace folder of the sandbox folder `root` (`new_root`)."""
    return root / quota.DATA_DIR / "workspace"


def new_root(disk_mb: int) -> tuple[Path, bool]:
    """A sandbox's host folder: its owner tag and `data`, holding an empty `workspace`; returns (folder,
    whether `data` is a tmpfs of `disk_mb`)."""
    root = Path(tempfile.mkdtemp(prefix=quota.ROOT_PREFIX))
    try:
        os.chmod(root, 0o711)  # the sandbox user must traverse it to reach its workspace
        (root / quota.OWNER_FILE).write_text(quota.owner_tag())
        # everything the sandbox can write lives in `data`: a tmpfs of disk_mb when we may mount
        data = root / quota.DATA_DIR
        data.mkdir(mode=0o711)
        mounted = quota.mount_tmpfs(data, disk_mb)
        workspace_of(root).mkdir()
    except BaseException:
        quota.remove_root(root)
        raise
    return root, mounted


class Sandbox(ABC):
    """A workspace folder plus a way to run commands on it in isolation.

    Subclasses implement `_run(command, limits)` (and `_close()` for extra cleanup). Paths given
    to `read_file`/`write_file` are relative to the workspace or absolute under `workdir`.
    """

    backend = "abstract"

    def __init__(self, source: str | Path | None, *, workdir: str = "/workspace", limits: Limits | None = None,
                 runtime: Runtime | None = None, baseline: str | Path | None = None):
        if not workdir.startswith("/") or workdir == "/":
            raise SandboxError(f"workdir must be an absolute path below /, got {workdir!r}")
        self.workdir = workdir.rstrip("/")
        self.limits = limits or Limits()
        self.runtime = runtime or Runtime()
        quota.reap_orphan_folders_once()
        self._root, self._quota_mounted = self._new_root()
        self.closed = False
        try:
            self._data = self._root / quota.DATA_DIR
            self.host_workspace = workspace_of(self._root)
            self._baseline = self._root / "baseline"
            if source is not None:
                copy_tree(Path(source), self.host_workspace, into=True)
            else:
                self._populate_from_runtime(self.host_workspace)
            if baseline is not None:  # the caller's immutable copy of the starting tree saves a copy
                self._baseline = Path(baseline)
            else:
                copy_tree(self.host_workspace, self._baseline)
                os.chmod(self._baseline, 0o700)
        except BaseException:
            quota.remove_root(self._root)
            raise

    # ------------------------------------------------------------------ backend hooks
    def _new_root(self) -> tuple[Path, bool]:
        """The sandbox's host folder with its empty workspace (`new_root`; docker may hand over one
        made ahead for a prestarted container)."""
        return new_root(self.limits.disk_mb)

    def _populate_from_runtime(self, dest: Path) -> None:
        """Fill the empty workspace when no source folder is given (docker: the image's workdir)."""

    @abstractmethod
    def _run(self, command: str, limits: Limits) -> CommandResult:
        raise NotImplementedError

    def _close(self) -> None:
        """Backend cleanup (containers); the workspace folders are removed by close()."""

    # ------------------------------------------------------------------ public API
    def run(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run `command` with bash in `workdir` under the sandbox's limits (timeout overrides)."""
        if self.closed:
            raise SandboxError("the sandbox is closed")
        if "\0" in command:
            return CommandResult(None, "", "", 0.0, killed="command contains a NUL byte; not run")
        try:
            command.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate cannot become an argv or exec payload
            return CommandResult(None, "", "", 0.0,
                                 killed="command is not valid Unicode text (lone surrogate); not run")
        return self._run(command, self.limits.with_timeout(timeout))

    def _disk_watch(self):
        """None when a tmpfs enforces the quota, else a watchdog check for the command's wait loop."""
        if self._quota_mounted:
            return None
        return quota.disk_watch([self._data], self.limits.disk_mb)

    def host_path(self, path: str | Path) -> Path:
        """The host path of a workspace file; refuses paths (or links) that leave the workspace."""
        p = PurePosixPath(str(path))
        if p.is_absolute():
            try:
                p = p.relative_to(self.workdir)
            except ValueError:
                raise SandboxError(f"{path} is outside the workspace {self.workdir}") from None
        root = self.host_workspace.resolve()
        full = (root / p).resolve()
        if full != root and root not in full.parents:
            raise SandboxError(f"{path} leaves the workspace")
        return full

    def read_file(self, path: str | Path) -> bytes:
        full = self.host_path(path)
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise SandboxError(f"{path} is not a regular file")
            return fh.read()

    def read_text(self, path: str | Path) -> str:
        return self.read_file(path).decode("utf-8", "replace")

    def write_file(self, path: str | Path, data: bytes | str) -> None:
        full = self.host_path(path)
        full.parent.mkdir(parents=True, exist_ok=True)
        if full.is_symlink():
            full.unlink()
        full.write_bytes(data.encode() if isinstance(data, str) else data)
        self._own(full)

    def _own(self, path: Path) -> None:
        """Give host-written files to the sandbox user (backends running as another uid override)."""

    def changes(self, ignored: tuple[str, ...] = DEFAULT_IGNORED) -> list[FileChange]:
        """Every file added, modified or deleted since the start, links reported but not followed."""
        return tree_changes(self._baseline, self.host_workspace, ignored)

    def diff(self, changes: list[FileChange] | None = None) -> str:
        """Unified diff of the workspace against its starting tree (or of the given changes)."""
        return unified_diff(self._baseline, self.changes() if changes is None else changes)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._close()
        finally:
            quota.remove_root(self._root)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __reduce_ex__(self, protocol):
        # a copy would share the workspace and container and delete them when it is closed
        raise TypeError(f"a {type(self).__name__} owns a live workspace and cannot be copied or pickled")

    def __del__(self):
        try:
            if not self.closed:
                self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.workdir} on {self.host_workspace}>"
