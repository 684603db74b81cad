"""Poker's red team: memoryless, opponent-blind policy families (`PokerEnv.policy_families`).

Each family is a parametric `Policy` on the public table (`info["table"]`) played by
`FamilyAgent`: it reads its own cards, the board and this hand's betting at most, never the
opponent's name and nothing from earlier hands. `clbench redteam` plays every point of a
family's grid stateless and sets its mean beside the stateless reference's, which none should
reach (tests/test_poker.py; on Poker-v2's opponents card-blind lines still do: issue 28).

- `BetSizing` (card-blind): raise `fraction` of the pot whenever allowed, at most `cap` raises
  per street, else check or call; facing a raise after its own bet it calls or folds (`fold`).
- `Thresholds` (hand strength): preflop raise / call by the hand's percentile, after the flop bet
  and raise with a made-hand tier, call with a lower tier (or a draw), fold the rest.
- `CheckCall` (check/call lines): never bet; call preflop with the top `pre_call` share and
  after the flop with `call_tier` or better (-1: call everything).
- `BetGiveUp` (bet/give-up lines): raise preflop, bet the first `streets` streets after the flop
  at every chance, and give up (fold) to any bet or raise without `keep_tier`.
"""
from __future__ import annotations

from dataclasses import dataclass

from clbench.agent import Agent
from clbench.agents.poker import action_text, table_spot
from clbench.envs.poker.policy import CHECK, Decision, Policy, Spot


def _my_raises(s: Spot) -> int:
    return sum(1 for a in s.history if a.mine and a.street == s.street and a.kind == "RAISE")


@dataclass(frozen=True)
class BetSizing(Policy):
    fraction: float = 0.5
    cap: int = 9
    fold: bool = False

    def decide(self, s: Spot) -> Decision:
        mine = _my_raises(s)
        if self.fold and mine and s.to_call:
            return s.check_or_fold()
        if s.max_raise and mine < self.cap:
            return s.raise_to(s.min_raise) if self.fraction <= 0 else s.bet_pot(self.fraction)
        return s.check_or_call()


@dataclass(frozen=True)
class Thresholds(Policy):
    pre_raise: float = 0.7
    pre_call: float = 0.3
    bet_tier: int = 4
    call_tier: int = 2
    fraction: float = 0.66

    def decide(self, s: Spot) -> Decision:
        st = s.strength
        if s.street == 0:
            if st.pct >= self.pre_raise and s.raises < 3:
                return s.raise_times(3)
            return s.check_or_call() if st.pct >= self.pre_call else s.check_or_fold()
        if st.tier >= self.bet_tier and s.raises < 2:
            return s.bet_pot(self.fraction)
        keep = st.tier >= self.call_tier or (st.draw and s.street < 3)
        return s.check_or_call() if keep else s.check_or_fold()


@dataclass(frozen=True)
class CheckCall(Policy):
    pre_call: float = 0.5
    call_tier: int = 1

    def decide(self, s: Spot) -> Decision:
        if s.street == 0:
            return s.check_or_call() if s.strength.pct >= 1 - self.pre_call else s.check_or_fold()
        return s.check_or_call() if s.strength.tier >= self.call_tier else s.check_or_fold()


@dataclass(frozen=True)
class BetGiveUp(Policy):
    fraction: float = 0.66
    streets: int = 3
    keep_tier: int = 5

    def decide(self, s: Spot) -> Decision:
        st = s.strength
        if s.street == 0:
            if not s.raises or (s.raises == 1 and not _my_raises(s)):
                return s.raise_times(3)
            return s.check_or_call() if st.pct >= 0.85 else s.check_or_fold()
        if not s.to_call:
            return s.bet_pot(self.fraction) if s.street <= self.streets else s.check_or_call()
        return s.check_or_call() if st.tier >= self.keep_tier else s.check_or_fold()


class FamilyAgent(Agent):
    """Plays one family point: `Cls(card, seed=..., latent=None, **params)` as the red team builds it."""

    name = "redteam"
    deterministic = True
    policy_class: type[Policy] = Policy

    def __init__(self, card, seed: int = 0, latent=None, **params):
        super().__init__(card, seed=seed)
        self.policy = self.policy_class(**params)

    def act(self, observation: str, info: dict) -> str:
        table = info["table"]
        if table["over"]:
            return CHECK
        spot = table_spot(table)
        return action_text(spot.legalize(self.policy.decide(spot)))


class BetSizingAgent(FamilyAgent):
    policy_class = BetSizing


class ThresholdsAgent(FamilyAgent):
    policy_class = Thresholds


class CheckCallAgent(FamilyAgent):
    policy_class = CheckCall


class BetGiveUpAgent(FamilyAgent):
    policy_class = BetGiveUp
