"""What a player sees when it must act (`Spot`) and what it answers (`Decision`).

Opponents, the scripted agents' playbooks and the oracle's look-ahead all speak this one
language, so a policy can be played by the env (on the library's game), simulated (on
`betting.Betting`) or reasoned about, unchanged.
"""
from __future__ import annotations

from typing import NamedTuple

from clbench.envs.poker.strength import Strength, strength

FOLD, CHECK, CALL, RAISE = "FOLD", "CHECK", "CALL", "RAISE"
KINDS = (FOLD, CHECK, CALL, RAISE)
_STREET_OF_BOARD = {0: 0, 3: 1, 4: 2, 5: 3}


class Decision(NamedTuple):
    kind: str
    total: int = 0  # RAISE only: the total this player's bet is raised *to* on this street


#: the moves without an amount, built once (policies answer with them at every decision)
_FOLD, _CHECK, _CALL = Decision(FOLD), Decision(CHECK), Decision(CALL)
_new = tuple.__new__  # a NamedTuple without its slower __new__


class Memo(dict):
    """`make(key)` for each key, made the first time it is asked for (`memo[key]`) and kept (cleared when
    `limit` keys are kept). For pure functions of few distinct small keys that run at every decision: a
    hit is one dict lookup in C."""

    __slots__ = ("make", "limit")

    def __init__(self, make, limit: int = 1 << 14):
        super().__init__()
        self.make, self.limit = make, limit

    def __missing__(self, key):
        if len(self) >= self.limit:
            self.clear()
        value = self[key] = self.make(key)
        return value


class Act(NamedTuple):
    """One action of a hand's betting history, seen from one player (`mine`)."""

    street: int
    mine: bool
    kind: str
    total: int = 0


class Spot:
    """A player's decision point: its own hand features and the public betting state."""

    __slots__ = ("hole", "board", "pot", "to_call", "my_bet", "stack", "opp_stack", "min_raise", "max_raise",
                 "button", "big_blind", "history", "street", "_strength", "_raises")

    def __init__(self, hole: tuple, board: tuple, pot: int, to_call: int, my_bet: int, stack: int, opp_stack: int,
                 min_raise: int, max_raise: int, button: bool, big_blind: int, history: tuple):
        self.hole = hole  # this player's two cards
        self.board = board
        self._strength: Strength | None = None
        self.pot = pot  # every chip in the middle, this street's bets included
        self.to_call = to_call
        self.my_bet = my_bet  # chips this player put in on this street
        self.stack = stack  # chips behind
        self.opp_stack = opp_stack
        self.min_raise = min_raise  # smallest legal RAISE total, 0 when raising is not allowed
        self.max_raise = max_raise  # largest legal RAISE total (all-in), 0 when not allowed
        self.button = button
        self.big_blind = big_blind
        self.history = history  # tuple[Act, ...], oldest first
        self.street = _STREET_OF_BOARD[len(board)]  # 0 preflop .. 3 river
        self._raises: int | None = None

    @property
    def strength(self) -> Strength:
        """This player's hand features, computed when a policy first asks (some never do)."""
        if self._strength is None:
            self._strength = strength(self.hole, self.board)
        return self._strength

    @property
    def raises(self) -> int:
        """Bets and raises made on this street so far (blinds excluded); policies ask it repeatedly."""
        if self._raises is None:
            street, n = self.street, 0
            for a in self.history:  # a plain loop: a generator costs more than these few moves
                if a.street == street and a.kind == RAISE:
                    n += 1
            self._raises = n
        return self._raises

    @property
    def aggressor(self) -> bool:
        """This player made the last bet or raise of the previous streets (e.g. the preflop raiser)."""
        street = self.street
        for a in reversed(self.history):
            if a.street < street and a.kind == RAISE:
                return a.mine
        return False

    def opp_acts(self, kind: str, street: int | None = None) -> int:
        return sum(1 for a in self.history if not a.mine and a.kind == kind and (street is None or a.street == street))

    # ---- decisions, always legal for this spot
    def check_or_call(self) -> Decision:
        return _CALL if self.to_call else _CHECK

    def check_or_fold(self) -> Decision:
        return _FOLD if self.to_call else _CHECK

    def raise_to(self, total: float) -> Decision:
        """RAISE to `total`, clipped to the legal range; CHECK/CALL when raising is not allowed."""
        high = self.max_raise
        if not high:
            return _CALL if self.to_call else _CHECK  # = check_or_call()
        total, low = round(total), self.min_raise
        if total < low:  # = min(max(total, low), high), without two calls (this runs at most decisions)
            total = low
        if total > high:
            total = high
        return _new(Decision, (RAISE, int(total)))

    def bet_pot(self, fraction: float) -> Decision:
        """Bet or raise by `fraction` of the pot as it would be after calling."""
        facing = self.my_bet + self.to_call
        return self.raise_to(facing + fraction * (self.pot + self.to_call))

    def raise_times(self, factor: float) -> Decision:
        """Raise to `factor` times the current bet (preflop: times the big blind if unopened)."""
        facing = self.my_bet + self.to_call
        return self.raise_to(factor * (facing if facing > self.big_blind else self.big_blind))

    def legalize(self, d: Decision) -> Decision:
        """The nearest legal decision: no free folds, no checking a bet, raises clipped."""
        kind = d.kind
        if kind == RAISE:
            total, high = d.total, self.max_raise
            if high and type(total) is int and self.min_raise <= total <= high:
                return d  # = raise_to(total): already a legal total (as the helpers above make them)
            return self.raise_to(total)
        if kind == FOLD:
            return d if self.to_call else _CHECK
        if kind == CHECK or kind == CALL:
            return _CALL if self.to_call else _CHECK  # = check_or_call()
        return d


def bet_share(s: Spot) -> float:
    """The bet faced, as a share of the pot before it (at least 1 chip)."""
    before = s.pot - s.to_call  # max(1, before) without a call to max (a decision asks it)
    return s.to_call / (before if before > 1 else 1)


class Policy:
    """A deterministic strategy: a pure function of the spot."""

    name = "policy"

    def decide(self, spot: Spot) -> Decision:
        raise NotImplementedError
