"""Poker's difficulty per world on many deals (docs/poker-variance-levers.md, issue 29): one JSON line per world.

    python tasks/poker/world_difficulty.py c,1-20 [DEALS]       # c: the canonical world; DEALS default 100

Deal d is re-deal d // 5 played with rollout seed d % 5 (deals 0-4 are the benchmark's). On each deal the
reference plays stateful, frozen just before the declared drift (`freeze_at`, as `clbench drift-check`
does) and as its stateless line (a fresh agent per hand, the runner's seeds). Per world: the mean over
deals, with its standard error, of the gain (stateful minus stateless, bb/hand over the schedule), the
drift cost (stateful minus frozen over the variant after the drift), and both modes' means.
"""
from __future__ import annotations

import json
import statistics
import sys
from multiprocessing import Pool

import clbench  # noqa: F401  registers the envs
from clbench.agent import make_agent
from clbench.agents.poker_redteam import deal_env
from clbench.runner import stateful_instances, stateless_instances
from clbench.commands.drift_check import declared_drifts
from clbench.commands.worlds import parse_seeds


def play_deal(job: tuple[int | None, int]) -> tuple[int | None, dict[str, float]]:
    world, deal = job
    env, seed = deal_env(deal, **({} if world is None else {"world_seed": world}))
    schedule = env.unwrapped.schedule
    starts = schedule.variant_starts()
    names, drift = list(starts), declared_drifts(env)[0]["variant"]
    after = names.index(drift) + 1
    end = starts[names[after]] if after < len(names) else len(schedule)
    order = [inst.instance_id for inst in schedule.order(seed)]
    stateful = {info["instance_id"]: out["reward"]
                for info, out in stateful_instances(env, make_agent("reference", env, seed=seed), seed)}
    frozen = {info["instance_id"]: out["reward"] for info, out in
              stateful_instances(env, make_agent("reference", env, seed=seed, freeze_at=starts[drift]), seed)}
    stateless = {info["instance_id"]: out["reward"] for info, out in stateless_instances(env, "reference", seed)}
    env.close()
    post = order[starts[drift]:end]
    return world, {"gain": sum(stateful[i] - stateless[i] for i in order) / len(order),
                   "drift_cost": sum(stateful[i] - frozen[i] for i in post) / len(post),
                   "stateful": sum(stateful.values()) / len(order), "stateless": sum(stateless.values()) / len(order)}


def main(argv: list[str]) -> None:
    worlds = [None if part == "c" else seed for part in argv[0].split(",")
              for seed in ([part] if part == "c" else parse_seeds(part))]
    deals = int(argv[1]) if len(argv) > 1 else 100
    with Pool(2) as pool:
        rows = pool.map(play_deal, [(w, d) for w in worlds for d in range(deals)], chunksize=4)
    for world in worlds:
        mine = [r for w, r in rows if w == world]
        line: dict = {"world": "canonical" if world is None else world, "deals": len(mine)}
        for key in mine[0]:
            xs = [r[key] for r in mine]
            line[key] = round(statistics.mean(xs), 3)
            line[f"{key}_se"] = round(statistics.stdev(xs) / len(xs) ** 0.5, 3)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
