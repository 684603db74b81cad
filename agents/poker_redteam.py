"""Poker's red team: memoryless, opponent-blind policy families (`PokerEnv.policy_families`).

Each family is a parametric `Policy` on the public table (`info["table"]`) played by
`FamilyAgent`: it reads its own cards, the board and this hand's betting at most, never the
opponent's name and nothing from earlier hands. `clbench redteam` plays every point of a
family's grid stateless, chooses each family's point on re-deals of the world and sets its mean on
the benchmark's hands beside the stateless reference's, which none may reach (tests/test_poker.py).

- `BetSizing` (card-blind): raise `fraction` of the pot whenever allowed, at most `cap` raises
  per street, else check or call; facing a raise after its own bet it calls or folds (`fold`).
- `Thresholds` (hand strength): preflop raise / call by the hand's percentile, after the flop bet
  and raise with a made-hand tier, call with a lower tier (or a draw), fold the rest.
- `CheckCall` (check/call lines): never bet; call preflop with the top `pre_call` share and
  after the flop with `call_tier` or better (-1: call everything).
- `BetGiveUp` (bet/give-up lines): raise preflop, bet the first `streets` streets after the flop
  at every chance, and give up (fold) to any bet or raise without `keep_tier`.
- `ValueBluff` (a card-, position- and bet-size-aware line): opens the top `open_pct` of its buttons,
  defends the top `defend_pct` of its big blinds; after the flop bets `value_tier` or better and
  draws, bluffs a fixed share (`bluff`) of the other flops and turns, calls bets up to half the pot
  with `small_tier`, bigger ones with `big_tier`, and folds to a raise of its bet without a strong hand.
- `PushFold` (preflop only): all-in with the top `push_pct` of its hands, fold (or check) the rest.
- `HandReader` (reads the kind in the hand): plays the stateless line until this hand's betting hints
  at what kind of player the opponent is (a preflop raise, then a checked or bet flop), then the
  playbook its grid maps that situation to: memoryless, and on Poker-v6, whose kinds' tells were
  certain, above the learning reference (issue 29). On v7 each kind mixes its visible moves and the
  stateless reference is itself a reader (`agents.poker.ReadingPlay`), so a read tuned on the world is
  what this family tests.
- `likelihood_reader` (`ReadingPlay`, the reference's own in-hand read from the uniform prior): at other
  thresholds (`confident`) than the stateless reference's.
- `KindThresholds` (`kind_thresholds`, in `FRESH_WORLD_FAMILIES`, not a declared family): the likelihood reader
  with a belief threshold per kind (red team rt7).
- `SizeReader` (reads the kind by the opponent's bet sizes too): the likelihood reader whose likelihood also
  weighs each raise's size by how much each kind bets on the train split (`size_tells`). Red team rt7: on the
  first v7 build each kind bet its own sizes and this read led the stateless reference by +0.24 +- 0.08
  bb/hand over 200 held-out canonical deals; since then every kind draws its sizes alike.

`replay(env, policy)` plays a family point on the env's own schedule and opponents on the betting
model (`betting.Betting`, which tests check agrees with the library move for move) without the
runner: the same chips as the env, some thousand times faster, so `search` can sweep grids far
larger than the runner's (the widest search of issue 28). It reads the env's opponents: a tool
for measuring the red team, never an agent. `hands(env, k)` is the world's k-th deal: deals
0 .. deals-1 are the benchmark's (rollout seed s plays deal s % deals), later ones re-deal the same
seats and opponents with other cards, so `replay`/`search` can measure a point's expected play apart
from its luck on the benchmark's hands; `choose` picks each family's point on held-out deals (the red
team's choice, never on the scored hands); `train_choice` picks it on the train worlds and freezes it, the
memoryless policy a fresh world is judged against (issue 29: `PokerFreshWorlds`, the pooled verdict of
`clbench redteam --pooled-worlds`); `selection` splits a grid's best benchmark mean into that
play and the selection gain of picking the luckiest point on the hands it is scored on.

`deal_env(k)` makes the registered env that plays deal k through the runner (where `clbench.runner`'s
`stateful_instances` / `stateless_instances` play the reference in the runner's two modes, one hand at a time:
the measuring scripts of tasks/poker/, board_luck.py and world_difficulty.py, read what they measure between
hands).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator

import gymnasium as gym
import numpy as np

from clbench import redteam
from clbench.agent import Agent
from clbench.agents.poker import (BOARD_LEN, CONFIDENT, KINDS, PLAYBOOKS, STATELESS, UNIFORM, PlacedReading,
                                  ReadingPlay, action_text, bet_share, book_for, place_of, posterior, table_spot)
from clbench.envs.poker.betting import Betting
from clbench.envs.poker.policy import CALL, CHECK, RAISE, Decision, Policy, Spot


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


@dataclass(frozen=True)
class ValueBluff(Policy):
    open_pct: float = 0.6
    defend_pct: float = 0.5
    value_tier: int = 3
    bluff: float = 0.0
    fraction: float = 0.66
    small_tier: int = 1
    big_tier: int = 3

    def decide(self, s: Spot) -> Decision:
        st = s.strength
        if s.street == 0:
            if not s.raises:
                if s.to_call:
                    return s.raise_times(2.5) if st.pct >= 1 - self.open_pct else s.check_or_fold()
                return s.raise_times(3.5) if st.pct >= 0.75 else s.check_or_call()
            if st.pct >= 0.92 and s.raises < 4:
                return s.raise_times(3)
            keep = self.defend_pct if s.raises == 1 and s.to_call <= 3 * s.big_blind else self.defend_pct / 2
            return s.check_or_call() if st.pct >= 1 - keep else s.check_or_fold()
        if not s.to_call:
            bluff = s.street < 3 and (st.draw or st.code < 100 * self.bluff)
            return s.bet_pot(self.fraction) if st.tier >= self.value_tier or bluff else s.check_or_call()
        if st.tier >= 5 and s.raises < 3:
            return s.raise_times(3)
        if _my_raises(s):  # our bet met a raise
            return s.check_or_call() if st.tier >= 4 else s.check_or_fold()
        share = bet_share(s)
        keep = st.tier >= (self.small_tier if share <= 0.55 else self.big_tier) or st.draw and s.street < 3 and share <= 0.8
        return s.check_or_call() if keep else s.check_or_fold()


def hand_read(s: Spot) -> str:
    """What this hand's betting so far shows of the opponent, as one of `HandReader`'s situations: "limped"
    (called before the flop without facing a raise of ours), "unseen" (no move yet), "raised" / "called"
    (its preflop moves) then "_checked" / "_bet" by its first flop move where it could bet."""
    raised = limped = False
    flop = ""
    after_bet = -1  # the street on which our bet or raise was the move before, else -1
    for a in s.history:
        if a.mine:
            after_bet = a.street if a.kind == RAISE else -1
            continue
        if a.street == 0:
            raised |= a.kind == RAISE
            limped |= a.kind == CALL and after_bet != 0
        elif a.street == 1 and after_bet != 1 and not flop:
            flop = "_bet" if a.kind == RAISE else "_checked"
        after_bet = -1
    if limped:
        return "limped"
    if not any(not a.mine for a in s.history):
        return "unseen"
    return ("raised" if raised else "called") + flop


@dataclass(frozen=True)
class HandReader(Policy):
    """Reads the opponent's kind off this hand's betting alone and plays the playbook (`PLAYBOOKS`) its
    grid maps that read to: memoryless (red team s17: on v6 a station never raised and a loose-aggressive
    player bet every flop it could, so one hand told the kind). Each field is the playbook for one
    `hand_read`."""

    raised: str = "default"
    raised_checked: str = "default"
    raised_bet: str = "default"
    called: str = "default"
    called_checked: str = "default"
    called_bet: str = "default"

    def decide(self, s: Spot) -> Decision:
        read = hand_read(s)
        book = "default" if read in ("limped", "unseen") else getattr(self, read)
        return PLAYBOOKS[book].decide(s)


#: size bins per situation of an opponent raise: preflop in times the bet faced (at least the big blind), after
#: the flop a bet into a checked street as a share of the pot
SIZE_BINS = {"pre": np.linspace(2.0, 4.5, 11), "flop": np.linspace(0.2, 1.2, 11), "late": np.linspace(0.2, 1.2, 11)}


def opponent_sizes(history, button: bool, big_blind: int) -> Iterator[tuple[str, float]]:
    """("pre" | "flop" | "late", size) of each opponent raise in a hand's betting (`Spot.history`) that
    `SIZE_BINS` sizes (raises of our bets after the flop are left out: every kind raises those three times)."""
    b = Betting(0 if button else 1, 1 << 30, big_blind // 2, big_blind)
    for a in history:
        if not a.mine and a.kind == RAISE:
            facing = b.bets[0]  # our bet on this street: what the opponent raised
            if a.street == 0:
                yield "pre", a.total / (facing if facing > big_blind else big_blind)
            elif not facing:
                yield ("flop" if a.street == 1 else "late"), a.total / (b.pot or 1)
        b.apply(Decision(a.kind, a.total))


#: the train split's worlds an attacker (and tasks/poker/fit_reference.py) studies: the canonical seed's and 24 more
TRAIN_WORLDS = (None, *range(1, 25))


def train_worlds() -> list:
    """The registered Poker env's train split in each of `TRAIN_WORLDS`."""
    from clbench.registry import env_class, env_id_for  # the env by its registered id: agents import no env module

    cls = env_class(env_id_for("poker"))
    return [cls(split="train", world_seed=w) for w in TRAIN_WORLDS]


def line_hands(envs, deals: int) -> Iterator[tuple[str, tuple, bool, object]]:
    """(the opponent's kind, the hand's betting, our button, env) of every hand of `envs` dealt `deals` times,
    played by the reference's line: the one walk over the train split that what each kind shows is counted on
    (its moves: fit_reference.tells; its sizes: `size_tells`)."""
    for env in envs:
        for k in range(deals):
            for _, cards, button, opponent in hands(env, k):
                yield opponent.style, play_hand(env, cards, button, PLAYBOOKS["default"], opponent)[1], button, env


@lru_cache(maxsize=1)
def size_tells(deals: int = 5) -> dict[str, np.ndarray]:
    """log P(size bin | kind) of the opponents' raises by situation (rows: `KINDS`), over the train split's
    worlds played by the reference's line: what each kind bets, as an attacker who studied the train split
    knows it (add-one smoothing: no size is impossible for a kind)."""
    counts = {sit: np.ones((len(KINDS), len(edges) + 1)) for sit, edges in SIZE_BINS.items()}
    for kind, seen, button, env in line_hands(train_worlds(), deals):
        for sit, size in opponent_sizes(seen, button, env.big_blind):
            counts[sit][KINDS.index(kind), np.searchsorted(SIZE_BINS[sit], size)] += 1
    return {sit: np.log(c / c.sum(axis=1, keepdims=True)) for sit, c in counts.items()}


def size_log_likelihood(s: Spot) -> np.ndarray:
    """log P(the opponent's raise sizes in this hand | kind), by the train split's sizes (`size_tells`)."""
    tells, total = size_tells(), np.zeros(len(KINDS))
    for sit, size in opponent_sizes(s.history, s.button, s.big_blind):
        total += tells[sit][:, np.searchsorted(SIZE_BINS[sit], size)]
    return total


@dataclass(frozen=True)
class SizeReader(Policy):
    """The likelihood reader (`ReadingPlay` from the uniform prior) that also reads the opponent's raise sizes (`size_log_likelihood`): memoryless and
    opponent-blind, it knows how much each kind bets as the train split shows it (red team rt7: on Poker-v7.0
    each canonical kind raised by its own sizes, which tasks/poker/default.yaml published, and a size reader led
    the stateless reference by +0.24 +- 0.08 bb/hand; since then every kind draws its sizes alike)."""

    confident: float = CONFIDENT

    def decide(self, s: Spot) -> Decision:
        return book_for(posterior(UNIFORM, s.history, size_log_likelihood(s)), self.confident).decide(s)


@dataclass(frozen=True)
class KindThresholds(Policy):
    """The likelihood reader (`ReadingPlay` from the uniform prior) with a threshold per kind: it plays the exploit of
    the kind the hand's read holds likeliest once that belief reaches the kind's own threshold (the reference uses one,
    `CONFIDENT`, for all three). Red team rt7: tuned on the train worlds and frozen, it led the stateless reference
    pooled over fresh worlds (tests/test_poker.py)."""

    calling_station: float = CONFIDENT[0]
    fit_or_fold: float = CONFIDENT[1]
    loose_aggressive: float = CONFIDENT[2]

    def decide(self, s: Spot) -> Decision:
        belief = posterior(UNIFORM, s.history)
        kind = KINDS[belief.index(max(belief))]
        return PLAYBOOKS[kind if max(belief) >= getattr(self, kind) else "default"].decide(s)


@dataclass(frozen=True)
class PushFold(Policy):
    push_pct: float = 0.5

    def decide(self, s: Spot) -> Decision:
        if s.street == 0 and s.strength.pct >= 1 - self.push_pct:
            return s.raise_to(s.max_raise) if s.max_raise else s.check_or_call()
        return s.check_or_call() if s.street and not s.to_call else s.check_or_fold()


def benchmark_deals(env) -> range:
    """The deals the benchmark plays (`env.deals`: rollout seed s plays deal s % deals)."""
    return range(type(env).deals)


def held_out_deals(env, start: int = 1, count: int | None = None) -> range:
    """`count` deals (default: as many as the benchmark plays) from the `start`-th copy of the benchmark's
    deals on: never a deal the benchmark scores, so a point chosen or judged there is not chosen on its luck."""
    n = type(env).deals
    return range(start * n, start * n + (n if count is None else count))


def hands(env, deal: int = 0) -> list[tuple[str, object, bool, Policy]]:
    """(instance id, deal, agent on the button, opponent policy) of every hand of `env`'s schedule (`env`
    unwrapped) in the world's deal `deal`: 0 .. deals-1 are the benchmark's (rollout seed s plays deal
    s % deals); deal k >= deals keeps the schedule, the seats and the opponents and deals other cards
    (`PokerEnv(redeal=k // deals)`, rollout seed k % deals): what a policy earns there is its play, not its
    luck on the benchmark's cards."""
    if deal == env.deal_index:
        return _hands(env)
    return _dealt(type(env), env.schedule_name, env.split, env.world_seed, int(deal))


def _hands(env) -> list:
    return [(inst.instance_id, inst.payload.deal, inst.payload.agent_button, env.opponents[inst.payload.policy])
            for variant in env.schedule.variants for inst in variant.instances]


@lru_cache(maxsize=1024)  # the exploits' fit replays 25 train worlds x 20 deals
def _dealt(cls, schedule: str, split: str, world_seed, deal: int) -> list:
    """The hands of one deal (built once: searches replay many points on the same deals)."""
    env = cls(schedule=schedule, split=split, world_seed=world_seed, redeal=deal // cls.deals)
    if deal % cls.deals:
        env.reset(seed=deal % cls.deals)
    return _hands(env)


def replay(env, policy: Policy, deal: int = 0, style: str | None = None) -> dict[str, float]:
    """`policy`'s reward (big blinds) on every hand of `env`'s schedule in deal `deal` (`hands`), played on
    the betting model against the env's opponents (`env` unwrapped); `style`: only the hands against
    opponents of that kind."""
    place = places(env)
    return {iid: play_hand(env, cards, button, hero_at(policy, place[iid]), opponent)[0]
            for iid, cards, button, opponent in hands(env, deal) if style is None or opponent.style == style}


@lru_cache(maxsize=256)
def places(env) -> dict[str, int | None]:
    """Each hand id of `env`'s schedule (every deal keeps the ids) to its place, as the reference tells it from the
    hand's number (`poker.place_of`: rollouts permute hands within a variant only, so any order gives the same)."""
    ids = [inst.instance_id for v in env.schedule.variants for inst in v.instances]
    return {iid: place_of(k + 1, len(ids)) for k, iid in enumerate(ids)}


def hero_at(policy: Policy, place: int | None) -> Policy:
    """`policy`'s play at a place of the schedule: a placed policy's (`PlacedReading.at`), else the policy itself."""
    at = getattr(policy, "at", None)
    return policy if at is None else at(place)


def play_hand(env, cards, button: bool, hero: Policy, opponent: Policy) -> tuple[float, tuple]:
    """One hand on the betting model: `hero`'s reward (big blinds) and the hand's betting as the agent saw it."""
    b = Betting(0 if button else 1, env.stack, env.small_blind, env.big_blind)
    holes, board = (cards.agent, cards.opponent), tuple(cards.board)
    players = (hero, opponent)
    while not b.over:
        spot = b.spot(holes[b.to_act], board[:BOARD_LEN[b.street]])
        b.apply(spot.legalize(players[b.to_act].decide(spot)))
    return b.payoff(0, holes, board) / env.big_blind, b.view(0)


def mean_over(env, policy: Policy, deals) -> float:
    """`policy`'s mean reward per hand over the deals `deals` (`replay`)."""
    return float(np.mean([r for k in deals for r in replay(env, policy, k).values()]))


def deal_env(deal: int, **kwargs) -> tuple[gym.Env, int]:
    """(env, rollout seed) that play the world's deal `deal` (`hands`) through the runner: the registered
    Poker env (`kwargs`: e.g. world_seed) re-dealt `deal // deals` times, reset with seed `deal % deals`."""
    from clbench.registry import env_class, env_id_for  # the env by its registered id: agents import no env module

    env_id = env_id_for("poker")
    deals = env_class(env_id).deals
    return gym.make(env_id, redeal=deal // deals, **kwargs), deal % deals


def _policies(families: dict, full: bool):
    import importlib

    for name, fam in families.items():
        module, cls = fam.cls.split(":")
        policy_class = getattr(importlib.import_module(module), cls).policy_class
        for params in fam.points(full):
            yield name, params, policy_class(**params)


def search(env, families: dict, full: bool = True, deals=None) -> list[tuple[float, str, dict]]:
    """(mean reward, family, params) of every point of `families` (clbench.redteam.families of the env
    class), best first, each played by `replay` over `deals` (default: the benchmark's)."""
    deals = benchmark_deals(env) if deals is None else deals
    rows = [(mean_over(env, policy, deals), name, params) for name, params, policy in _policies(families, full)]
    return sorted(rows, key=lambda r: -r[0])


def choose(env, families: dict, full: bool = False, deals=None) -> dict[str, tuple[dict, Policy]]:
    """Each family's point as the red team chooses it without the benchmark's cards: the best mean over
    the deals `deals` (default `held_out_deals(env)`, the first re-deal's copy of the benchmark's deals)
    ({family: (params, policy)}); the verdict plays it on the benchmark's deals. `env` may be a list of
    envs (every world's hands weigh alike: `train_choice`)."""
    envs = env if isinstance(env, (list, tuple)) else [env]
    out = {}
    for name, params, policy in _policies(families, full):
        mean = float(np.mean([mean_over(e, policy, held_out_deals(e) if deals is None else deals) for e in envs]))
        if name not in out or mean > out[name][0]:
            out[name] = (mean, params, policy)
    return {name: (params, policy) for name, (_, params, policy) in out.items()}


#: deals per train world a frozen point is chosen on (`train_choice`): 25 worlds x 2 deals are 6,000 hands, ten times
#: what a choice on one world's re-deals sees
TRAIN_CHOICE_DEALS = 2


#: attacks `train_choice` measures besides the declared families: rt7's per-kind-threshold reader. Not declared
#: (`policy_families`): on the canonical world some of its points play as the reference on every hand of the benchmark
#: and of the re-deals that confirm it, a tie the red team's rule fails, while its lead shows only pooled over fresh
#: worlds (tests/test_poker.py)
FRESH_WORLD_FAMILIES = {
    "kind_thresholds": (f"{__name__}:KindThresholdsAgent", {"calling_station": [0.7, 0.8], "fit_or_fold": [0.5, 0.7],
                                                            "loose_aggressive": [0.7]},
                        {"full_grid": {k: [0.5, 0.6, 0.7, 0.8, 0.9] for k in KINDS}}),
}


@lru_cache(maxsize=2)
def train_choice(full: bool = False, deals: int = TRAIN_CHOICE_DEALS) -> dict[str, tuple[dict, Policy]]:
    """Each family's point (the declared ones and `FRESH_WORLD_FAMILIES`) as an attacker who studied the train split
    writes it down and freezes it: the best mean over deals 0..deals-1 of every train world (`train_worlds`, the
    split's own and train worlds 1-24), never a test-split world. What a memoryless policy written without a fresh
    world plays there (issue 29)."""
    from clbench.registry import env_class, env_id_for

    families = {**redteam.families(env_class(env_id_for("poker"))),
                **{name: redteam.as_family(entry) for name, entry in FRESH_WORLD_FAMILIES.items()}}
    return choose(train_worlds(), families, full, range(deals))


@lru_cache(maxsize=None)
def world_env(world):
    """The registered Poker env's test split in world `world` (None: the canonical one), unwrapped, once per process."""
    from clbench.registry import env_class, env_id_for

    return env_class(env_id_for("poker"))(world_seed=world)


@lru_cache(maxsize=None)
def held_out_per_deal(world, policy: Policy, count: int = 40) -> np.ndarray:
    """`policy`'s mean per hand on each of `count` held-out deals of `world` (from the benchmark's deals' second
    copy on: never a deal the benchmark scores or `choose` looks at), played on the betting model."""
    base = world_env(world)
    return np.array([np.mean(list(replay(base, policy, d).values())) for d in held_out_deals(base, start=2, count=count)])


def frozen_deals(full: bool = False) -> int:
    """Held-out deals per world a frozen point's lead is judged on: 200 for the full verdict (40 leave
    kind_thresholds' +0.016 lead at z 1.6), 40 by default (the per-world verdict's own, whose reference replays
    `held_out_per_deal` keeps)."""
    return 200 if full else 40


#: the test split's world seeds a generator-tuned prior is counted on: never a world a verdict judges
GENERATOR_WORLDS = range(1001, 1401)


@lru_cache(maxsize=None)
def place_priors(worlds: tuple = tuple(GENERATOR_WORLDS)) -> tuple[tuple[float, ...], ...]:
    """For each place of the default schedule (its variants in order), how often the world generator seats a player
    of each kind there (`KINDS` order, add-one smoothed) over the test split's `worlds`: the prior of a memoryless
    policy that knows the public generator and reads a hand's place off its number (issue 29). A place whose kinds
    the generator does not draw alike tells such a policy something the uniform prior of the stateless reference
    does not know."""
    counts = np.ones((len(world_env(None).schedule.variants), len(KINDS)))
    for w in worlds:
        base = world_env(w)
        for i, variant in enumerate(base.schedule.variants):
            counts[i, KINDS.index(base.opponents[variant.instances[0].payload.policy].style)] += 1
    return tuple(tuple(float(x) for x in row / row.sum()) for row in counts)


def place_policy() -> PlacedReading:
    """The one-hand read from `place_priors` at each hand's place: `PLACE_PRIOR`'s play."""
    return PlacedReading(priors=place_priors())


#: the pooled verdict's generator-tuned row (issue 29): the reference's own one-hand read, each place's hands read from
#: `place_priors` instead of the uniform prior. Not a train-chosen family: its prior is counted on other test worlds
PLACE_PRIOR = "place_prior"


class PokerFreshWorlds(redteam.FreshWorldJudge):
    """Poker's fresh-world verdict: each family's point (the declared ones and `FRESH_WORLD_FAMILIES`) chosen on the
    train worlds (`train_choice`), frozen, and its lead per hand over the stateless reference on `frozen_deals`
    held-out deals of each fresh world (`held_out_per_deal`); and `PLACE_PRIOR`, the read whose prior knows how the
    public generator seats the kinds (`place_priors`), which the train split, drawn apart from the canonical world,
    cannot teach."""

    task = "poker"
    #: a point chosen on a fresh world's own re-deals: its lead over r_reference at most this (bb/hand): the canonical
    #: world's best lead in expectation (-0.16) plus the top of tests/test_poker.py's BEST_LEAD_BAND (0.75)
    world_band = 0.59

    def families(self, full: bool = False) -> dict[str, redteam.PolicyFamily]:
        return {**super().families(full),
                **{name: redteam.as_family(entry) for name, entry in FRESH_WORLD_FAMILIES.items()}}

    def choose(self, full: bool = False) -> dict[str, dict]:
        chosen = {name: params for name, (params, _) in train_choice(full).items()}
        return {**chosen, PLACE_PRIOR: {"prior": f"each place's kinds over test worlds {GENERATOR_WORLDS.start}-"
                                                 f"{GENERATOR_WORLDS.stop - 1}"}}

    def policy(self, family: str, params: dict) -> Policy:
        from clbench.agent import load_object

        return load_object(self.families()[family].cls).policy_class(**params)

    def leads(self, world: int, chosen: dict[str, dict], full: bool = False) -> dict[str, float]:
        count = frozen_deals(full)
        ref = held_out_per_deal(world, STATELESS, count)
        return {name: float((held_out_per_deal(world, place_policy() if name == PLACE_PRIOR else
                                               self.policy(name, params), count) - ref).mean())
                for name, params in chosen.items()}


def selection(env, families: dict, reference: Policy, redeals: int = 8, full: bool = True) -> dict:
    """How much of a grid's best mean is its play and how much the choice of the luckiest point.

    Every point and `reference` are played on the benchmark's deals (their mean: column 0) and on `redeals`
    held-out deals. A point's expected value is estimated by its mean over the held-out deals; on each of
    them the grid's maximum exceeds the point with the best mean over the *other* held-out deals by the
    *selection gain* (choosing a point on the same hands it is scored on), which a reference must out-earn
    on top of the best point's play to stay above every grid point on every world."""
    points = [(name, params, policy) for name, params, policy in _policies(families, full)]
    sets = [benchmark_deals(env), *([k] for k in held_out_deals(env, count=redeals))]
    means = np.array([[mean_over(env, policy, d) for d in sets] for _, _, policy in points])
    ref = np.array([mean_over(env, reference, d) for d in sets])
    expected = means[:, 1:].mean(axis=1)
    best = int(np.argmax(expected))
    top = means.max(axis=0)
    gains = []
    for k in range(1, redeals + 1):  # the best point as the other re-deals show it, scored on this one
        others = [j for j in range(1, redeals + 1) if j != k] or [k]
        gains.append(top[k] - means[int(np.argmax(means[:, others].mean(axis=1))), k])
    return {"best_point": points[best][:2], "best_expected": float(expected[best]),
            "reference_expected": float(ref[1:].mean()),
            "benchmark_max": float(top[0]), "benchmark_best_point": float(means[best, 0]),
            "benchmark_reference": float(ref[0]),
            "selection_gain": float(np.mean(gains)), "selection_gain_max": float(np.max(gains)),
            "max_minus_reference": [float(x) for x in top - ref]}


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


class ValueBluffAgent(FamilyAgent):
    policy_class = ValueBluff


class PushFoldAgent(FamilyAgent):
    policy_class = PushFold


class HandReaderAgent(FamilyAgent):
    policy_class = HandReader


class LikelihoodReaderAgent(FamilyAgent):
    policy_class = ReadingPlay  # the reference's own read from the uniform prior, at the grid's `confident`


class SizeReaderAgent(FamilyAgent):
    policy_class = SizeReader


class KindThresholdsAgent(FamilyAgent):
    policy_class = KindThresholds


FRESH_WORLD_JUDGE = PokerFreshWorlds()
