"""How much of Poker's paired gain is the board's luck (docs/poker-variance-levers.md, issue 29).

    python tasks/poker/board_luck.py [FIRST_DEAL] [END_DEAL] [PROCESSES]     # default 0 40 2

Deal d is re-deal d // 5 of the default schedule (`redeal=`), played with rollout seed d % 5: deals 0-4
are the benchmark's five. On each deal the stateful reference plays its rollout and its stateless line
plays every hand alone (the runner's two modes); each hand is scored by its chips and by its chips with
the board's luck taken out (`clbench.envs.poker.luck.luck_adjusted`), and the paired gain (stateful
minus stateless, bb/hand) is summarized over deals both ways.
"""
from __future__ import annotations

import statistics
import sys
from multiprocessing import Pool

import clbench  # noqa: F401  registers the envs
from clbench.agent import make_agent
from clbench.agents.poker_redteam import deal_env
from clbench.runner import stateful_instances, stateless_instances
from clbench.envs.poker.luck import luck_adjusted


def play_deal(deal: int) -> dict[str, float]:
    """Mean bb/hand of both modes on one deal, by chips ("*_chips") and luck-adjusted ("*_adjusted")."""
    env, seed = deal_env(deal)
    poker = env.unwrapped
    sums = dict.fromkeys(("stateful_chips", "stateful_adjusted", "stateless_chips", "stateless_adjusted"), 0.0)
    for mode, hands in (("stateful", stateful_instances(env, make_agent("reference", env, seed=seed), seed)),
                        ("stateless", stateless_instances(env, "reference", seed))):
        for _ in hands:  # each hand's table, read as it ends
            table = poker._table
            sums[f"{mode}_chips"] += table.profit() / poker.big_blind
            sums[f"{mode}_adjusted"] += luck_adjusted(table) / poker.big_blind
    env.close()
    return {k: v / len(poker.schedule) for k, v in sums.items()}


def main(argv: list[str]) -> None:
    first, end, processes = (int(a) for a in (argv + ["0", "40", "2"][len(argv):])[:3])
    with Pool(processes) as pool:
        rows = pool.map(play_deal, range(first, end))
    for score in ("chips", "adjusted"):
        gains = [r[f"stateful_{score}"] - r[f"stateless_{score}"] for r in rows]
        sd = statistics.stdev(gains)
        print(f"paired gain by {score}: {statistics.mean(gains):.3f} bb/hand, sd per deal {sd:.3f}, "
              f"se {sd / len(gains) ** 0.5:.3f} ({len(gains)} deals)")
        for mode in ("stateful", "stateless"):
            xs = [r[f"{mode}_{score}"] for r in rows]
            print(f"  {mode}: {statistics.mean(xs):.3f} bb/hand, sd per deal {statistics.stdev(xs):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
