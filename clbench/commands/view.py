"""`clbench view RUN`: the Interaction Explorer, one offline HTML page of every instance of a run
(clbench.reporting.explorer): table, filters, search, each instance's steps with prompts, memory,
replies and observations, stateful and stateless side by side."""
from __future__ import annotations

from pathlib import Path


def cmd_view(args) -> int:
    from clbench.reporting import explorer
    from clbench.results import ResultsError

    if not Path(args.dir).is_dir():
        raise ResultsError(f"{args.dir} is not a run directory")
    path = explorer.write(args.dir, args.out)
    print(path)
    if args.open:
        import webbrowser

        webbrowser.open(path.resolve().as_uri())
    return 0


def register(sub) -> None:
    p = sub.add_parser("view", help="the Interaction Explorer: one offline HTML page to read every instance of a run")
    p.add_argument("dir", help="run directory")
    p.add_argument("--out", help="HTML file to write (default DIR/explorer.html)")
    p.add_argument("--open", action="store_true", help="open it in the default browser")
    p.set_defaults(func=cmd_view)
