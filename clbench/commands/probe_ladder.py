"""`clbench probe-ladder`: P1 / P2 / P3 runs of a memory agent and the write / read / utilization
split of its error (see clbench.probes)."""
from __future__ import annotations

import json
from pathlib import Path

from clbench.commands.rollout import add_run_arguments, config_from_args, policy_from_args, preflight


def ladder_from_dir(out: str | Path, system: str) -> dict:
    from clbench.probes import ladder
    from clbench.results import load_metadata, load_records

    recs = load_records(out)
    meta = load_metadata(out)
    means = {}
    for rung in ("P1", "P2", "P3"):
        rewards = [r["reward"] for r in recs if r["system"] == f"{system}-{rung}" and r["mode"] == "stateful"]
        if not rewards:
            raise ValueError(f"{out}: no stateful records of {system}-{rung}")
        means[rung] = sum(rewards) / len(rewards)
        task = next(r["task"] for r in recs if r["system"] == f"{system}-{rung}")
    r_max = meta["tasks"][task].get("r_max")
    if r_max is None:
        raise ValueError(f"{out}: {task} has no r_max for this schedule and world; calibrate it first "
                         "(clbench.diagnostics.worlds.calibrate_world)")
    return ladder(means["P1"], means["P2"], means["P3"], float(r_max))


def cmd_probe_ladder(args) -> int:
    from dataclasses import replace

    from clbench.rollout import run_many
    from clbench.reporting.tables import fmt, markdown_table

    if not args.env or not args.agent:
        raise ValueError("--env and --agent are required")
    out = args.out or f"runs/probe-{args.env.split('/')[-1]}-{args.agent}"
    base = config_from_args(args, args.env, out)
    base = replace(base, mode="stateful")
    system = base.system
    cfgs = [replace(base, system=f"{system}-{rung}", probe=probe)
            for rung, probe in (("P1", None), ("P2", "select"), ("P3", "gold"))]
    preflight(cfgs, probe=True)
    run_many(cfgs, quiet=args.quiet, executor=args.executor, ray_address=args.ray_address,
             policy=policy_from_args(args))
    result = ladder_from_dir(out, system)
    (Path(out) / "probe_ladder.json").write_text(json.dumps(result, indent=2) + "\n")
    sh = result["shares"]
    print(markdown_table(["P1 (as is)", "P2 (oracle-selected memory)", "P3 (gold facts)", "r_max",
                          "write share", "read share", "utilization share"],
                         [[fmt(result["P1"]), fmt(result["P2"]), fmt(result["P3"]), fmt(result["r_max"]),
                           fmt(sh["write"]), fmt(sh["read"]), fmt(sh["utilization"])]]))
    return 0


def register(sub) -> None:
    p = sub.add_parser("probe-ladder", help="P1/P2/P3 runs of a memory agent: write, read and utilization errors")
    p.add_argument("--env", help="an env with instance_facts(), e.g. clbench/MemoryProbe-v2 or clbench/DBExplore-v3")
    p.add_argument("--out", default="", help="run directory")
    add_run_arguments(p)
    p.set_defaults(func=cmd_probe_ladder, rollouts=1)
