"""`clbench report DIR [--format md|html|json] [--conventions ...]`: tables and plots of a run directory.

Plots go to DIR/plots/ (unless --no-plots); the HTML report goes to DIR/report.html (or --out) and
embeds the tables and plots in one file.
"""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path


def _json_payload(report) -> dict:
    out: dict = {"conventions": list(report.conventions)}
    if "clbench" in report.conventions:
        out["tasks"] = report.clbench["tasks"]
        out["aggregate"] = report.clbench["aggregate"]
        out["costs"] = [{"task": t, "system": s, **c} for (t, s), c in sorted(report.costs.items())]
    if report.upstream is not None:
        out["upstream"] = report.upstream
    return out


def cmd_report(args) -> int:
    from clbench.reporting import figures as F
    from clbench.reporting import html, model, tables
    from clbench.results import ResultsError, completeness, load_metadata, load_records

    if not Path(args.dir).is_dir():
        raise ResultsError(f"{args.dir} is {'a file' if Path(args.dir).exists() else 'missing'}, not a run directory")
    with warnings.catch_warnings(record=True) as dropped:
        warnings.simplefilter("always")
        records = load_records(args.dir)  # read once: the report computes from these
    if not records:
        raise ResultsError(f"{args.dir}: results.jsonl holds no valid records ({len(dropped)} line(s) "
                           "dropped); nothing to report")
    # a headline over incomplete or corrupt data is refused, or marked when the user asks for it
    problems = [str(w.message) for w in dropped] + completeness(args.dir, records)
    if problems and not args.allow_incomplete:
        shown = "\n  ".join(problems[:10]) + (f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise ResultsError(f"{args.dir}: the results are incomplete or corrupt, so no headline is computed:\n  "
                           f"{shown}\n(continue the run with `clbench rollout --resume {args.dir}`, or pass "
                           "--allow-incomplete to report what is there, marked as incomplete)")
    banner = (f"INCOMPLETE RESULTS ({len(problems)} problem(s)); the numbers below use only the valid records:\n"
              + "\n".join(f"- {p}" for p in problems)) if problems else ""
    report = model.build(args.dir, conventions=args.conventions, n_boot=args.n_boot,
                         metadata=load_metadata(args.dir), records=records)
    figures = F.render(report) if (args.format == "html" or not args.no_plots) else None
    written = []
    if figures is not None and not args.no_plots:
        try:
            written = F.write(figures, Path(args.dir) / F.PLOTS_DIR)
        except OSError as exc:  # a read-only results folder still gets its report
            print(f"clbench report: plots not written: {exc}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps({**_json_payload(report), "problems": problems}, indent=2, default=float))
    elif args.format == "html":
        out = Path(args.out) if args.out else Path(args.dir) / "report.html"
        from clbench.reporting import explorer

        view = explorer.write(args.dir, out.with_name(explorer.EXPLORER_FILE))  # the report links it
        page = html.render(report, figures, explorer=view.name)
        if banner:  # first thing in the page, before any number
            import html as escape

            mark = f'<div class="incomplete" style="border:2px solid #b00;padding:8px;color:#b00"><pre>{escape.escape(banner)}</pre></div>'
            page = page.replace("<body>", "<body>" + mark, 1) if "<body>" in page else mark + page
        out.write_text(page, encoding="utf-8")
        print(out)
    else:
        if banner:
            print(banner + "\n")
        tables.print_tables(*tables.report_tables(report, [str(p) for p in written]))
    return 0


def register(sub) -> None:
    from clbench.reporting import CHOICES

    p = sub.add_parser("report", help="tables and plots of a run directory")
    p.add_argument("dir", help="run directory")
    p.add_argument("--format", choices=["md", "html", "json"], default="md",
                   help="md (stdout), html (one self-contained file, see --out) or json (stdout)")
    p.add_argument("--conventions", choices=CHOICES, default="auto",
                   help="clbench (paired by instance id, bootstrap CIs, split), upstream (the original "
                        "CL-Bench's sums, standard errors and external reference) or both; auto = both for "
                        "directories made by import-upstream, clbench otherwise")
    p.add_argument("--out", help="HTML file to write (default DIR/report.html)")
    p.add_argument("--no-plots", action="store_true", help="do not write PNGs to DIR/plots/")
    p.add_argument("--n-boot", type=int, default=None, help="bootstrap resamples (default 10000)")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="report a run with missing or corrupt records (marked as incomplete) instead of refusing")
    p.set_defaults(func=cmd_report)
