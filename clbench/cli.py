"""The `clbench` command line. Subcommands live in clbench/commands/, one module each, and are
discovered automatically: a module exposes `register(subparsers)`."""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys
import threading
import warnings

from gymnasium import error as gym_error

#: commands that play instances into a run directory
RUN_COMMANDS = ("rollout", "suite", "probe-ladder")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (`command`: a subcommand whose module has its name) only that
    subcommand's parser: building every parser was a visible share of a short `clbench rollout`."""
    import clbench
    import clbench.commands

    parser = argparse.ArgumentParser(prog="clbench", description="Stateful benchmark environments for agents that learn.")
    parser.add_argument("--version", action="version", version=f"clbench {clbench.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    mods = sorted(pkgutil.iter_modules(clbench.commands.__path__), key=lambda m: m.name)
    only = [m for m in mods if command and m.name == command.replace("-", "_")]
    for mod in only or mods:
        importlib.import_module(f"clbench.commands.{mod.name}").register(sub)
    if only and command not in sub.choices:
        return build_parser()
    return parser


def main(argv: list[str] | None = None) -> int:
    warnings.simplefilter("default")
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv and not argv[0].startswith("-") else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from clbench.executors import install_signal_handlers

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if in_main else None
    if in_main:
        install_signal_handlers()
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:  # SIGINT -> 130, SIGTERM (executors.Terminated) -> 143
        code = getattr(exc, "exit_code", 130)
        print("terminated" if code == 143 else "interrupted", "(unfinished instances are not recorded; "
              "continue with --resume DIR)" if args.command in RUN_COMMANDS else "", file=sys.stderr)
        return code
    except (ValueError, FileNotFoundError, RuntimeError, KeyError, gym_error.Error) as exc:
        print(f"clbench {args.command}: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
