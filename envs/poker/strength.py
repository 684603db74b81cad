"""Hand strength features shared by the opponents and the scripted agents.

Everything here is a pure function of one player's own hole cards and the board, so any
player may compute it for itself:

- `preflop_pct(hole)`: share of the 1326 starting hands that are weaker (Chen formula order,
  ties counted half), 0.0 = worst, 1.0 = aces;
- `strength(hole, board)`: a made-hand tier and draw flags, using the library's evaluator:
  5 two pair or better that uses a hole card (sets, trips, straights, flushes, ...),
  4 overpair or top pair with a ten-or-better kicker, 3 top pair with a weak kicker,
  2 middle pair (or a pocket pair between the board cards), 1 bottom pair or a pocket pair
  under the board, 0 nothing.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

from texasholdem.evaluator import evaluator

from clbench.envs.poker.cards import FULL_DECK

_RANK = {c: c.rank for c in FULL_DECK}
_SUIT = {c: c.suit for c in FULL_DECK}
_INDEX = {c: i for i, c in enumerate(FULL_DECK)}
QUEEN, TEN = 10, 8


def chen_score(r1: int, r2: int, suited: bool) -> float:
    """Bill Chen's preflop points for ranks 0 (deuce) .. 12 (ace)."""
    hi, lo = max(r1, r2), min(r1, r2)
    points = {12: 10.0, 11: 8.0, 10: 7.0, 9: 6.0}.get(hi, (hi + 2) / 2)
    if hi == lo:
        return max(5.0, 2 * points)
    if suited:
        points += 2
    gap = hi - lo - 1
    points -= (0, 1, 2, 4)[gap] if gap < 4 else 5
    if gap <= 1 and hi < QUEEN:
        points += 1
    return float(math.ceil(points))


def _class_table() -> dict[tuple[int, int, bool], float]:
    classes = {}
    for hi in range(13):
        for lo in range(hi + 1):
            for suited in ((False,) if hi == lo else (False, True)):
                combos = 6 if hi == lo else (4 if suited else 12)
                classes[(hi, lo, suited)] = (chen_score(hi, lo, suited), combos)
    pct = {}
    for key, (score, _) in classes.items():
        below = sum(n for s, n in classes.values() if s < score)
        tied = sum(n for s, n in classes.values() if s == score)
        pct[key] = (below + tied / 2) / 1326
    return pct


_PREFLOP = _class_table()


def preflop_pct(hole) -> float:
    a, b = hole
    ra, rb = _RANK[a], _RANK[b]
    return _PREFLOP[(max(ra, rb), min(ra, rb), _SUIT[a] == _SUIT[b] and ra != rb)]


@dataclass(frozen=True, slots=True)
class Strength:
    """One player's view of its own hand on the current street."""

    street: int  # 0 preflop, 1 flop, 2 turn, 3 river
    pct: float  # preflop percentile of the hole cards
    tier: int  # made-hand tier 0..5 (see module docstring); -1 before the flop
    flush_draw: bool = False
    straight_draw: bool = False  # open-ended
    overcards: bool = False  # both hole cards above every board card
    code: int = 0  # 0..99, a fixed pseudo-random number of this exact situation (for mixing)
    size: int = 0  # 0..99, another one, unrelated to `code` (for bet sizes)

    @property
    def draw(self) -> bool:
        return self.flush_draw or self.straight_draw


def _board_class(board) -> int:
    """Rank class (1 best .. 9 high card) of the board's own cards."""
    if len(board) == 5:
        return evaluator.get_rank_class(evaluator.evaluate(list(board[:2]), list(board[2:])))
    counts = sorted((sum(1 for c in board if _RANK[c] == r) for r in {_RANK[c] for c in board}), reverse=True)
    if counts[0] >= 4:
        return 2
    if counts[0] == 3:
        return 6
    return 7 if counts[:2] == [2, 2] else (8 if counts[0] == 2 else 9)


@lru_cache(maxsize=1 << 15)
def hand_rank(hole: tuple, board: tuple) -> int:
    """The library evaluator's rank of the best five cards (1 = royal flush, 7462 = worst)."""
    return evaluator.evaluate(list(hole), list(board))


@lru_cache(maxsize=None)
def rank_name(rank: int) -> str:
    """The library's name of an evaluator rank ('Two Pair', ...); its lookup scans the rank classes."""
    return evaluator.rank_to_string(rank)


def _tier(hole, board) -> int:
    ra, rb = _RANK[hole[0]], _RANK[hole[1]]
    ranks = [_RANK[c] for c in board]
    cls = evaluator.get_rank_class(hand_rank(hole, board))
    if cls <= 5 and cls < _board_class(board):  # straight, flush or better made with a hole card
        return 5
    if ra == rb:
        if ra in ranks:
            return 5  # set
        distinct = sorted(set(ranks), reverse=True)
        if ra > distinct[0]:
            return 4
        return 2 if len(distinct) > 1 and ra > distinct[1] else 1
    hits = [r for r in (ra, rb) if r in ranks]
    if len(hits) == 2 or any(ranks.count(r) >= 2 for r in hits):
        return 5  # two pair with both hole cards, or trips
    if not hits:
        return 0
    distinct = sorted(set(ranks), reverse=True)
    paired, kicker = hits[0], (rb if hits[0] == ra else ra)
    if paired == distinct[0]:
        return 4 if kicker >= TEN else 3
    return 2 if paired == distinct[1] else 1


def _draws(hole, board) -> tuple[bool, bool]:
    suits = [_SUIT[c] for c in board]
    flush = any(suits.count(s) + sum(1 for h in hole if _SUIT[h] == s) == 4 for s in {_SUIT[h] for h in hole})
    ranks = 0
    for c in board:
        ranks |= 1 << _RANK[c]
    mine = (1 << _RANK[hole[0]]) | (1 << _RANK[hole[1]])
    ranks |= mine
    # four in a row that a card at either end completes (A-2-3-4 and J-Q-K-A have one end only)
    straight = any(ranks & (15 << lo) == 15 << lo and mine & (15 << lo) for lo in range(9))
    return flush, straight


def situation_codes(hole, board) -> tuple[int, int]:
    """Two fixed numbers 0..99 per (hole cards, board), from separate digits of one hash: deterministic
    'mixing' for strategies (which move, and how much). The hole cards count as a set (either order gives the
    same numbers), so a model of a player that enumerates holdings in its own order (the oracle's) reproduces
    the player's mixed moves."""
    a, b = _INDEX[hole[0]], _INDEX[hole[1]]
    h = zlib.crc32(bytes((*sorted((a, b)), *(_INDEX[c] for c in board))))
    return h % 100, h // 100 % 100


@lru_cache(maxsize=1 << 15)
def strength(hole: tuple, board: tuple) -> Strength:
    """The features of `hole` (2 cards) on `board` (0, 3, 4 or 5 cards)."""
    street = {0: 0, 3: 1, 4: 2, 5: 3}[len(board)]
    pct = preflop_pct(hole)
    code, size = situation_codes(hole, board)
    if street == 0:
        return Strength(0, pct, -1, code=code, size=size)
    flush, straight = _draws(hole, board) if street < 3 else (False, False)
    top = max(_RANK[c] for c in board)
    over = min(_RANK[h] for h in hole) > top
    return Strength(street, pct, _tier(hole, board), flush, straight, over, code, size)


def all_combos(excluded) -> list[tuple]:
    """Every two-card holding without the `excluded` cards, in a fixed order."""
    live = [c for c in FULL_DECK if c not in set(excluded)]
    return list(combinations(live, 2))
