"""Sandboxes for domains whose agents run shell commands (CodeRepair, SalesForecast, ...).

One interface, three backends:

    from clbench.sandbox import Limits, Runtime, open_sandbox, venv_runtime

    with open_sandbox("/path/to/tree", backend="auto", workdir="/testbed",
                      runtime=venv_runtime(venv_dir, image="clbench/foo:1"),
                      limits=Limits(timeout=30)) as sb:
        result = sb.run("python -m pytest -q")       # CommandResult
        result.exit_code, result.stdout, result.stderr, result.killed, result.output()
        sb.write_file("notes.txt", "hello")          # relative to the workspace, or under workdir
        sb.read_file("src/pkg/mod.py")               # bytes; links out of the workspace are refused
        sb.changes()                                 # [FileChange(path, kind, content)] vs the start
        sb.diff()                                    # unified diff vs the starting tree

- A sandbox starts from a folder (`source`, copied; the copy is the workspace) or, with the
  docker backend and no `source`, from the image's `workdir`. The workspace is a host folder
  mounted read-write at `workdir`; it is the only writable place besides the sandbox's own
  /tmp (kept between its commands, never the host's).
- `run(command, timeout=None)` runs `bash -c command` in `workdir` with the `Limits` (wall-clock
  timeout killing the whole process tree, processes, memory, CPU, file size, open files); stdout
  and stderr are each cut to head + tail with a note, and a command printing more than
  `output_kill_mb` is killed. `CommandResult.killed` says why the sandbox stopped a command;
  the next command works as usual.
- `Limits.disk_mb` caps the workspace plus the sandbox's /tmp (a tmpfs of that size when clbench
  runs as root, else a watchdog that kills the command growing them past it; clbench.sandbox.quota).
  Folders and containers carry their owner process; what a killed owner leaves is removed when the
  next sandbox starts and by `clbench containers prune`.
- `changes()`/`diff()` compare the workspace with a pristine copy of the starting tree kept
  outside the sandbox (.git, __pycache__ and tool caches ignored); links are never followed.
- `close()` (or the context manager) removes containers and folders.

Backends (`backend=`): "docker" (docker SDK; no network, read-only root, memory/CPU/pids limits,
never pulls; a missing image raises `SandboxUnavailable` naming `Runtime.build_hint`), "bwrap"
(bubblewrap: new pid/net/ipc/uts namespaces, read-only system, private /tmp, no host /home, /root
or /etc secrets; one control group and rlimits for the whole sandbox; drops to an unprivileged uid
when run as root; one bwrap per sandbox with a command runner inside, clbench.sandbox.session), "auto" (docker if
the engine answers and the image exists, else bwrap) and "unsafe-local" (no isolation, only by
name, warns). `Runtime` carries both the Docker image and the read-only binds (e.g. a venv via
`venv_runtime`) so one description serves every backend.
"""
from clbench.sandbox.base import BuildError, CommandResult, FileChange, Limits, Runtime, Sandbox, SandboxError, SandboxUnavailable
from clbench.sandbox.python import venv_runtime
from clbench.sandbox.select import BACKENDS, choose_backend, open_sandbox

__all__ = ["BACKENDS", "BuildError", "CommandResult", "FileChange", "Limits", "Runtime", "Sandbox", "SandboxError",
           "SandboxUnavailable", "choose_backend", "open_sandbox", "venv_runtime"]
