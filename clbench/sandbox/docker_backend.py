"""The Docker backend: one long-lived container per sandbox, one long-lived command runner in it.

The container has no network (`network_mode="none"`), a read-only root filesystem, a private
tmpfs /tmp, every capability dropped but the three a root runner needs to drop to the sandbox's
uid (`RUNNER_CAPS`), no-new-privileges, memory (= memory + swap), CPU and pids limits and
file-size / open-file ulimits. The workspace is the host folder bind-mounted at `workdir`. Images
are never pulled: a missing image is a `SandboxUnavailable` naming the build command.

A `docker exec` costs ~0.1 s of wall and ~0.2 s of the machine's CPU (dockerd, containerd, runc),
far more than a short command (issue 34). So, as with bwrap (clbench.sandbox.session, whose runner
loop this shares), the first command starts ONE exec per container: a root bash loop (uid 0 with
only `RUNNER_CAPS`) that reads one command at a time from its stdin and runs it with `bash -c`
behind `setpriv` as the workspace owner's uid, without groups or capabilities (bounding set
included), stdin /dev/null, stdout and stderr the exec's. A command cannot signal, trace or feed
the runner (another uid; its stdin is reachable only through /proc/<runner>/fd, which needs
ptrace access) and cannot forge its reply: after a command, the runner kills every process of
that uid (`kill -9 -1`, atomic against forks) from a process it cannot trace either (real uid
`nobody`), waits until each one has exited, and only then writes a line with a random tag this
process sent with the command, unknown to the command, on stdout (with the exit status) and on
stderr: what precedes the tags is the command's output, all of it. This process still enforces
the time limit, an output flood and the disk quota itself; on any of them, or when the runner
ends, does not answer or could not kill what the command left, the container is removed and a
fresh one started on the same workspace (the next command starts a new runner), and the result
says so.

`prestart=True` (a process that opens sandboxes one after another, e.g. CodeRepair): once a
sandbox's container runs, the next one is started on a background thread, with exactly the
configuration and limits this sandbox has, over a new empty host folder (`Spare`). The next
sandbox of the same configuration takes it and copies its tree into that folder; any other
configuration discards it. A spare is handed out once, before any command ran in it; it carries
a lifeline and an owner tag like every container, and is removed at exit.
"""
from __future__ import annotations

import atexit
import functools
import io
import os
import secrets
import select
import socket
import struct
import tarfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from clbench.sandbox import quota
from clbench.sandbox.base import TAR_FILTER, MiB, CommandResult, Limits, OutputCapture, Runtime, Sandbox, SandboxUnavailable, \
    chown_tree, new_root, workspace_of
from clbench.sandbox.process import WATCH_INTERVAL
from clbench.sandbox.session import INLINE_BYTES, NO_PRIVILEGES, quote_argv, runner_script, uid_drop

#: uid the container runs as when clbench runs as root (a plain, unprivileged account)
CONTAINER_UID = 1000
LABEL = "clbench.sandbox"
#: the owner process (clbench.sandbox.quota.owner_tag): containers of dead owners are reaped
OWNER_LABEL = "clbench.owner"
#: the container's only capabilities, held by its root processes (init, the lifeline, the runner),
#: none by commands: enough to drop to the sandbox's uid and empty the bounding set
RUNNER_CAPS = ("SETUID", "SETGID", "SETPCAP")
#: the real uid/gid of the process that kills a command's leftovers: neither root nor the sandbox's
#: (so commands can neither trace it nor make it kill root's processes)
NOBODY = 65534
#: scans of /proc (~1 ms each) the runner waits through for a command's killed processes to be gone
REAP_SCANS = 2000
#: The runner's reply (`{reap}`: the kill's uid drop; `{uid}`: the sandbox's): kill everything of the
#: command's uid, up to three times if the kill itself was killed, wait until no process of that
#: (real) uid is running (a zombie has closed its files; a command cannot change its uid), then the
#: tag line on stdout (`TAG STATUS CLEAN`) and on stderr (`TAG`)
REPLY = r"""rc=$?; clean=0
  for _ in 1 2 3; do
    ( exec {reap}/bin/bash -p -c 'kill -9 -1' ) </dev/null >/dev/null 3>&- || continue
    for ((i = 0; i < %d; i++)); do
      left=
      for s in /proc/[0-9]*/status; do
        state=
        while read -r k v _; do
          case $k in State:) state=$v;; Uid:) [ "$state" != Z ] && [ "$v" = {uid} ] && left=1; break;; esac
        done <"$s"
        [ -n "$left" ] && break
      done
      [ -z "$left" ] && { clean=1; break 2; }
    done
    break
  done
  printf '%%s %%s %%s\n' "$tag" "$rc" "$clean"; printf '%%s\n' "$tag" >&3""" % REAP_SCANS


def _labels(kind: str) -> dict[str, str]:
    return {LABEL: kind, OWNER_LABEL: quota.owner_tag()}


def reap_orphan_containers(client=None) -> int:
    """Remove sandbox containers whose owner process died (SIGKILL leaves `sleep infinity` running)."""
    client = client or docker_client()
    if client is None:
        return 0
    removed = 0
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        tag = container.labels.get(OWNER_LABEL)
        if tag and quota.owner_alive(tag) is False:
            try:
                container.remove(force=True)
                removed += 1
            except Exception:  # noqa: BLE001 - removed concurrently
                pass
    return removed


@functools.cache
def _reap_once() -> int:
    return reap_orphan_containers()


@functools.cache
def docker_client():
    """A docker SDK client that answered a ping, or None (cached per process)."""
    try:
        import docker
    except ImportError:
        return None
    try:
        client = docker.from_env(timeout=120)
        client.ping()
        return client
    except Exception:  # noqa: BLE001 - no engine, no permission, bad DOCKER_HOST: all mean "unavailable"
        return None


def engine_status() -> tuple[bool, str]:
    """(answers, reason) for the Docker engine."""
    if docker_client() is None:
        return False, "no Docker engine answers (is dockerd running and DOCKER_HOST/socket permissions right?)"
    return True, ""


def image_exists(image: str) -> bool:
    client = docker_client()
    if client is None:
        return False
    import docker.errors

    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False


def container_config(runtime: Runtime, workdir: str, lim: Limits, workspace: Path) -> dict:
    """`containers.create` arguments of a sandbox's container over the host folder `workspace`."""
    import docker.types

    return dict(
        image=runtime.image,
        # the container's lifeline: its main process reads stdin, which this process holds open
        # (`_lifeline`); when clbench dies, even by SIGKILL, the stream closes, the read ends and
        # the container stops with everything in it
        command=["/bin/sh", "-c", "cat >/dev/null"],
        stdin_open=True,
        detach=False,  # with stdin_open: StdinOnce, so the first attach's end closes stdin
        init=True,
        network_mode="none",
        user="0:0",  # init, the lifeline and the runner run as root (`RUNNER_CAPS`); commands as the sandbox's uid
        working_dir=workdir,
        environment=runtime.environment(workdir),
        volumes={str(workspace): {"bind": workdir, "mode": "rw"}},
        read_only=True,
        tmpfs={"/tmp": f"rw,exec,nosuid,size={lim.disk_mb}m,mode=1777",
               "/var/tmp": "rw,nosuid,size=64m,mode=1777"},
        cap_drop=["ALL"],
        cap_add=list(RUNNER_CAPS),
        security_opt=["no-new-privileges"],
        mem_limit=lim.memory_mb * MiB,
        memswap_limit=lim.memory_mb * MiB,
        nano_cpus=int(lim.cpus * 1e9),
        pids_limit=lim.processes,
        ulimits=[docker.types.Ulimit(name="fsize", soft=lim.file_bytes, hard=lim.file_bytes),
                 docker.types.Ulimit(name="nofile", soft=lim.open_files, hard=lim.open_files),
                 docker.types.Ulimit(name="core", soft=0, hard=0)],
        hostname="sandbox",
        labels=_labels("1"),
    )


class DockerSandbox(Sandbox):
    backend = "docker"

    def __init__(self, source=None, *, workdir: str = "/workspace", limits: Limits | None = None,
                 runtime: Runtime | None = None, baseline=None, prestart: bool = False):
        runtime = runtime or Runtime()
        ok, why = engine_status()
        if not ok:
            raise SandboxUnavailable(why)
        if not runtime.image:
            raise SandboxUnavailable("the docker backend needs an image (Runtime.image)")
        if not image_exists(runtime.image):
            hint = f"; build it with `{runtime.build_hint}`" if runtime.build_hint else ""
            raise SandboxUnavailable(f"Docker image {runtime.image!r} is not present locally (images are never "
                                     f"pulled){hint}")
        self.client = docker_client()
        _reap_once()
        self.container = None
        self._runner = None  # (socket wrapper, plain socket) of the runner's exec, started by the first command
        self._serial = threading.Lock()  # one runner: one command at a time
        self._runtime_for_populate = runtime
        try:
            super().__init__(source, workdir=workdir, limits=limits, runtime=runtime, baseline=baseline)
            if os.geteuid() == 0:
                self.uid = self.gid = CONTAINER_UID
                chown_tree(self.host_workspace, self.uid, self.gid)
            else:
                self.uid, self.gid = os.getuid(), os.getgid()
        except BaseException:
            self._remove_container()  # a spare's, taken by `_new_root`
            raise
        if self.container is None:
            self._start()
        if prestart:
            _spares(os.getpid()).prepare(self.client, self._config_for(), self.limits.disk_mb)

    # ------------------------------------------------------------------ container lifecycle
    def _config_for(self):
        """workspace folder -> this sandbox's `containers.create` arguments over it (`container_config`)."""
        return functools.partial(container_config, self.runtime, self.workdir, self.limits)

    def _new_root(self) -> tuple[Path, bool]:
        """A prestarted spare's folder and container when it was made with exactly this sandbox's
        configuration, else a new folder (whose container starts once the workspace is filled)."""
        spare = _spares(os.getpid()).take(self._config_for())
        if spare is None:
            return super()._new_root()
        self.container, self._lifeline = spare.container, spare.lifeline
        return spare.root, spare.mounted

    def _populate_from_runtime(self, dest: Path) -> None:
        """Copy the image's `workdir` out to the host workspace (start from an image)."""
        runtime = self._runtime_for_populate
        container = self.client.containers.create(runtime.image, command=["true"], network_mode="none",
                                                  labels=_labels("populate"))
        try:
            stream, _ = container.get_archive(self.workdir)
            data = io.BytesIO(b"".join(stream))
        finally:
            container.remove(force=True)
        with tarfile.open(fileobj=data) as tar:
            top = tar.getmembers()[0].name.split("/")[0] if tar.getmembers() else ""
            for member in tar.getmembers():
                if not (member.isfile() or member.isdir() or member.issym()):
                    continue
                rel = member.name[len(top):].lstrip("/")
                if not rel:
                    continue
                member.name = rel
                tar.extract(member, dest, **TAR_FILTER)

    def _start(self) -> None:
        self.container, self._lifeline = _launch(self.client, self._config_for()(self.host_workspace))

    def _restart(self) -> None:
        self._remove_container(wait=True)  # nothing of the killed command may run beside the next one
        self._start()

    def _remove_container(self, wait: bool = False) -> None:
        """Stop and remove the container. Closing need not wait for dockerd's teardown (0.3-1 s on a busy
        machine): the lifeline's end stops the container at once, and the removal finishes in the
        background (joined at exit; a removal cut short by a killed owner is reaped as an orphan)."""
        runner, self._runner = getattr(self, "_runner", None), None
        if runner is not None:
            _shutdown(runner[1])  # an attached stream makes `docker kill` wait, so detach first
        lifeline, self._lifeline = getattr(self, "_lifeline", None), None
        if lifeline is not None:
            _shutdown(lifeline)
        if self.container is not None:
            if wait:
                _remove(self.container)
            else:
                _remove_later(_remove, self.container)
            self.container = None

    # ------------------------------------------------------------------ commands
    def runner_code(self) -> str:
        """The runner's bash code (clbench.sandbox.session's loop with the Docker reply `REPLY`)."""
        nobody = NOBODY if self.uid != NOBODY else NOBODY - 1
        reap = ["setpriv", f"--ruid={nobody}", f"--euid={self.uid}", f"--rgid={nobody}", f"--egid={self.gid}",
                *NO_PRIVILEGES]
        return runner_script(uid_drop(self.uid, self.gid), ready="",
                             reply=REPLY.replace("{reap}", quote_argv(reap)).replace("{uid}", str(self.uid)))

    def _runner_socket(self):
        """The runner's exec stream (its stdin, and its stdout and stderr multiplexed), started if need be."""
        if self._runner is None:
            api = self.client.api
            exec_id = api.exec_create(self.container.id, ["/bin/bash", "-c", self.runner_code()], stdin=True,
                                      user="0:0", workdir=self.workdir)["Id"]
            sock = api.exec_start(exec_id, socket=True)
            raw = getattr(sock, "_sock", sock)  # the plain socket, read with select
            raw.settimeout(None)
            self._runner = (sock, raw)
        return self._runner[1]

    def _run(self, command: str, limits: Limits) -> CommandResult:
        with self._serial:
            return self._run_one(command, limits)

    def _run_one(self, command: str, limits: Limits) -> CommandResult:
        start = time.monotonic()
        tag = secrets.token_hex(16)
        data = command.encode()
        request = (f"{limits.cpu_limit} {len(data)} {tag}\n".encode() + data
                   + (b"\0" if len(data) <= INLINE_BYTES else b""))
        reply = Reply(tag.encode(), OutputCapture(limits.output_chars, limits.output_kill_mb * MiB),
                      OutputCapture(limits.output_chars, limits.output_kill_mb * MiB))
        reason: list[str] = []
        broken = None
        timed_out = False
        try:
            raw = self._runner_socket()
            raw.sendall(request)
        except OSError:
            broken = "its command runner is gone"
        watch = self._disk_watch()
        deadline, next_watch = start + limits.timeout, start + WATCH_INTERVAL
        while broken is None and not reason and not reply.done:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                reason.append(f"timed out after {limits.timeout:g} s; the command and all its processes were killed")
                break
            if watch is not None and now >= next_watch:  # no tmpfs quota on the host folder: poll its size
                why = watch()
                if why:
                    reason.append(why)
                    break
                next_watch = now + WATCH_INTERVAL
            ready, _, _ = select.select([raw], [], [], max(0.0, (min(deadline, next_watch) if watch else deadline) - now))
            if not ready:
                continue
            try:
                chunk = raw.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                broken = "its command runner ended"
            elif not reply.feed(chunk):
                reason.append(f"output exceeded {limits.output_kill_mb} MB; the command was killed")
        if reply.done and reply.status is None:
            broken = "what the command left running could not be killed"
        if broken is not None and not reason:
            reason.append(f"the container was restarted ({broken}); files in the workspace are kept")
        if reason:
            self._restart()  # kills every process of the command; the workspace is on the host
        stdout, cut_out = reply.out.text()
        stderr, cut_err = reply.err.text()
        return CommandResult(None if reason else reply.status, stdout, stderr, time.monotonic() - start,
                             timed_out=timed_out, killed=reason[0] if reason else None,
                             truncated=cut_out or cut_err)

    def _own(self, path: Path) -> None:
        if os.geteuid() == 0:
            os.lchown(path, self.uid, self.gid)

    def _close(self) -> None:
        self._remove_container()


def _remove(container) -> None:
    try:
        container.remove(force=True)
    except Exception:  # noqa: BLE001 - already gone
        pass


def _launch(client, config: dict):
    """Create and start a container: (container, its lifeline: the attached stdin its main process reads)."""
    container = client.containers.create(**config)
    try:
        lifeline = client.api.attach_socket(container.id, params={"stdin": 1, "stream": 1})
        container.start()
    except BaseException:
        _remove(container)
        raise
    return container, lifeline


@dataclass
class Spare:
    """A prestarted container over its own new host folder (`new_root`); no command has run in it."""

    config: dict  # its containers.create arguments
    root: Path
    mounted: bool
    container: object
    lifeline: object

    @classmethod
    def make(cls, client, config_for, disk_mb: int) -> "Spare":
        root, mounted = new_root(disk_mb)
        try:
            config = config_for(workspace_of(root))
            container, lifeline = _launch(client, config)
        except BaseException:
            quota.remove_root(root)
            raise
        return cls(config, root, mounted, container, lifeline)

    def discard(self) -> None:
        _shutdown(self.lifeline)
        _remove(self.container)
        quota.remove_root(self.root)


class Spares:
    """This process's one prestarted container (`DockerSandbox(prestart=True)`), made on a thread of its own."""

    def __init__(self):
        self._owner = os.getpid()
        self._lock = threading.Lock()
        self._next: Future | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clbench-docker-spare")
        atexit.register(self.discard)

    def prepare(self, client, config_for, disk_mb: int) -> None:
        """Start a spare of `config_for` (workspace folder -> create arguments) in the background, unless
        one is on its way."""
        with self._lock:
            if self._next is None:
                try:
                    self._next = self._pool.submit(Spare.make, client, config_for, disk_mb)
                except RuntimeError:  # at interpreter shutdown: no new threads
                    pass

    def take(self, config_for) -> Spare | None:
        """The spare if it was made with exactly the arguments `config_for` gives over its folder (waiting
        for it if it is still starting); a spare of another configuration is discarded. Either way no spare
        is left."""
        with self._lock:
            future, self._next = self._next, None
        if future is None:
            return None
        try:
            spare = future.result()
        except Exception:  # noqa: BLE001 - the sandbox starts its own container and reports the error
            return None
        if spare.config == config_for(workspace_of(spare.root)):
            return spare
        _remove_later(spare.discard)
        return None

    def discard(self) -> None:
        """Remove the spare, if any (at exit: the lifeline alone would only stop it)."""
        if os.getpid() != self._owner:  # a forked child's exit: the spare is its parent's
            return
        with self._lock:
            future, self._next = self._next, None
        if future is not None:
            try:
                future.result().discard()
            except Exception:  # noqa: BLE001 - it never started
                pass


#: per process id: a forked child makes its own, the parent's spare belongs to the parent
_SPARES: dict[int, Spares] = {}


def _spares(pid: int) -> Spares:
    return _SPARES.get(pid) or _SPARES.setdefault(pid, Spares())


def discard_spare() -> None:
    """Remove this process's prestarted container, if any (e.g. an env closing its last sandbox)."""
    if os.getpid() in _SPARES:
        _SPARES[os.getpid()].discard()


def _remove_later(remove, *args) -> None:
    """`remove(*args)` on this process's removal thread (`_removals`), or here at interpreter shutdown,
    when no new thread may start."""
    try:
        _removals(os.getpid()).submit(remove, *args)
    except RuntimeError:
        remove(*args)


@functools.cache
def _removals(pid: int) -> ThreadPoolExecutor:
    """This process's thread that removes closed sandboxes' containers (concurrent.futures joins it at
    exit; a forked child gets its own, the parent's thread does not exist there)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="clbench-docker-remove")


class Reply:
    """One command's part of the runner's multiplexed exec stream: its output up to the tag lines.

    stdout ends with `TAG STATUS CLEAN\n`, stderr with `TAG\n` (each stream keeps its own order, not
    their order between them); what precedes a tag is the command's output. The tag is random per
    command and never seen by it, so no output can end a stream early."""

    def __init__(self, tag: bytes, out: OutputCapture, err: OutputCapture):
        self.tag = tag
        self.caps = {1: out, 2: err}
        self.out, self.err = out, err
        self.held = {1: b"", 2: b""}  # bytes that may be the start of the tag
        self.line: dict[int, bytes | None] = {1: None, 2: None}  # from the tag on, once seen
        self.frames = bytearray()
        #: the command's exit status, None if its leftovers could not be killed (or the line was bad)
        self.status: int | None = None

    @property
    def done(self) -> bool:
        return all(line is not None and line.endswith(b"\n") for line in self.line.values())

    def feed(self, chunk: bytes) -> bool:
        """Take a chunk of the exec stream; False once either capture passed its kill size."""
        ok = True
        self.frames += chunk
        while len(self.frames) >= 8:
            stream_id, size = struct.unpack(">BxxxL", self.frames[:8])
            if len(self.frames) < 8 + size:
                break
            payload = bytes(self.frames[8:8 + size])
            del self.frames[:8 + size]
            if stream_id in self.caps:
                ok = self._stream(stream_id, payload) and ok
        if self.done:
            status, clean = (self.line[1][len(self.tag):].split() + [b"", b""])[:2]
            self.status = int(status) if status.isdigit() and clean == b"1" else None
        return ok

    def _stream(self, stream_id: int, payload: bytes) -> bool:
        if self.line[stream_id] is not None:
            self.line[stream_id] += payload
            return True
        data = self.held[stream_id] + payload
        at = data.find(self.tag)
        if at >= 0:
            self.line[stream_id], data, self.held[stream_id] = data[at:], data[:at], b""
        else:
            keep = min(len(data), len(self.tag) - 1)
            data, self.held[stream_id] = data[:len(data) - keep], data[len(data) - keep:]
        return self.caps[stream_id].feed(data) if data else True


def _shutdown(sock) -> None:
    """Shut down and close a socket, or the plain socket inside docker's socket wrapper."""
    sock = getattr(sock, "_sock", sock)
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
