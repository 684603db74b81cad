"""`clbench import-upstream PATH --out DIR`: original CL-Bench v1.0 result files -> clbench run directories."""
from __future__ import annotations


def cmd_import_upstream(args) -> int:
    from clbench import upstream
    from clbench.results import load_metadata, load_records

    written = upstream.import_upstream(args.path, args.out, reference_system=args.reference_system, force=args.force)
    for run_dir in written:
        meta = load_metadata(run_dir)
        n = len(load_records(run_dir))
        headline = sorted((meta.get("upstream") or {}).get("summary_only") or {})
        extra = f" (+ {', '.join(headline)} from the manifest headline only)" if headline else ""
        print(f"{run_dir}: {len(meta['tasks']) - len(headline)} tasks, {n} records{extra}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("import-upstream", help="convert original CL-Bench v1.0 result files into clbench run directories")
    p.add_argument("path", help="a clone's final_results/ folder (runs/<system>/tasks/<task>.json.gz), a flat "
                                "runs/ folder (runs/<system>/<task>.json.gz) or one system's folder")
    p.add_argument("--out", required=True, help="directory that receives one run directory per system")
    p.add_argument("--reference-system", default="icl-gpt-5.4",
                   help="system whose stateless baseline is the external reference: a system name beside "
                        "the imported ones or the path of a system folder (default: icl-gpt-5.4)")
    p.add_argument("--force", action="store_true", help="replace earlier imports of the same systems")
    p.set_defaults(func=cmd_import_upstream)
