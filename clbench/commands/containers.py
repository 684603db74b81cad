"""`clbench containers build [--offline-base]`: the runtime of every env that declares one (`runtime`
on its class; today CodeRepair: the verified sdists, the host test venvs for bubblewrap and the
per-repository Docker images, wheels downloaded on the host). `--offline-base` first makes the base
image from Debian packages (debootstrap + docker import) for machines without a container registry.
`clbench containers prune`: remove sandboxes (containers, folders) left by killed clbench processes.
"""
from __future__ import annotations


def cmd_build(args) -> int:
    """Build the runtime of every registered env that declares one (`runtime` on its class)."""
    from clbench.registry import env_class, clbench_env_ids
    from clbench.sandbox import BuildError

    built = [cls for cls in map(env_class, clbench_env_ids()) if cls.runtime]
    for cls in built:
        print(f"{cls.env_id}: {cls.runtime}")
        try:
            cls.build_runtime(offline_base=args.offline_base, force=args.force, bwrap=not args.skip_bwrap,
                              docker=not args.skip_docker)
        except BuildError as exc:
            print(f"error: {exc}")
            return 1
    if not built:
        print("no registered env declares a runtime to build")
    return 0


def cmd_prune(args) -> int:
    """Remove what SIGKILLed clbench processes left: sandbox containers, folders and quota mounts."""
    from clbench.sandbox.docker_backend import reap_orphan_containers
    from clbench.sandbox.quota import reap_orphan_folders

    containers = reap_orphan_containers()  # 0 without a Docker engine
    folders = reap_orphan_folders()
    print(f"removed {containers} orphaned sandbox container(s) and {folders} orphaned sandbox folder(s)")
    return 0


def cmd_status(args) -> int:
    """How this machine's sandboxes are bounded (docs/contract.md, "Sandboxes")."""
    from clbench.sandbox import cgroup, seccomp
    from clbench.sandbox.bwrap import bwrap_works
    from clbench.sandbox.docker_backend import engine_status

    ok, why = bwrap_works()
    print(f"bubblewrap: {'available' if ok else 'unavailable: ' + why}")
    print(f"  memory and processes of a whole sandbox bounded by: {cgroup.mechanism()}")
    print(f"  nested user namespaces: {'refused (seccomp)' if seccomp.compiled_filter() else 'NOT refused: libseccomp missing'}")
    ok, why = engine_status()
    print(f"docker: {'available (the container cgroup bounds memory and processes)' if ok else 'unavailable: ' + why}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("containers", help="build the sandboxes' images and runtimes of the envs that declare one")
    inner = p.add_subparsers(dest="containers_cmd", required=True)
    b = inner.add_parser("build", help="fetch the sdists, build the bwrap venvs and the Docker images")
    b.add_argument("--offline-base", action="store_true",
                   help="build the base image from Debian packages (debootstrap + docker import) instead of "
                        "using python:3.11-slim from a registry")
    b.add_argument("--force", action="store_true", help="rebuild images that exist")
    b.add_argument("--skip-docker", action="store_true", help="only the sdists and the bwrap venvs")
    b.add_argument("--skip-bwrap", action="store_true", help="do not build the host venvs for bubblewrap")
    b.set_defaults(func=cmd_build)
    pr = inner.add_parser("prune", help="remove sandbox containers and folders whose clbench process died")
    pr.set_defaults(func=cmd_prune)
    st = inner.add_parser("status", help="which sandboxes work here and how they are bounded")
    st.set_defaults(func=cmd_status)
