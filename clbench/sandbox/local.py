"""The unsafe-local backend: commands run directly on the host, in the workspace folder.

There is NO isolation: a command can read and write anything the current user can, and reach
the network. It exists for debugging on machines without bubblewrap or Docker and is only ever
used when asked for by name (`backend="unsafe-local"`); every sandbox it creates warns. Limits
(prlimit) and the wall-clock timeout still apply. Paths under `workdir` do not exist on the
host: commands start in the workspace folder and `$WORKSPACE` names it; in the runtime's
environment variables, `workdir` and the sandbox paths of its binds are replaced by their host
paths (nothing is mounted).
"""
from __future__ import annotations

import shutil
import warnings

from clbench.sandbox.base import MiB, CommandResult, Limits, Runtime, Sandbox
from clbench.sandbox.process import run_process

WARNING = ("clbench sandbox backend 'unsafe-local' runs agent commands on the host WITHOUT isolation: "
           "they can reach the network and read or change any of your files; use it only to debug trusted agents")


class UnsafeLocalSandbox(Sandbox):
    backend = "unsafe-local"

    def __init__(self, source=None, *, workdir: str = "/workspace", limits: Limits | None = None,
                 runtime: Runtime | None = None, baseline=None):
        warnings.warn(WARNING, RuntimeWarning, stacklevel=3)
        super().__init__(source, workdir=workdir, limits=limits, runtime=runtime, baseline=baseline)

    def _run(self, command: str, limits: Limits) -> CommandResult:
        places = [(self.workdir, str(self.host_workspace))] + [(i, h) for h, i in self.runtime.binds]
        env = {}
        for key, value in self.runtime.environment(self.workdir).items():
            for inside, host in places:
                value = value.replace(inside, host)
            env[key] = value
        env["WORKSPACE"] = str(self.host_workspace)
        argv = ["/bin/bash", "-c", command]
        if shutil.which("prlimit"):
            argv = ["prlimit", f"--as={limits.memory_mb * MiB}", f"--cpu={limits.cpu_limit}",
                    f"--fsize={limits.file_bytes}", f"--nofile={limits.open_files}", "--"] + argv
        return run_process(argv, limits, env=env, cwd=str(self.host_workspace), watch=self._disk_watch())
