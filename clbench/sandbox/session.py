"""One long-lived bubblewrap sandbox and the command runner inside it (the `docker exec` of bwrap).

Starting bwrap, joining a control group and setting rlimits cost far more than a short command
(issue 34), and all of it is the same for every command of a sandbox. So a sandbox starts once,
at its first command: bwrap runs a small bash loop (`RUNNER`) that reads one command at a time
from a socket on its stdin, runs it with `bash -c` (stdin /dev/null, stdout and stderr the
sandbox's two output pipes), waits for it and writes its exit status back. Everything bwrap sets
up (namespaces, mounts, seccomp filter, rlimits, control group, --die-with-parent) is inherited by
every command, and this process still enforces every bound itself, trusting nothing the runner
says beyond the exit status:

- the time limit, an output flood, the disk quota and the summed-RSS fallback are watched here;
  stopping a command kills every process of the sandbox except its three own (bwrap, bwrap's
  pid 1, the runner), so only that command's processes die and the sandbox stays up;
- after every command, whatever it left running (background jobs, daemons) is killed the same
  way before its output is read to the end, so nothing outlives its command;
- the control group (memory summed over all processes, processes) is one per sandbox, made at
  its start; its OOM-kill counter is read before and after each command;
- run as root, the runner is uid 0 with only the capabilities `RUNNER_CAPS` (all gone in the
  commands, which drop to the sandbox's uid with `setpriv`): a command can neither signal nor
  trace the runner nor open its socket; where this process has
  CAP_SYS_RESOURCE, bwrap and the runner are exempt from the OOM killer (oom_score_adj -1000,
  reset to 0 for each command);
- run by an unprivileged user, runner and commands share one uid (bwrap's user namespace maps
  only that one): a command can kill the runner (the sandbox is then started afresh) and, where
  ptrace is not restricted (Yama), feed it; so what is left in the sandbox is also killed before
  each command, and every bound is still this process's;
- if the runner or bwrap dies anyway (or does not answer after a kill), the whole sandbox is
  killed and the next command starts a fresh one (the workspace, /tmp and /var/tmp are host
  folders and persist), and the result says so.
"""
from __future__ import annotations

import os
import resource
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

from clbench.sandbox import cgroup
from clbench.sandbox.base import MiB, CommandResult, Limits, OutputCapture

#: commands up to this many bytes are read by bash's `read -d ''` (one byte per read call);
#: longer ones by `head -c`, which reads in blocks
INLINE_BYTES = 16_384
#: seconds a stopped command's runner has to report, and to start, before the sandbox is killed
GRACE = 5.0
#: seconds between two checks of a command's watchdogs (disk quota without a tmpfs, summed RSS)
WATCH_INTERVAL = 0.2
#: The runner loop both backends share (`runner_script`): a request is a header line `CPU LEN [TAG]`
#: then the command's LEN bytes; `{drop}`: the uid drop of root-run runners (empty otherwise);
#: `{oom}`: the OOM reset; `{ready}` and `{reply}`: the backend's start and answer (the exit status is
#: `$?` there). The runner's own stderr is /dev/null (bash would report a killed command there);
#: fd 3 is the real one
RUNNER = r"""unset SHLVL; exec 3>&2 2>/dev/null
{ready}while IFS=' ' read -r cpu len tag; do
  if [ "$len" -le %d ]; then IFS= read -r -d '' cmd; else cmd=$(head -c "$len"; printf x); cmd=${cmd%%x}; fi
  ( ulimit -t "$cpu" {oom}&& exec {drop}/bin/bash -c "$cmd" ) </dev/null 2>&3 3>&-
  {reply}
done
""" % INLINE_BYTES
#: the bwrap session's start and answer: on its stdin, a socket only the runner holds
SOCKET_READY = "printf 'ready\\n' >&0\n"
SOCKET_REPLY = "printf '%s\\n' \"$?\" >&0"
CAP_SYS_RESOURCE = 24


def _has_sys_resource() -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    except (OSError, ValueError):
        pass
    return False


#: the runner's capabilities when run as root: enough to enter the workspace (the sandbox uid's,
#: 0700) and to drop to the sandbox's uid, nothing else; and CAP_SYS_RESOURCE where this process
#: has it, to hand commands an OOM score of 0 they cannot lower
RUNNER_CAPS = (("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_READ_SEARCH")
               + (("CAP_SYS_RESOURCE",) if _has_sys_resource() else ()))
#: waits for one line on stdin (the socket), then becomes bwrap with the socket still as stdin
HOLD = ["/bin/sh", "-c", 'read -r _ && exec "$@"', "clbench-hold"]


def runner_script(drop: list[str], ready: str = SOCKET_READY, reply: str = SOCKET_REPLY) -> str:
    """The runner's bash code; `drop` is the argv prefix that drops to the sandbox's uid; `ready`
    and `reply` say how the runner starts and answers (default: bwrap's socket on stdin)."""
    # the OOM score is reset only where it was lowered (root with CAP_SYS_RESOURCE, `_release`)
    oom = "&& echo 0 >/proc/self/oom_score_adj " if drop and "CAP_SYS_RESOURCE" in RUNNER_CAPS else ""
    return (RUNNER.replace("{oom}", oom).replace("{drop}", quote_argv(drop))
            .replace("{ready}", ready).replace("{reply}", reply))


def quote_argv(argv: list[str]) -> str:
    """`argv` as bash words (each single-quoted, with a trailing space), for the runner's code."""
    return "".join("'" + a.replace("'", "'\\''") + "' " for a in argv)


#: setpriv's options after the ids, for every process a root runner starts: no groups, no
#: capabilities (bounding set included), no new privileges
NO_PRIVILEGES = ("--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--")


def uid_drop(uid: int, gid: int) -> list[str]:
    """The argv prefix a root runner (with `RUNNER_CAPS`) runs a command behind: the sandbox's uid
    and gid, and NO_PRIVILEGES."""
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", *NO_PRIVILEGES]


def _children(pid: int) -> list[int]:
    kids = cgroup.children_of(pid)
    return cgroup._children().get(pid, []) if kids is None else kids


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class SandboxSession:
    """A started sandbox: `run()` one command at a time, `close()` kills everything.

    argv: bwrap's argv up to (and without) the runner (`bwrap --args FD --`); fds: the descriptors
    bwrap reads its options and filter from (closed by the caller once this returns); drop: the
    runner's uid drop (root) or []; rlimits: the sandbox's per-process limits."""

    def __init__(self, argv: list[str], env: dict[str, str], fds: tuple[int, ...], limits: Limits,
                 drop: list[str], rlimits: dict[int, int]):
        self.limits = limits
        self.as_root = bool(drop)
        self._owner = os.getpid()
        self.mode = cgroup.mechanism()
        self.group = None
        if self.mode != "rss-watchdog":
            # the runner is one more process than a one-shot bwrap had
            self.group = cgroup.SandboxGroup(limits.memory_mb * MiB, limits.processes + 1)
        self.sock, theirs = socket.socketpair()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        self.out_fd, self.err_fd = out_r, err_r
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
        self.proc = None
        self.infra: set[int] = set()
        try:
            self.proc = subprocess.Popen(HOLD + argv + ["/bin/bash", "-c", runner_script(drop)], stdin=theirs,
                                         stdout=out_w, stderr=err_w, env=env, start_new_session=True,
                                         close_fds=True, pass_fds=fds)
        except BaseException:
            self._close_fds()
            if self.group is not None:
                self.group.close()
            raise
        finally:
            for fd in (theirs.detach(), out_w, err_w):
                os.close(fd)
        self.exit_fd = os.pidfd_open(self.proc.pid) if hasattr(os, "pidfd_open") else None
        self.rss = cgroup.RssWatch(limits.memory_mb * MiB, limits.memory_mb) if self.group is None else None
        try:
            self._release(rlimits, bool(drop))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ start
    def _release(self, rlimits: dict[int, int], as_root: bool) -> None:
        """Bound the held process (rlimits, control group, OOM exemption), let it start bwrap and
        wait for the runner's `ready`; then note the sandbox's own three processes."""
        pid = self.proc.pid
        for which, value in rlimits.items():
            resource.prlimit(pid, which, (value, value))
        if self.group is not None:
            self.group.join(pid)
        if self.rss is not None:
            self.rss.root = pid
        if as_root and "CAP_SYS_RESOURCE" in RUNNER_CAPS:
            Path(f"/proc/{pid}/oom_score_adj").write_text("-1000")
        self.sock.sendall(b"\n")
        line = self._read_line(time.monotonic() + 4 * GRACE)
        if line != "ready":
            raise RuntimeError(self._drain_text() or f"bwrap exited with {self.proc.poll()}")
        init = _children(pid)
        runner = _children(init[0]) if len(init) == 1 else []
        if len(runner) != 1:
            raise RuntimeError("the sandbox's processes could not be identified")
        self.runner = runner[0]
        self.infra = {pid, init[0], self.runner}

    def _read_line(self, deadline: float) -> str | None:
        buf = b""
        while b"\n" not in buf:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = self.sock.recv(64)
            if not chunk:
                return None
            buf += chunk
        return buf.decode(errors="replace").strip()

    def _drain_text(self) -> str:
        cap = OutputCapture(4000, 1 << 30)
        for fd in (self.out_fd, self.err_fd):
            self._drain(fd, cap)
        return cap.text()[0].strip()

    # ------------------------------------------------------------------ processes
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def members(self) -> set[int]:
        """Host pids of every process of the sandbox, its own three included."""
        if self.group is not None:
            return self.group.members()
        return set(cgroup._tree(self.proc.pid))

    def kill_commands(self) -> None:
        """SIGKILL every process of the sandbox but bwrap, its pid 1 and the runner."""
        _kill(self.members() - self.infra)

    def reap_commands(self) -> bool:
        """Kill what the last command left running until nothing is left; False if that failed.
        Without a control group the tree is read from children lists, which may miss a process
        forked while they are read: nothing must be seen twice in a row."""
        delay, deadline = 0.0005, time.monotonic() + 2.0
        empty = 0
        while True:
            left = self.members() - self.infra
            empty = empty + 1 if not left else 0
            if empty >= (1 if self.group is not None else 2):
                return True
            if time.monotonic() > deadline:
                return False
            if not left:
                continue
            _kill(left)
            time.sleep(delay)
            delay = min(2 * delay, 0.02)

    # ------------------------------------------------------------------ one command
    def run(self, command: str, limits: Limits, disk=None) -> CommandResult:
        """Run one command; returns its result. `self.alive()` is False afterwards if the sandbox
        had to be killed (the result says why)."""
        start = time.monotonic()
        data = command.encode()
        request = f"{limits.cpu_limit} {len(data)}\n".encode() + data + (b"\0" if len(data) <= INLINE_BYTES else b"")
        oom_before = self.group.oom_kills() if self.group is not None else 0
        kill_bytes = limits.output_kill_mb * MiB
        captures = {self.out_fd: OutputCapture(limits.output_chars, kill_bytes),
                    self.err_fd: OutputCapture(limits.output_chars, kill_bytes)}
        reason: list[str] = []
        broken: str | None = None
        timed_out = False

        def watch() -> str | None:
            return (disk() if disk else None) or (self.rss() if self.rss else None)

        def stop(why: str) -> None:
            if not reason:
                reason.append(why)
            self.kill_commands()

        poller = select.poll()
        for fd in (*captures, self.sock.fileno(), *([self.exit_fd] if self.exit_fd is not None else [])):
            poller.register(fd, select.POLLIN)
        code: int | None = None
        buf = b""
        if not self.as_root and not self.reap_commands():
            # the runner shares its commands' uid here: whatever one of them made it start between
            # two commands goes before the next one starts
            broken = "what ran between two commands could not be killed"
        try:
            if broken is None:
                self.sock.sendall(request)
        except OSError:
            broken = "its command runner is gone"
        deadline, next_watch, stopped_at = start + limits.timeout, start + WATCH_INTERVAL, None
        use_watch = disk is not None or self.rss is not None
        while code is None and broken is None:
            now = time.monotonic()
            if stopped_at is None and now >= deadline:
                timed_out = True
                stop(f"timed out after {limits.timeout:g} s; the command and all its processes were killed")
            elif stopped_at is None and use_watch and now >= next_watch:
                why = watch()
                if why:
                    stop(why)
                next_watch = now + WATCH_INTERVAL
            if reason and stopped_at is None:
                stopped_at = now
            if stopped_at is not None:
                if now >= stopped_at + GRACE:
                    broken = "its command runner did not answer after the command was killed"
                    break
                wake = stopped_at + GRACE
            else:
                wake = min(deadline, next_watch) if use_watch else deadline
            for fd, _ in poller.poll(max(0.0, wake - now) * 1000):
                if fd == self.sock.fileno():
                    chunk = self.sock.recv(64)
                    if not chunk:
                        broken = "its command runner ended"
                        break
                    buf += chunk
                    if b"\n" in buf:
                        line = buf.split(b"\n", 1)[0]
                        code = int(line) if line.strip().isdigit() else 1
                elif fd == self.exit_fd:
                    if self.proc.poll() is not None:
                        broken = "bubblewrap ended"
                        break
                else:
                    if not self._drain(fd, captures[fd]) and not reason:
                        stop(f"output exceeded {limits.output_kill_mb} MB; the command was killed")
        if broken is None and not self.reap_commands():
            broken = "what the command left running could not be killed"
        # the memory bound may have killed the runner too: ask before the group goes
        why = self.group.verdict(limits.memory_mb, since=oom_before) if self.group is not None else None
        if broken is not None:
            self.kill_all()  # after which the pipes hold everything the sandbox wrote
        for fd, cap in captures.items():
            if not self._drain(fd, cap) and not reason:
                reason.append(f"output exceeded {limits.output_kill_mb} MB; the command was killed")
        if why and not reason:
            reason.append(why)
        if broken is not None and not reason:
            reason.append(f"the sandbox was killed ({broken}); the next command starts a fresh one "
                          "(files in the workspace and /tmp are kept)")
        stdout, cut_out = captures[self.out_fd].text()
        stderr, cut_err = captures[self.err_fd].text()
        killed = reason[0] if reason else None
        return CommandResult(None if killed else code, stdout, stderr, time.monotonic() - start,
                             timed_out=timed_out, killed=killed, truncated=cut_out or cut_err)

    @staticmethod
    def _drain(fd: int, cap: OutputCapture) -> bool:
        """Read what the pipe holds now; False once the capture passed its kill size."""
        ok = True
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return ok
            if not chunk:
                return ok
            ok = cap.feed(chunk) and ok

    # ------------------------------------------------------------------ the end
    def kill_all(self) -> None:
        """Kill every process of the sandbox (bwrap first: its --die-with-parent takes the rest)."""
        if self.proc is None or os.getpid() != self._owner:  # a forked copy owns nothing
            return
        everyone = self.members() if self.group is None else set()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.group is not None:
            self.group.close()  # kills whatever is left in the group, then removes it
            self.group = None
        else:
            _kill(everyone)
        self.proc.wait()

    def close(self) -> None:
        try:
            self.kill_all()
        finally:
            self._close_fds()

    def _close_fds(self) -> None:
        self.sock.close()
        for fd in (self.out_fd, self.err_fd, getattr(self, "exit_fd", None)):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.out_fd = self.err_fd = self.exit_fd = None
