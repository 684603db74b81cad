"""`clbench aging-card`: an aging card (fidelity over time per probe family, decay slope and
half-life, maintenance deltas around shocks, probe-ladder shares with CIs) and ACC's measures
(hallucination and drift rates, constraint retention, memory footprint per turn) for memory
agents on MemoryProbe (clbench.diagnostics.aging, clbench.diagnostics.acc_measures)."""
from __future__ import annotations

import json


def cmd_aging_card(args) -> int:
    from clbench.diagnostics.acc_measures import measures_table
    from clbench.diagnostics.aging import aging_card, card_markdown
    from clbench.registry import env_class

    cls = env_class(args.env)
    if not cls.knows_facts():
        raise ValueError(f"{args.env} does not record question outcomes and facts; the aging card needs MemoryProbe")
    agents = [a for a in args.agent.split(",") if a]
    if not agents:
        raise ValueError("--agent names at least one memory agent")
    kwargs = {} if args.world_seed is None else {"world_seed": args.world_seed}
    if args.schedule:
        kwargs["schedule"] = args.schedule
    agent_kwargs = {}
    for item in args.agent_arg:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--agent-arg takes KEY=VALUE, got {item!r}")
        try:
            agent_kwargs[key] = json.loads(value)
        except ValueError:
            agent_kwargs[key] = value
    cards = {a: aging_card(args.env, a, kwargs, shocks=args.shock or None, n_boot=args.n_boot,
                           agent_kwargs=agent_kwargs) for a in agents}
    for card in cards.values():
        print(card_markdown(card) + "\n")
    print("ACC measures\n" + measures_table({a: c["acc"] for a, c in cards.items()}))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(cards, fh, indent=1)
    return 0


def register(sub) -> None:
    p = sub.add_parser("aging-card", help="aging card and ACC measures (hallucination, drift, constraint retention, "
                                          "memory footprint) of memory agents on MemoryProbe")
    p.add_argument("--env", default="clbench/MemoryProbe-v2")
    p.add_argument("--agent", default="truncation,sliding-summary,memory-bank,file-state",
                   help="comma-separated memory agents (default: the four scripted strategies)")
    p.add_argument("--shock", action="append", default=[],
                   help="a shock EVENT@K to measure (repeatable; default flush, recompact and partial-reset:0.5 "
                        "where the second variant starts)")
    p.add_argument("--world-seed", type=int, default=None, help="a fresh world instead of the canonical one")
    p.add_argument("--schedule", default="", help="the env's schedule (default: its default)")
    p.add_argument("--agent-arg", action="append", default=[],
                   help="KEY=VALUE passed to the agent (JSON values), e.g. memory=icl model=M base_url=URL")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples for the probe-ladder CIs")
    p.add_argument("--json", default="", help="also write the cards to this file")
    p.set_defaults(func=cmd_aging_card)
