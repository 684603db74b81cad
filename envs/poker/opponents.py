"""The rule-based opponents: deterministic, exploitable policies whose kind shows only in the long run.

Each is a pure function of its own cards (through `strength.Strength`), the board and the
public betting, with the thresholds in tasks/poker/default.yaml. Besides what makes a kind
exploitable, each mixes its visible moves by `Strength.code` (a fixed pseudo-random number of its
cards and the board, unrelated to their strength): a drawn share of hands is played with another
kind's move, so one hand's betting says little about the kind and many hands say it clearly. How much
a player bets or raises is drawn per hand the same way for every kind (`raise_mixed`, `bet_mixed`).

- `CallingStation`: calls bets up to a bit more than the pot with any two cards; bigger bets
  (overbets, shoves) it calls only with a good starting hand or a pair; never raises a bet.
  It raises a share of its unopened hands preflop and bets a share of the streets checked to it,
  whatever it holds.
- `FitOrFold`: raises a share of its buttons, limps a share of the rest and folds the others;
  defends its big blind only with strong hands; after the flop bets value and a share of the
  other streets checked to it, continues against bets only with top pair or better and raises only
  two pair or better; folds middle pairs and draws to any bet.
- `LooseAggressive`: opens most buttons (limping a share of them), re-raises and defends wide, bets
  most flops and calls flop bets with almost anything; on the turn and river it bets strong made
  hands, draws and a share of its weak hands, raises only strong ones, and calls bets by pot odds
  (any pair against bets up to the pot, anything against small ones).

A spec may carry `name`: the name shown at the table when it differs from the spec's key
(one player with two policies, before and after changing its play). Worlds other than the
canonical one draw each kind's parameters from `RANGES` (`draw_opponent`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from clbench.envs.poker.policy import Decision, Policy, Spot, bet_share

PRE, FLOP = 0, 1


def raise_mixed(s: Spot) -> Decision:
    """A preflop raise (open, isolation or re-raise) to 2.5 to 3.5 times the bet, by `Strength.size`: every
    kind sizes alike, so how much a player raises never tells its kind."""
    return s.raise_times(2.5 + s.strength.size / 100)


def bet_mixed(s: Spot) -> Decision:
    """A bet into a checked street of 0.4 to 0.85 of the pot, by `Strength.size`, alike for every kind."""
    return s.bet_pot(0.4 + 0.45 * s.strength.size / 100)


@dataclass(frozen=True)
class CallingStation(Policy):
    style = "calling_station"
    big_share: float = 1.2  # bets above this share of the pot it calls only with ...
    big_pct: float = 0.5  # ... this top share of its hands preflop, or a pair or better after the flop
    raise_pct: float = 0.25  # preflop, unopened: share of its hands it raises (the rest it limps or checks)
    stab_pct: float = 0.3  # after the flop, checked to: share of its hands it bets (the rest it checks)

    def decide(self, s: Spot) -> Decision:
        if not s.raises:  # its random aggression: unrelated to its cards, so it tells nothing of them
            if s.street == PRE:
                if s.strength.code < 100 * self.raise_pct:
                    return raise_mixed(s)
            elif not s.to_call and s.strength.code < 100 * self.stab_pct:
                return bet_mixed(s)
        before, floor = s.pot - s.to_call, 4 * s.big_blind  # the pot before the bet, at least 4 big blinds
        if s.to_call > self.big_share * (before if before > floor else floor):
            st = s.strength
            strong = st.pct >= 1 - self.big_pct if s.street == PRE else st.tier >= 1
            return s.check_or_call() if strong else s.check_or_fold()
        return s.check_or_call()


@dataclass(frozen=True)
class FitOrFold(Policy):
    style = "fit_or_fold"
    open_pct: float = 0.45  # share of button hands it raises (the rest it folds)
    iso_pct: float = 0.15  # share it raises in the big blind after a limp
    defend_pct: float = 0.22  # share it calls a raise with
    reraise_pct: float = 0.05  # share it re-raises with
    big_raise_bb: float = 6.0  # a raise to more than this is met like a re-raise
    continue_tier: int = 3  # after the flop: call bets with this tier or better
    value_tier: int = 4  # bet with this tier or better; needed to call overbets
    raise_tier: int = 5
    limp_pct: float = 0.2  # unopened button: share of the hands it does not raise that it limps
    stab_pct: float = 0.25  # after the flop, checked to: share of its other hands it bets anyway

    def decide(self, s: Spot) -> Decision:
        st = s.strength
        if s.street == PRE:
            if not s.raises:
                if s.to_call:  # unopened button
                    if st.pct >= 1 - self.open_pct:
                        return raise_mixed(s)
                    return s.check_or_call() if st.code < 100 * self.limp_pct else s.check_or_fold()
                return raise_mixed(s) if st.pct >= 1 - self.iso_pct else s.check_or_call()
            if st.pct >= 1 - self.reraise_pct and s.raises < 3:
                return raise_mixed(s)
            small = s.raises == 1 and s.my_bet + s.to_call <= self.big_raise_bb * s.big_blind
            keep = self.defend_pct if small else 2 * self.reraise_pct
            return s.check_or_call() if st.pct >= 1 - keep else s.check_or_fold()
        if not s.to_call:
            stab = st.code < 100 * self.stab_pct
            return bet_mixed(s) if st.tier >= self.value_tier or stab else s.check_or_call()
        if st.tier >= self.raise_tier and s.raises < 3:
            return s.raise_times(3)
        overbet = s.to_call > s.pot - s.to_call
        need = self.value_tier if overbet else self.continue_tier
        return s.check_or_call() if st.tier >= need else s.check_or_fold()


@dataclass(frozen=True)
class LooseAggressive(Policy):
    style = "loose_aggressive"
    open_pct: float = 0.85
    iso_pct: float = 0.6
    threebet_pct: float = 0.3
    call_pct: float = 0.8  # share it continues with against one raise (incl. re-raises)
    fourbet_pct: float = 0.08
    continue_pct: float = 0.5  # share it continues with against two or more raises
    big_raise_bb: float = 8.0  # a single raise to more than this is met like a re-raise
    flop_pct: float = 0.75  # flop, checked to: share of its hands it bets (and every strong hand or draw)
    limp_pct: float = 0.2  # unopened button: share of the hands it would raise that it limps instead
    late_value_tier: int = 4  # turn/river: bet and call with this tier or better
    late_raise_tier: int = 5
    barrel_pct: float = 0.5  # turn/river: share of its weak hands it bets anyway when checked to
    call_share: float = 1.0  # turn/river: calls bets up to this share of the pot with any pair or a draw
    float_share: float = 0.4  # ... and with nothing at all up to this share

    def decide(self, s: Spot) -> Decision:
        st = s.strength
        if s.street == PRE:
            if not s.raises:
                if s.to_call:
                    if st.pct < 1 - self.open_pct:
                        return s.check_or_fold()
                    return s.check_or_call() if st.code < 100 * self.limp_pct else raise_mixed(s)
                return raise_mixed(s) if st.pct >= 1 - self.iso_pct else s.check_or_call()
            if s.raises == 1 and s.my_bet + s.to_call <= self.big_raise_bb * s.big_blind:
                if st.pct >= 1 - self.threebet_pct:
                    return raise_mixed(s)
                return s.check_or_call() if st.pct >= 1 - self.call_pct else s.check_or_fold()
            if st.pct >= 1 - self.fourbet_pct and s.raises < 4:
                return raise_mixed(s)
            return s.check_or_call() if st.pct >= 1 - self.continue_pct else s.check_or_fold()
        if s.street == FLOP:
            if not s.to_call:
                bet = st.code < 100 * self.flop_pct or st.tier >= self.late_value_tier or st.draw
                return bet_mixed(s) if bet else s.check_or_call()
            if st.tier >= self.late_value_tier and s.raises < 2:
                return s.raise_times(3)
            loose = st.tier >= 1 or st.draw or st.overcards or s.to_call * 2 <= s.pot - s.to_call
            return s.check_or_call() if loose else s.check_or_fold()
        if not s.to_call:  # value, and a fixed share of the rest as bluffs (draws on the turn always)
            bluff = st.draw and s.street < 3 or st.code < 100 * self.barrel_pct
            return bet_mixed(s) if st.tier >= self.late_value_tier or bluff else s.check_or_call()
        if st.tier >= self.late_raise_tier and s.raises < 2:
            return s.raise_times(3)
        # defends by pot odds: any pair (or a draw on the turn) calls bets up to `call_share` of the pot,
        # nothing calls bets up to `float_share`, strong hands call anything
        share = bet_share(s)
        some = st.tier >= 1 or st.draw and s.street < 3
        keep = st.tier >= self.late_value_tier or some and share <= self.call_share or share <= self.float_share
        return s.check_or_call() if keep else s.check_or_fold()


STYLES = {cls.style: cls for cls in (CallingStation, FitOrFold, LooseAggressive)}


#: the range each exploitable parameter is drawn from in a non-canonical world (uniform; ints inclusive)
RANGES: dict[str, dict[str, tuple]] = {
    "calling_station": {"big_share": (1.0, 1.5), "big_pct": (0.4, 0.6), "raise_pct": (0.15, 0.35),
                        "stab_pct": (0.2, 0.4)},
    "fit_or_fold": {"open_pct": (0.35, 0.55), "iso_pct": (0.1, 0.2), "defend_pct": (0.17, 0.27),
                    "reraise_pct": (0.03, 0.07), "big_raise_bb": (5.0, 7.0),
                    "continue_tier": (3, 3), "value_tier": (4, 4), "raise_tier": (5, 5), "limp_pct": (0.1, 0.3), "stab_pct": (0.15, 0.35)},
    "loose_aggressive": {"open_pct": (0.75, 0.9), "iso_pct": (0.5, 0.65), "threebet_pct": (0.25, 0.4),
                         "call_pct": (0.7, 0.85), "fourbet_pct": (0.05, 0.1), "continue_pct": (0.4, 0.55),
                         "big_raise_bb": (7.0, 9.0), "late_value_tier": (4, 4), "late_raise_tier": (5, 5),
                         "barrel_pct": (0.4, 0.6), "call_share": (0.8, 1.2), "float_share": (0.3, 0.5),
                         "flop_pct": (0.6, 0.85), "limp_pct": (0.1, 0.3)},
}


#: the changes of kind a returning player may go through in a drawn world: ones after which the old
#: exploit loses what the new one wins (a change to fit-or-fold would cost an old exploit little)
CHANGES: dict[str, tuple[str, ...]] = {"calling_station": ("loose_aggressive",),
                                       "loose_aggressive": ("calling_station",)}


#: the names a drawn world's players go by: never the canonical world's, so no name a model may have read
#: here carries a kind from one world into another (`PokerEnv._draw_world`)
NAMES = ("Abe", "Ari", "Bea", "Cal", "Cy", "Eli", "Emi", "Fay", "Gus", "Ida", "Ike", "Jo", "Kai", "Kit", "Lev",
         "Lou", "Mei", "Nia", "Ned", "Oda", "Oli", "Pia", "Raf", "Ren", "Rio", "Sol", "Tal", "Tova", "Uma", "Vik",
         "Wen", "Yara", "Zed", "Zoe")


def draw_opponent(style: str, rng) -> dict:
    """A spec of kind `style` with every exploitable parameter drawn from `RANGES` by `rng`."""
    spec = {"style": style}
    for name, (low, high) in RANGES[style].items():
        spec[name] = int(rng.integers(low, high + 1)) if isinstance(low, int) else round(float(rng.uniform(low, high)), 3)
    return spec


def make_opponent(spec: dict) -> Policy:
    """Build an opponent from its YAML spec: {style: ..., <threshold>: value, ...}."""
    spec = dict(spec)
    spec.pop("name", None)  # the name shown at the table, not a policy parameter
    style = spec.pop("style", None)
    if style not in STYLES:
        raise ValueError(f"unknown opponent style {style!r}; known: {sorted(STYLES)}")
    cls = STYLES[style]
    known = {f.name for f in fields(cls)}
    unknown = set(spec) - known
    if unknown:
        raise ValueError(f"{style}: unknown parameters {sorted(unknown)}; known: {sorted(known)}")
    return cls(**spec)
