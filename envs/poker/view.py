"""What the agent sees of a hand: one public snapshot (a dict, `info["table"]`) and its text.

The snapshot is rebuilt after every move and the observation is rendered from it, so the text
and the dict always say the same thing. Neither holds the opponent's cards before a showdown.
Each move is put into words once (a move seen before reuses its words), the betting's text only
grows at its end, and whatever is fixed for the hand is rendered once: rendering joins ready
pieces (it runs at every step).
"""
from __future__ import annotations

from functools import lru_cache

from clbench.envs.poker.cards import card_names
from clbench.envs.poker.policy import CALL, CHECK, FOLD, RAISE, Memo
from clbench.envs.poker.table import AGENT, OPPONENT, STREETS, HandTable

_WHO = {AGENT: "you", OPPONENT: "opponent"}
_VERB = {FOLD: "fold", CHECK: "check"}
_STREET_SUFFIX = {street: f" ({street})" for street in STREETS}  # after the board's cards in the text


def _move_words(key: tuple) -> str:
    """A move in words: "you call 20", "Mara bets 40 (all-in)", ..."""
    opp, p, kind, total, opening, all_in = key
    s = "" if p == AGENT else "s"
    if kind == RAISE:
        verb = f"bet{s} {total}" if opening else f"raise{s} to {total}"
    elif kind == CALL:
        verb = f"call{s} {total}"
    else:
        verb = _VERB[kind] + s
    return f"{'you' if p == AGENT else opp} {verb}{' (all-in)' if all_in else ''}"


#: `_move_words` of (opponent, player, kind, total, opening bet, all-in): few distinct moves recur, each put
#: into words once
_MOVES = Memo(_move_words)

#: the keys of a snapshot after the hand's fixed ones, in order (None: filled in at every refresh)
_SNAPSHOT = {"board": None, "street": None, "pot": None, "history": None, "over": False, "to_call": 0, "min_raise": 0,
             "max_raise": 0, "showdown": False, "opp_hole": None, "hand_names": None, "result": 0, "folded": "",
             "my_bet": 0, "opp_bet": 0, "my_stack": 0, "opp_stack": 0}


class HandView:
    """The agent's view of one `HandTable`; `static` is what is fixed for the hand."""

    def __init__(self, table: HandTable, static: dict):
        self.table = table
        self.static = static
        self.opp = static["opponent"]
        self.history: list[list] = []  # [street, "you"|"opponent", kind, total]
        # the betting's lines, written as the moves come: a move only ever extends the last street's line
        # or starts the next street's, so the text grows at its end (no line is rewritten or joined again)
        self._betting = _blinds_line(self.opp, static["button"], *static["blinds"])
        self._street = 0  # the street of the last line
        self._opened = -1  # the last street with a bet (later raises on it are "raises to")
        self._board: list[str] = []  # the board's card names
        self._board_text = "Board: -"  # ... in words, without the street
        self._cards = f"Your cards: {' '.join(static['hole'])}\n"
        # the text's head with its title (hand number, opponent, position), joined once for every step
        self._head = (f"Hand {static['hand']} of {static['hands']} against {self.opp}; you are "
                      f"{'on the button' if static['button'] else 'in the big blind'}.\n{self._cards}")
        # every key of a snapshot in its order, the fixed ones filled: a copy of it is filled in faster
        # than a new dict grows (several resizes for some 25 keys), and at every step. Each key keeps
        # one type in every snapshot (0, "" or [] when it does not apply), so vector envs can stack it
        blank = self._blank = {**static, **_SNAPSHOT}
        blank["opp_hole"], blank["hand_names"] = [], []  # the hand's own lists (the template's are shared)
        self.snap: dict = {}
        self.refresh()

    def refresh(self) -> dict:
        """Catch up with the table's moves and rebuild the snapshot."""
        t = self.table
        b = t.betting
        history, log = self.history, b.log
        if len(history) < len(log):
            all_in, opp, betting = t.all_in, self.opp, self._betting
            for i in range(len(history), len(log)):
                st, p, kind, total = log[i]
                street = STREETS[st]
                history.append([street, _WHO[p], kind, total])
                opening = kind == RAISE and st != 0 and st != self._opened  # a street's first bet (later: raises)
                if kind == RAISE:
                    self._opened = st
                move = _MOVES[(opp, p, kind, total, opening, i in all_in)]
                if st == self._street:
                    betting += "; " + move
                else:  # the first move of a street opens its line
                    betting += f"\n  {street}: {move}"
                    self._street = st
            self._betting = betting
        board = t.game.board
        if len(board) != len(self._board):  # the board grows once per street: named once per street
            self._board = card_names(board)
            self._board_text = "Board: " + " ".join(self._board)
        snap = self._blank.copy()
        snap["board"], snap["street"] = list(self._board), STREETS[b.street]
        snap["pot"], snap["history"], snap["over"] = b.pot + b.bets[0] + b.bets[1], list(history), t.over
        if t.over:  # the bets stay 0 (the blank's); the stacks are the library's after it settled the pot
            shown = t.showdown()
            mine = t.chips(AGENT)
            snap["my_stack"], snap["opp_stack"], snap["showdown"] = mine, t.chips(OPPONENT), shown
            snap["result"], snap["folded"] = mine - t.stack, "" if shown else _WHO[b.log[-1][1]]  # = t.profit()
            if shown:
                snap["opp_hole"] = card_names(t.holes[OPPONENT])
                snap["hand_names"] = [t.hand_name(AGENT), t.hand_name(OPPONENT)]
        else:
            bets, stacks = b.bets, b.stacks
            snap["my_bet"], snap["opp_bet"] = bets[AGENT], bets[OPPONENT]
            snap["my_stack"], snap["opp_stack"] = stacks[AGENT], stacks[OPPONENT]
            if b.to_act == AGENT:
                snap["to_call"], snap["min_raise"], snap["max_raise"] = b.legal()
        self.snap = snap
        return snap

    # ---- text
    def header(self, met_before: int, first_of_variant: bool) -> str:
        snap, opp = self.snap, self.opp
        small, big = snap["blinds"]
        text = (f"Hand {snap['hand']} of {snap['hands']} against {opp}. Blinds {small}/{big}; both stacks start at "
                f"{snap['stack']}.\n")
        if first_of_variant:
            text += (f"{opp} returns: you played {met_before} hands against {opp} earlier.\n" if met_before
                     else f"New opponent: {opp} sits down.\n")
        return text + ("You are on the button (small blind): you act first before the flop and last after it."
                       if snap["button"] else
                       "You are in the big blind: you act last before the flop and first after it.")

    def text(self, title: bool = True) -> str:
        """The hand as it stands; `title` starts with the hand number, opponent and position."""
        snap, opp = self.snap, self.opp
        head = self._head if title else self._cards
        if snap["over"]:
            return f"{head}{self._board_text}\nBetting so far:\n{self._betting}\n" + "\n".join(self.result_lines())
        street = _STREET_SUFFIX[snap["street"]] if self._board else ""
        state = _state_text(opp, snap["pot"], snap["my_stack"], snap["opp_stack"], snap["my_bet"], snap["opp_bet"],
                            snap["to_call"], snap["min_raise"], snap["max_raise"])
        return f"{head}{self._board_text}{street}\nBetting so far:\n{self._betting}\n{state}"

    def result_lines(self) -> list[str]:
        snap, opp = self.snap, self.opp
        profit = snap["result"]
        if snap["showdown"]:
            mine, theirs = snap["hand_names"]
            lines = [f"Showdown: you show {' '.join(snap['hole'])} ({mine}); {opp} shows "
                     f"{' '.join(snap['opp_hole'])} ({theirs})."]
        else:
            lines = [("You fold" if snap["folded"] == "you" else f"{opp} folds") + "; the cards are not shown."]
        lines.append(_result_line(opp, profit, snap["blinds"][1]))
        return lines

    def legal_text(self) -> str:
        snap = self.snap
        if snap["over"]:
            return "The hand is over; any reply continues."
        return _legal_text(snap["to_call"], snap["min_raise"], snap["max_raise"])


@lru_cache(maxsize=256)
def _blinds_line(opp: str, button: bool, small: int, big: int) -> str:
    """The betting's first line, the blinds posted (the same few recur: each rendered once)."""
    sb, bb = ("you", opp) if button else (opp, "you")
    return f"  preflop: {sb} post{'' if sb == 'you' else 's'} {small}, {bb} post{'' if bb == 'you' else 's'} {big}"


@lru_cache(maxsize=4096)
def _state_text(opp: str, pot: int, my_stack: int, opp_stack: int, my_bet: int, opp_bet: int, to_call: int, low: int,
                high: int) -> str:
    """The chips and the legal moves in words: the text's last lines while the hand runs (the same chip counts
    recur from hand to hand: each rendered once, without formatting seven numbers at every step)."""
    return (f"Pot: {pot}. Behind: you {my_stack}, {opp} {opp_stack}. Bet this round: you {my_bet}, {opp} {opp_bet}.\n"
            f"To call: {to_call}. {_legal_text(to_call, low, high)}")


@lru_cache(maxsize=4096)
def _legal_text(to_call: int, low: int, high: int) -> str:
    """The legal moves in words (few distinct bet sizes recur: rendered once each)."""
    moves = ["FOLD", "CHECK"] if not to_call else ["FOLD", f"CALL (puts in {to_call} more)"]
    if high:
        moves.append(f"RAISE <total> with total {low}..{high} (RAISE {high} = all-in)")
    return "Legal actions: " + " | ".join(moves) + "."


@lru_cache(maxsize=4096)
def _result_line(opp: str, profit: int, big_blind: int) -> str:
    """A hand's last line (few distinct results recur: rendered once each)."""
    outcome = "you win" if profit > 0 else (f"{opp} wins" if profit < 0 else "split pot")
    return f"Hand over: {outcome}. Result: {profit:+d} chips ({profit / big_blind:+.1f} big blinds)."
