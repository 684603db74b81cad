"""A fast model of heads-up no-limit betting, for look-ahead (the oracle's simulations).

It follows the library's rules for two players with equal stacks (which every hand of this
env has): blinds, min-raise = the largest raise of the street (at least the big blind),
all-in raises, who acts when, and when a betting round closes. The env itself always plays on
the library; tests check that this model agrees with it move for move.
"""
from __future__ import annotations

from clbench.envs.poker.policy import CALL, FOLD, RAISE, Act, Decision, Memo, Spot
from clbench.envs.poker.strength import hand_rank

_new = tuple.__new__
#: a log entry (street, player, kind, total) as player 0 and player 1 see it (tuple.__new__: an Act without
#: NamedTuple's slower __new__)
_SEEN_BY = tuple(Memo(lambda e, me=me: _new(Act, (e[0], e[1] == me, e[2], e[3]))).__getitem__ for me in (0, 1))


class Betting:
    """The public betting state of one hand; players are 0 and 1."""

    __slots__ = ("button", "big_blind", "start", "stacks", "bets", "pot", "street", "to_act", "last_raise",
                 "acted", "folded", "over", "log", "_views", "_legal")

    def __init__(self, button: int, stack: int, small_blind: int, big_blind: int):
        self.button, self.big_blind, self.start = button, big_blind, stack
        self.stacks = [stack, stack]
        self.bets = [0, 0]
        self.bets[button], self.bets[1 - button] = small_blind, big_blind
        self.stacks[button] -= small_blind
        self.stacks[1 - button] -= big_blind
        self.pot = 0  # collected from finished streets
        self.street = 0
        self.to_act = button
        self.last_raise = 0
        self.acted = [False, False]
        self.folded: int | None = None
        self.over = False  # no more betting: a fold, or the showdown is due
        self.log: list[tuple[int, int, str, int]] = []  # (street, player, kind, total), like HandTable.log
        self._views: list[tuple[Act, ...]] = [(), ()]  # each player's `view`, up to where it was last asked
        self._legal: tuple[int, int, int] | None = None  # `legal()` until the next move (asked several times)

    def copy(self) -> "Betting":
        b = Betting.__new__(Betting)
        for name in Betting.__slots__:
            value = getattr(self, name)
            setattr(b, name, list(value) if isinstance(value, list) else value)
        return b

    def view(self, player: int) -> tuple[Act, ...]:
        """The log as `player` sees it; extended only when asked (most moves never need it)."""
        seen, log = self._views[player], self.log
        if len(seen) < len(log):
            seen += tuple(map(_SEEN_BY[player], log[len(seen):]))
            self._views[player] = seen
        return seen

    def legal(self) -> tuple[int, int, int]:
        """(to_call, min_raise, max_raise) for the player to act; raises are 0 when not allowed."""
        if self._legal is None:
            p, bets = self.to_act, self.bets
            mine, theirs, stack = bets[p], bets[1 - p], self.stacks[p]
            last = self.last_raise  # max(big blind, last raise): a conditional, not a call to max (every move)
            low = theirs + (last if last > self.big_blind else self.big_blind)
            high = mine + stack
            if high < low:
                low = high = high if stack > theirs - mine else 0
            self._legal = (theirs - mine, low, high)
        return self._legal

    def spot(self, hole: tuple, board: tuple) -> Spot:
        """The decision of the player to act, who holds `hole`, on `board`."""
        p, bets, stacks = self.to_act, self.bets, self.stacks
        to_call, low, high = self.legal()
        return Spot(hole, board, self.pot + bets[0] + bets[1], to_call, bets[p], stacks[p], stacks[1 - p], low, high,
                    p == self.button, self.big_blind, self.view(p))

    def apply(self, d: Decision) -> None:
        self._legal = None
        p, o = self.to_act, 1 - self.to_act
        kind, bets, stacks = d.kind, self.bets, self.stacks
        total = 0
        if kind == FOLD:
            self.folded, self.over = p, True
        elif kind == CALL or kind == RAISE:
            if kind == CALL:
                total = bets[o]
            else:
                total = d.total
                raised = total - bets[o]
                if raised > self.last_raise:
                    self.last_raise = raised
                self.acted[o] = False
            put = total - bets[p]
            if put > stacks[p]:  # no more than the stack: an all-in
                put = stacks[p]
            stacks[p] -= put
            bets[p] += put
        self.log.append((self.street, p, kind, total))
        self.acted[p] = True
        if self.over:
            return
        if kind == RAISE or not self.acted[o]:
            self.to_act = o
        else:
            self._close_round()

    def _close_round(self) -> None:
        self.pot += self.bets[0] + self.bets[1]
        self.bets = [0, 0]
        if self.street == 3 or 0 in self.stacks:
            self.over = True
            return
        self.street += 1
        self.to_act = 1 - self.button
        self.last_raise = 0
        self.acted = [False, False]

    def payoff(self, player: int, holes, board) -> int:
        """`player`'s chip result once the hand is over (`board` complete for a showdown)."""
        if self.folded is not None:
            return self.result(player, 1 - self.folded)
        mine, theirs = hand_rank(holes[player], board), hand_rank(holes[1 - player], board)
        return self.result(player, player if mine < theirs else (None if mine == theirs else 1 - player))

    def result(self, player: int, winner: int | None) -> int:
        """`player`'s chip result once the hand is over, given who takes the pot (None: split)."""
        pot = self.pot + self.bets[0] + self.bets[1]
        if self.folded is not None:
            winner = 1 - self.folded
        won = pot // 2 if winner is None else (pot if winner == player else 0)
        return self.stacks[player] + won - self.start
