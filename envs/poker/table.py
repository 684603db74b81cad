"""One heads-up hand played on the `texasholdem` library with our seeded cards.

The library is the referee: it posts blinds, checks every move, moves the button, builds the
side pots and settles the showdown with its evaluator. We only choose the cards (overwriting
the ones its own deck dealt, as its history import does) and keep a compact betting log.
Each move reaches the library's rules once (`HandTable.apply`), and a finished game plays
the next hand (`_game`): the library's work per hand is a hand's, nothing more.
"""
from __future__ import annotations

from types import FunctionType
from typing import NamedTuple

from texasholdem.card.deck import Deck
from texasholdem.game import game as _library
from texasholdem.game.action_type import ActionType
from texasholdem.game.game import TexasHoldEm
from texasholdem.game.hand_phase import HandPhase
from texasholdem.game.history import History
from texasholdem.game.player_state import PlayerState

from clbench.envs.poker.betting import Betting
from clbench.envs.poker.cards import Deal, StackedDeck
from clbench.envs.poker.policy import CALL, CHECK, FOLD, RAISE, Decision, Policy, Spot
from clbench.envs.poker.strength import hand_rank, rank_name

AGENT, OPPONENT = 0, 1
STREETS = ("preflop", "flop", "turn", "river")
_PREHAND = HandPhase.PREHAND
_IN, _TO_CALL = PlayerState.IN, PlayerState.TO_CALL
_TYPE = {FOLD: ActionType.FOLD, CHECK: ActionType.CHECK, CALL: ActionType.CALL, RAISE: ActionType.RAISE}


class _Unshuffled(Deck):
    """The deck the library deals a hand's hole cards from, in a fixed order: `HandTable` replaces those
    cards (and the deck) with ours at once, so shuffling it only cost time (a fifth of starting a hand)
    and moved the global `random` state under other code."""

    def __init__(self):  # noqa: super().__init__ would shuffle
        self.cards = Deck._get_full_deck()


class _Evaluator:
    """The library's evaluator as its showdown calls it, answered through `strength.hand_rank` (the same
    evaluator, its results kept): the players' own hand features already ranked most hands that reach
    a showdown, and a rollout deals the hands of every other rollout again."""

    @staticmethod
    def evaluate(cards: list, board: list) -> int:
        return hand_rank(tuple(cards), tuple(board))


#: a phase's section of the hand history, by the phase's member name
_SECTION = {phase._name_: phase._name_.lower() for phase in HandPhase}


class _History(History):
    """The library's hand history, each phase's section found through `_SECTION` instead of the phase's
    enum name lowered at every look-up (the betting round reads it at every move; an enum's `name` is
    two Python calls)."""

    def __getitem__(self, hand_phase: HandPhase):
        return getattr(self, _SECTION[hand_phase._name_])

    def __setitem__(self, hand_phase: HandPhase, history) -> None:
        setattr(self, _SECTION[hand_phase._name_], history)


class _Game(TexasHoldEm):
    """The library's game, its hand set-up and showdown run unchanged but dealing from `_Unshuffled`,
    keeping its history in `_History` and ranking hands through `_Evaluator`: the same function code,
    with `Deck`, `History` and `evaluator` looked up in a copy of the library module's globals (nothing
    global is patched, so other users of the library in this process still shuffle). One query of its
    rules, `_is_hand_over`, is answered without the library's generators."""

    _prehand = FunctionType(TexasHoldEm._prehand.__code__, {**vars(_library), "Deck": _Unshuffled,
                                                             "History": _History}, "_prehand")
    _settle = FunctionType(TexasHoldEm._settle.__code__, {**vars(_library), "evaluator": _Evaluator}, "_settle")

    def _is_hand_over(self) -> bool:
        """`TexasHoldEm._is_hand_over` (no player can act any more: none has a bet to call and at most one
        can still bet) without its iterators: the library's walks the players through two nested
        generators and leaves them early, and each closing raises GeneratorExit in both; it asks this before
        every move and street (the answer does not depend on the order the players are read in)."""
        count = 0
        for player in self.players:
            state = player.state
            if state is _TO_CALL:
                return False
            if state is _IN:
                count += 1
        return count < 2


#: finished games, per (stack, small blind, big blind), ready for another hand. A game is a knot of
#: reference cycles (its phase handlers and its hand generator point back at it) that only the cyclic
#: garbage collector frees: a new one per hand cost its set-up and the collections of that garbage.
#: A finished game starts its next hand as any game does, after both stacks are set back to the
#: buy-in (every hand starts even).
_SPARE: dict[tuple[int, int, int], list[_Game]] = {}
_SPARE_MAX = 4  # per key (an env holds its last hand's table while it deals the next: two games per env)


def _game(stack: int, small_blind: int, big_blind: int) -> _Game:
    """A game between hands: a spare one with both stacks refilled, else a new one."""
    spare = _SPARE.get((stack, small_blind, big_blind))
    if spare:
        try:
            game = spare.pop()
        except IndexError:  # another thread took the last one
            pass
        else:
            for player in game.players:
                player.chips = stack
            return game
    return _Game(buyin=stack, big_blind=big_blind, small_blind=small_blind, max_players=2)


class Legal(NamedTuple):
    """The moves open to the player to act."""

    to_call: int
    min_raise: int  # 0 when raising is not allowed
    max_raise: int

    @property
    def can_check(self) -> bool:
        return self.to_call == 0

    def check(self, d: Decision) -> str | None:
        """None if `d` is legal, else what is wrong with it."""
        if d.kind == CHECK and self.to_call:
            return f"cannot CHECK: there is a bet of {self.to_call} to call"
        if d.kind == CALL and not self.to_call:
            return "cannot CALL: there is no bet to call (CHECK instead)"
        if d.kind == RAISE:
            if not self.max_raise:
                return "cannot RAISE: raising is closed in this betting round"
            if not self.min_raise <= d.total <= self.max_raise:
                return (f"cannot RAISE to {d.total}: the total must be between {self.min_raise} and "
                        f"{self.max_raise} (your whole bet on this street after the raise)")
        return None


class HandTable:
    """A single hand: agent is player 0, the opponent player 1.

    The library plays the hand: it checks and executes every move, deals the board and settles
    the pot. A `Betting` model follows each move and answers the frequent read-only questions
    (legal moves, pot, bets), which the library answers only slowly; tests check they agree.
    """

    def __init__(self, deal: Deal, agent_button: bool, opponent: Policy, stack: int, small_blind: int, big_blind: int):
        self.deal = deal
        self.opponent = opponent
        self.stack = stack
        self._key = (stack, small_blind, big_blind)
        game = _game(stack, small_blind, big_blind)
        button = AGENT if agent_button else OPPONENT
        game.btn_loc = 1 - button  # the library moves the button one seat on when a hand starts
        game.start_hand()
        # our cards replace the library's shuffle (the history shares the `hands` dict)
        game.hands[AGENT] = list(deal.agent)
        game.hands[OPPONENT] = list(deal.opponent)
        game._deck = StackedDeck(deal.board)
        self.game = game
        self.button = button
        self.betting = Betting(button, stack, small_blind, big_blind)
        self.holes = (tuple(deal.agent), tuple(deal.opponent))
        self.all_in: set[int] = set()  # indices into `log` of moves that put a player all-in
        # the hand ends only inside the library's betting round: asked once per move, read many times
        self.over = not game.is_hand_running()

    def __del__(self):
        """A finished hand's game goes back to the spares once no one can read this table any more
        (a game whose hand is still running cannot start another)."""
        game = self.__dict__.get("game")
        if game is not None and game.hand_phase is _PREHAND and _SPARE is not None:  # None: at interpreter exit
            spare = _SPARE.setdefault(self._key, [])
            if len(spare) < _SPARE_MAX:
                spare.append(game)

    # ---- state
    @property
    def log(self) -> list[tuple[int, int, str, int]]:
        """The moves so far as (street, player, kind, total)."""
        return self.betting.log

    @property
    def to_act(self) -> int | None:
        return None if self.over else self.betting.to_act

    @property
    def street(self) -> int:
        return self.betting.street

    @property
    def board(self) -> list:
        return list(self.game.board)

    @property
    def pot(self) -> int:
        b = self.betting
        return b.pot + b.bets[0] + b.bets[1]

    def bet(self, player: int) -> int:
        return self.betting.bets[player] if not self.over else 0

    def chips(self, player: int) -> int:
        return self.game.players[player].chips if self.over else self.betting.stacks[player]

    def legal(self) -> Legal:
        return tuple.__new__(Legal, self.betting.legal())  # NamedTuple's own __new__ is slower

    def spot(self) -> Spot:
        b = self.betting
        return b.spot(self.holes[b.to_act], tuple(self.game.board))

    # ---- moves
    def apply(self, d: Decision) -> None:
        """Play a legal decision for the player to act: the library's betting round validates it and
        plays it, then the `Betting` model follows.

        `TexasHoldEm.take_action` validates a move and then resumes the hand, whose betting round
        validates the same move again before playing it (the library's rules run twice per move):
        resuming the hand directly keeps the second, the one that guards the game state. An
        illegal move still raises there (the env never sends one: `Legal.check`, `Spot.legalize`),
        and ends the library's hand: any later move raises too.
        """
        b, kind, game = self.betting, d.kind, self.game
        p = b.to_act
        game._action = (_TYPE[kind], d.total if kind == RAISE else None)
        # the hand yields the game before each move and ends (None here: no StopIteration raised and caught
        # at every hand's last move) after the last
        if next(game._hand_gen, None) is None and game.hand_phase is not _PREHAND:
            raise RuntimeError("the library refused an earlier move of this hand: it cannot go on")
        self.over = game.hand_phase is _PREHAND  # = not game.is_hand_running()
        b.apply(d)
        if b.stacks[p] == 0 and (kind == CALL or kind == RAISE):
            self.all_in.add(len(b.log) - 1)

    def play_opponent(self) -> None:
        """Let the opponent act until it is the agent's turn or the hand is over."""
        b, decide, hole = self.betting, self.opponent.decide, self.holes[OPPONENT]
        while not self.over and b.to_act == OPPONENT:
            spot = b.spot(hole, tuple(self.game.board))  # = self.spot(), one call fewer per decision
            self.apply(spot.legalize(decide(spot)))

    # ---- result
    def profit(self) -> int:
        """The agent's chip result once the hand is over."""
        return self.chips(AGENT) - self.stack

    def showdown(self) -> bool:
        settle = self.game.hand_history.settle if self.game.hand_history else None
        if settle:  # a plain loop: any() over a generator left early closes it with an exception
            for _, rank, _ in settle.pot_winners.values():
                if rank != -1:
                    return True
        return False

    def hand_name(self, player: int) -> str:
        """'Two Pair', 'Flush', ... (a winner's rank comes from the library's settlement)."""
        for _, rank, winners in self.game.hand_history.settle.pot_winners.values():
            if rank != -1 and player in winners:
                return rank_name(rank)
        return rank_name(hand_rank(self.holes[player], tuple(self.board)))
