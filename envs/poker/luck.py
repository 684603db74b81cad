"""How much of a hand's chip result the board cards decided: a chance-node (AIVAT-style) correction.

A hand's chips mix the value of the decisions with the luck of the cards. Each time board cards come
(flop, turn, river) while both players are in, the cards move the agent's showdown equity against the
opponent's actual cards, eq_{s-1} -> eq_s, and with it the expected value of the chips each player has
in the pot, c_s: by 2 c_s (eq_s - eq_{s-1}). Given everything before the cards came, the board is
uniform over the cards left, so each such term has mean zero; the chips minus the terms estimate the
same expected result with the board's luck taken out (`luck_adjusted`). On Poker-v5's paired gain
(stateful reference minus its stateless line, 40 deals) the per-deal sd falls from 1.10 to 0.79 bb/hand
(docs/poker-variance-levers.md).

The equities are exact from the flop on (every runout); before the flop they are Monte Carlo over
runouts drawn from a generator seeded by the four hole cards (never by the board that came), with more
runouts the more chips are at stake. This reads both players' cards: it belongs to scoring and
analysis, never to what an agent is shown.
"""
from __future__ import annotations

import itertools
import zlib
from functools import lru_cache

import numpy as np

from clbench.envs.poker.cards import FULL_DECK, card_name
from clbench.envs.poker.strength import hand_rank

#: board cards on the table once street s (0 preflop .. 3 river) is dealt
BOARD_LEN = (0, 3, 4, 5)
#: Monte Carlo runouts of a preflop equity: c_1^2 for c_1 chips at stake (its chip error 2 c_1 sd(eq) is then
#: at most a chip), within these bounds
PREFLOP_RUNOUTS = (2_000, 40_000)


def _rank(hole: tuple, board: tuple) -> int:
    return hand_rank.__wrapped__(hole, board)  # runouts are seen once: the cache would only evict


@lru_cache(maxsize=1 << 12)
def equity(agent: tuple, opponent: tuple, board: tuple, runouts: int = PREFLOP_RUNOUTS[0]) -> float:
    """The agent's share of the pot at a showdown (a split counts half) over the runouts of `board`:
    every runout from the flop on; `runouts` Monte Carlo ones before it."""
    used = set(agent) | set(opponent) | set(board)
    deck = [c for c in FULL_DECK if c not in used]
    need = 5 - len(board)
    if need <= 2:
        runs = itertools.combinations(deck, need)
    else:
        seed = zlib.crc32(" ".join(map(card_name, agent + opponent)).encode())
        rng = np.random.default_rng(seed)
        runs = (tuple(deck[i] for i in rng.choice(len(deck), need, replace=False)) for _ in range(runouts))
    won = n = 0.0
    for run in runs:
        full = board + run
        mine, theirs = _rank(agent, full), _rank(opponent, full)  # lower is the better hand
        won += 1.0 if mine < theirs else 0.5 if mine == theirs else 0.0
        n += 1
    return won / n


def stakes(log: list[tuple[int, int, str, int]], big_blind: int) -> list[int]:
    """Each player's chips in the pot once street s's betting closed, for s = 0..3, from a hand's move log
    ((street, player, kind, total): total is the player's whole bet on that street after the move). The two
    are equal whenever a round closes (a call or a check closes it; both stacks start equal)."""
    top = [big_blind, 0, 0, 0]
    for street, _, _, total in log:
        top[street] = max(top[street], total)
    return list(itertools.accumulate(top))


def board_luck(agent: tuple, opponent: tuple, board: tuple, log: list, big_blind: int, showdown: bool) -> float:
    """The chips the board cards moved the agent's expected result by, summed over the cards that came while
    both players were in: sum_s 2 c_s (eq_s - eq_{s-1})."""
    last = max((street for street, *_ in log), default=0)
    dealt = range(1, 4) if showdown else range(1, last + 1)  # a fold ends the hand before later cards
    c = stakes(log, big_blind)
    luck = 0.0
    for s in dealt:
        at_stake = c[min(s - 1, last)]  # all-in: no more betting, the rest of the board runs out
        runouts = int(np.clip(at_stake ** 2, *PREFLOP_RUNOUTS)) if s == 1 else PREFLOP_RUNOUTS[0]  # exact after
        before = equity(agent, opponent, board[:BOARD_LEN[s - 1]], runouts)
        luck += 2 * at_stake * (equity(agent, opponent, board[:BOARD_LEN[s]]) - before)
    return luck


def luck_adjusted(table) -> float:
    """A finished hand's chip result for the agent with the board's luck taken out (`board_luck`)."""
    b = table.betting
    return table.profit() - board_luck(*table.holes, tuple(table.game.board), b.log, b.big_blind,
                                       b.folded is None)
