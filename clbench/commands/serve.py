"""`clbench serve`: one env as a Model Context Protocol server (clbench.harness).

The runner plays the schedule (one rollout, stateful or stateless) with the MCP endpoint as its
agent: every tool call is one `env.step`, and the instances follow one another as the runner
assigns them. Records and trajectories go to `--out` like any run's.
"""
from __future__ import annotations

import sys
import tempfile

from clbench.commands.rollout import _kv


def cmd_serve(args) -> int:
    from clbench.harness.server import free_port
    from clbench.rollout import run
    from clbench.runner import RunConfig

    if args.transport == "http":
        port = args.port or free_port()
        where = f"http://127.0.0.1:{port}/mcp"
    else:
        port, where = 0, "stdio"
    env_kwargs = {}
    for item in args.env_arg:
        env_kwargs.update(_kv(item))
    out = args.out or tempfile.mkdtemp(prefix="clbench-serve-")

    def say(msg: str) -> None:  # stdout may be the MCP wire: everything human goes to stderr
        print(msg, file=sys.stderr, flush=True)

    say(f"clbench serve: {args.env}, {args.mode} rollout {args.rollout}, MCP at {where}; records -> {out}")
    cfg = RunConfig(env_id=args.env, agent="mcp", system=args.system, out=out, rollouts=1, mode=args.mode,
                    seed=args.rollout, workers=1, env_kwargs=env_kwargs,
                    agent_kwargs={"transport": args.transport, "port": port, "wait": args.wait})
    from clbench.harness.agents import close_endpoints

    try:
        run(cfg, say=say, quiet=True)
    finally:
        close_endpoints()
    say(f"clbench serve: the schedule is done; records in {out}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve one env over MCP (stdio or streamable HTTP); see docs/harnesses.md")
    p.add_argument("--env", required=True, help="env id, e.g. clbench/DBExplore-v3")
    p.add_argument("--transport", choices=["http", "stdio"], default="http")
    p.add_argument("--port", type=int, default=0, help="HTTP port on 127.0.0.1 (default: a free one, printed)")
    p.add_argument("--mode", choices=["stateful", "stateless"], default="stateful",
                   help="stateful: the env's state carries on across instances; stateless: every instance a "
                        "jump with agent-written state wiped")
    p.add_argument("--rollout", type=int, default=0, help="rollout seed (instance order; 0 is canonical)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE", help="env keyword argument")
    p.add_argument("--wait", type=float, default=1800.0,
                   help="seconds a step waits for the next tool call before the instance is given up")
    p.add_argument("--system", default="mcp", help="system name in the records")
    p.add_argument("--out", default="", help="run directory for the records (default: a new temporary folder)")
    p.set_defaults(func=cmd_serve)
