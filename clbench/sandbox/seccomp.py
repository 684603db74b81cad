"""The seccomp filter of bubblewrap sandboxes: no new user namespaces inside.

Inside a sandbox, `unshare -r` would hand the agent uid 0 of a fresh user namespace: no power
over the host, but the whole user-namespace attack surface of the kernel. Docker's default
profile refuses it; so does this filter, compiled with libseccomp (pyseccomp) and handed to bwrap
as `--seccomp FD`:

- `unshare` and `clone` with CLONE_NEWUSER in their flags fail with EPERM;
- `setns` into a user namespace fails with EPERM;
- `clone3` fails with ENOSYS (its flags live in memory a filter cannot read; the C library then
  falls back to `clone`, which the filter can check), as in Docker's profile.

Everything else is allowed: the sandbox's other limits come from namespaces, rlimits and cgroups.
"""
from __future__ import annotations

import errno
import functools
import os
import tempfile

CLONE_NEWUSER = 0x10000000


@functools.cache
def compiled_filter() -> bytes | None:
    """The filter as a cBPF program (what bwrap's --seccomp reads), or None without libseccomp."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError):  # the package, or the libseccomp it loads, is missing
        return None
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    f.add_rule(deny, "unshare", sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
    f.add_rule(deny, "setns", sc.Arg(1, sc.EQ, CLONE_NEWUSER))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as fh:
        f.export_bpf(fh)
        fh.seek(0)
        return fh.read()


def memfd(name: str, data: bytes) -> int:
    """A readable file descriptor holding `data` from offset 0 (for bwrap's --seccomp and --args)."""
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
