"""Scripted agents for Poker-v9: `PokerReference` (learns each named opponent) and `PokerOracle`.

Both read `info["table"]` (the public state the observation shows) and play `PLAYBOOKS`: one
parametric line (`DefaultPlay`: preflop ranges, value and bluff shares, bet sizes, calling
thresholds by bet size) with one set of parameters for playing any opponent (`REFERENCE_PARAMS`)
and one per opponent kind (`EXPLOIT_PARAMS`), all fitted on the train split's worlds
(tasks/poker/fit_reference.py): the first on every hand, each exploit on the hands against its
kind (over 20 deals per world: on 3 the search fitted noise). What an exploit wins against its kind
it loses against another (bluffs that take pots from a fit-or-fold player are called by a station;
thin value that a station pays is wasted on fit-or-fold; checking strong hands to let a
loose-aggressive player bet, and calling its barrels, pays only against it: a station seldom bets).

- reference: holds a belief per opponent name, P(kind) for the three kinds, and reads it like a
  hidden Markov filter: after every hand it multiplies in the likelihood of the opponent's moves
  (`TELLS`: each kind's moves' shares by situation, fitted on the train worlds, so what a kind does on
  average and never one world's values) and lets it drift by `HAZARD` (a player may change kind).
  Within a hand it reads the moves so far the same way (`posterior`) and plays the exploit of a kind
  the read gives at least its threshold (`CONFIDENT`, one per kind), else the line. Stateless (a fresh agent per hand) its prior is
  uniform: it is then the best one-hand reader its model makes, so a learner must out-earn what one
  hand's betting tells (the red team's `likelihood_reader` and `hand_reader` families read otherwise).
  `freeze_at=K` (for `clbench drift-check`): from position K on it stops updating its beliefs
  (it still reads each hand) and keeps what they were at K.
- oracle: knows each opponent's exact policy (`latent`) but not the hidden cards. At every
  decision it keeps the opponent holdings consistent with the policy and the actions seen so
  far, samples them with the unseen board cards, and plays each candidate action out on a
  betting model (its own exploit afterwards, the opponent's true policy), choosing the action
  with the best mean chip result (the exploit's own choice unless another is clearly better).
"""
from __future__ import annotations

import bisect
import math
import zlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from clbench.agent import Agent
from clbench.envs.poker.betting import Betting
from clbench.envs.poker.cards import FULL_DECK, parse_cards
from clbench.envs.poker.opponents import make_opponent
from clbench.envs.poker.policy import CHECK, RAISE, Act, Decision, Memo, Policy, Spot, bet_share
from clbench.envs.poker.strength import all_combos
from clbench.envs.poker.table import STREETS

BOARD_LEN = (0, 3, 4, 5)
_STREET_NO = {name: i for i, name in enumerate(STREETS)}
_new = tuple.__new__
#: a table's card names (as a tuple) -> its cards: one dict lookup instead of one per card (every decision)
_CARDS = Memo(parse_cards).__getitem__
STATION, FIT_OR_FOLD, LAG = "calling_station", "fit_or_fold", "loose_aggressive"


# ------------------------------------------------------------------ reading the table
def hand_cards(table: dict) -> tuple[tuple, tuple]:
    return _CARDS(tuple(table["hole"])), _CARDS(tuple(table["board"]))


def table_acts(table: dict) -> list[tuple[int, int, str, int]]:
    """The hand's betting as (street, player, kind, total); the agent is player 0."""
    return [(_STREET_NO[st], 0 if who == "you" else 1, kind, total) for st, who, kind, total in table["history"]]


def replay(table: dict) -> Betting:
    """The betting model at the current point of the hand."""
    b = Betting(0 if table["button"] else 1, table["stack"], *table["blinds"])
    for _, _, kind, total in table_acts(table):
        b.apply(Decision(kind, total))
    return b


#: a betting-history entry [street, who, kind, total] of the table (as a tuple) as an `Act`: a hand's entries
#: recur at every later decision (tuple.__new__: an Act without NamedTuple's slower __new__)
_ACT_OF = Memo(lambda e: _new(Act, (_STREET_NO[e[0]], e[1] == "you", e[2], e[3]))).__getitem__


def table_spot(table: dict) -> Spot:
    # all in C but the first sight of an entry (this runs at every decision)
    history = tuple(map(_ACT_OF, map(tuple, table["history"])))
    return Spot(_CARDS(tuple(table["hole"])), _CARDS(tuple(table["board"])), table["pot"], table["to_call"],
                table["my_bet"], table["my_stack"], table["opp_stack"], table["min_raise"], table["max_raise"],
                table["button"], table["blinds"][1], history)


def action_text(d: Decision) -> str:
    return f"RAISE {d.total}" if d.kind == RAISE else d.kind


# ------------------------------------------------------------------ playbooks
@dataclass(frozen=True)
class DefaultPlay(Policy):
    """A sound, opponent-agnostic line: opens and defends by hand percentile, bets made hands and
    draws and a fixed share of its other hands, calls bets by their size and its hand. Its default
    parameters are the playbooks' base; `REFERENCE_PARAMS` (fitted on the train split's worlds:
    tasks/poker/fit_reference.py) is the stateless reference's line."""

    name = "default"
    open_at: float = 0.45  # button: raise hands at or above this percentile, fold the rest
    iso_at: float = 0.7  # big blind after a limp: raise from here
    defend_at: float = 0.5  # call a small raise (to at most 3.5 big blinds) from here
    defend_big_at: float = 0.7  # call a bigger raise from here
    threebet_at: float = 0.92
    cbet: int = 50  # share (of 100) of flops it bets as the preflop raiser without a hand
    bluff: int = 0  # share (of 100) of its other hands it bets on the flop and turn when checked to
    river_bluff: int = 0  # ... and on the river (hands without a pair)
    value_tier: int = 3  # bet this tier or better (the river: `river_tier`)
    river_tier: int = 4
    bet_small: float = 0.5
    bet_big: float = 0.66  # tier 4 or better
    raise_tier: int = 5  # raise a bet with this tier or better
    mid_share: float = 0.7  # call bets up to this share of the pot with middle pair (flop, turn)
    top_share: float = 1.0  # ... and with top pair, weak kicker
    draw_share: float = 0.3  # ... and with a draw (share of the pot after calling)
    weak_share: float = 0.0  # ... and with bottom pair or nothing
    catch_tier: int = 9  # call any bet with this tier or better (9: never)
    trap_tier: int = 9  # flop and turn, checked to: check this tier or better, to call or raise a bet (9: never)

    def decide(self, s: Spot) -> Decision:
        return self.preflop(s) if s.street == 0 else self.postflop(s)

    def preflop(self, s: Spot) -> Decision:
        pct, raises = s.strength.pct, s.raises
        if not raises:
            if s.to_call:
                return s.raise_times(2.5) if pct >= self.open_at else s.check_or_fold()
            return s.raise_times(3.5) if pct >= self.iso_at else s.check_or_call()
        if raises == 1:
            if pct >= self.threebet_at:
                return s.raise_times(3)
            small = s.my_bet + s.to_call <= 3.5 * s.big_blind
            return s.check_or_call() if pct >= (self.defend_at if small else self.defend_big_at) else s.check_or_fold()
        if pct >= 0.96 and raises < 4:
            return s.raise_times(2.5)
        return s.check_or_call() if pct >= 0.85 else s.check_or_fold()

    def postflop(self, s: Spot) -> Decision:
        st = s.strength
        river = s.street == 3
        if not s.to_call:
            if not river and st.tier >= self.trap_tier:  # against a player who bets when checked to
                return s.check_or_call()
            if st.tier >= (self.river_tier if river else self.value_tier):
                return s.bet_pot(self.bet_big if st.tier >= 4 else self.bet_small)
            if river:
                return s.bet_pot(self.bet_small) if st.tier <= 0 and st.code < self.river_bluff else s.check_or_call()
            if st.draw or s.aggressor and s.street == 1 and st.code < self.cbet or st.code < self.bluff:
                return s.bet_pot(self.bet_small)
            return s.check_or_call()
        if st.tier >= self.raise_tier and s.raises < 3:
            return s.raise_times(3)
        share = bet_share(s)
        keep = (st.tier >= 4 or st.tier >= self.catch_tier or st.tier == 3 and share <= self.top_share
                or st.tier == 2 and not river and share <= self.mid_share or share <= self.weak_share
                or st.draw and not river and s.to_call <= self.draw_share * (s.pot + s.to_call))
        return s.check_or_call() if keep else s.check_or_fold()


#: the stateless reference's line (`DefaultPlay`'s parameters), fitted on the train split's worlds by
#: tasks/poker/fit_reference.py (tests/test_poker.py checks that refitting reproduces it)
REFERENCE_PARAMS: dict = {
    "open_at": 0.0, "iso_at": 0.5, "defend_at": 0.1, "defend_big_at": 0.7,
    "threebet_at": 0.7, "cbet": 75, "bluff": 30, "river_bluff": 0, "value_tier": 1, "river_tier": 1,
    "bet_small": 1.0, "bet_big": 1.0, "raise_tier": 3, "mid_share": 1.0, "top_share": 1.0, "draw_share": 0.4,
    "weak_share": 0.3, "catch_tier": 1, "trap_tier": 9}

#: each kind's exploit (`DefaultPlay`'s parameters), fitted by the same search on the train worlds' hands
#: against opponents of that kind only, over more deals (tasks/poker/fit_reference.py --exploits)
EXPLOIT_PARAMS: dict[str, dict] = {
    STATION: {"open_at": 0.0, "iso_at": 0.5, "defend_at": 0.1, "defend_big_at": 0.7, "threebet_at": 0.8, "cbet": 75,
              "bluff": 0, "river_bluff": 0, "value_tier": 1, "river_tier": 1, "bet_small": 1.0, "bet_big": 1.0,
              "raise_tier": 3, "mid_share": 1.0, "top_share": 1.0, "draw_share": 0.4, "weak_share": 0.8,
              "catch_tier": 1, "trap_tier": 9},
    FIT_OR_FOLD: {"open_at": 0.0, "iso_at": 0.5, "defend_at": 0.1, "defend_big_at": 0.7, "threebet_at": 0.7,
                  "cbet": 100, "bluff": 45, "river_bluff": 30, "value_tier": 1, "river_tier": 4, "bet_small": 0.33,
                  "bet_big": 1.0, "raise_tier": 5, "mid_share": 0.0, "top_share": 0.5, "draw_share": 0.0,
                  "weak_share": 0.0, "catch_tier": 9, "trap_tier": 9},
    LAG: {"open_at": 0.2, "iso_at": 0.85, "defend_at": 0.1, "defend_big_at": 0.7, "threebet_at": 0.92, "cbet": 100,
          "bluff": 45, "river_bluff": 30, "value_tier": 1, "river_tier": 4, "bet_small": 1.5, "bet_big": 0.66,
          "raise_tier": 3, "mid_share": 0.7, "top_share": 1.0, "draw_share": 0.4, "weak_share": 0.3, "catch_tier": 9,
          "trap_tier": 3},
}

PLAYBOOKS: dict[str, Policy] = {"default": DefaultPlay(**REFERENCE_PARAMS),
                                **{style: DefaultPlay(**params) for style, params in EXPLOIT_PARAMS.items()}}


# ------------------------------------------------------------------ opponent modelling
KINDS = (STATION, FIT_OR_FOLD, LAG)


def opponent_moves(acts) -> Iterator[str]:
    """The opponent's moves in a hand's betting (`Spot.history`) as tell keys "<street><o|f><KIND>":
    "o" where it could open (nothing to face but the blinds), "f" where it faced our bet or raise."""
    after_bet = -1  # the street on which our bet or raise was the move before, else -1
    for street, mine, kind, _ in acts:
        if mine:
            after_bet = street if kind == RAISE else -1
            continue
        yield f"{street}{'f' if after_bet == street else 'o'}{kind}"
        after_bet = -1


#: P(move | kind) of each tell key (`opponent_moves`), for the kinds in `KINDS` order: the moves' shares
#: in each situation ("<street><o|f>") over the train split's worlds, against the reference's own play
#: (tasks/poker/fit_reference.py --tells). Each kind's parameters are drawn per world, so these are what a
#: kind does on average, never one world's values; a key not here says nothing.
TELLS: dict[str, tuple[float, float, float]] = {
    '0fCALL': (0.9996, 0.1578, 0.4399),
    '0fFOLD': (0.0002, 0.789, 0.2494),
    '0fRAISE': (0.0002, 0.0533, 0.3107),
    '0oCALL': (0.7479, 0.1055, 0.1686),
    '0oFOLD': (0.0003, 0.4439, 0.1767),
    '0oRAISE': (0.2518, 0.4506, 0.6548),
    '1fCALL': (0.9995, 0.1275, 0.4542),
    '1fFOLD': (0.0002, 0.8333, 0.4778),
    '1fRAISE': (0.0002, 0.0392, 0.068),
    '1oCHECK': (0.6934, 0.6457, 0.2351),
    '1oRAISE': (0.3066, 0.3543, 0.7649),
    '2fCALL': (0.9995, 0.3175, 0.4364),
    '2fFOLD': (0.0003, 0.5766, 0.4847),
    '2fRAISE': (0.0003, 0.1058, 0.079),
    '2oCHECK': (0.6957, 0.562, 0.386),
    '2oRAISE': (0.3043, 0.438, 0.614),
    '3fCALL': (0.9993, 0.5469, 0.7353),
    '3fFOLD': (0.0003, 0.2812, 0.2027),
    '3fRAISE': (0.0003, 0.1719, 0.062),
    '3oCHECK': (0.6955, 0.5348, 0.3555),
    '3oRAISE': (0.3045, 0.4652, 0.6445),
}
#: log TELLS, read at every decision (plain floats: numpy costs more than it saves on three numbers)
_LOG_TELLS = {key: tuple(math.log(s) for s in shares) for key, shares in TELLS.items()}
#: a player may change kind between two hands with this probability (the belief's drift: `Belief.observe`);
#: fitted for the stateful reference on the train worlds (tasks/poker/fit_reference.py --reading)
HAZARD = 0.15
#: play a kind's exploit once the belief gives that kind at least its threshold here (in `KINDS` order), else the
#: line; fitted for the stateless reference (one hand's read) on the train worlds (tasks/poker/fit_reference.py
#: --reading). One per kind: a wrong exploit costs more against some kinds than against others, so the evidence
#: worth acting on differs by kind (Poker-v7 used one threshold for all three, and the red team's per-kind reader,
#: frozen on the train split, led it pooled over fresh worlds)
CONFIDENT: tuple[float, float, float] = (0.8, 0.5, 0.7)


def log_likelihood(acts) -> tuple[float, float, float]:
    """log P(the opponent's moves in `acts` | kind), for each kind of `KINDS` (moves taken as independent)."""
    a = b = c = 0.0
    get = _LOG_TELLS.get
    for key in opponent_moves(acts):
        row = get(key)
        if row is not None:
            a, b, c = a + row[0], b + row[1], c + row[2]
    return a, b, c


def posterior(prior, acts, extra=(0.0, 0.0, 0.0)) -> tuple[float, float, float]:
    """P(kind | what was known before the hand, this hand's moves so far), for each kind of `KINDS`; `extra`:
    log-likelihoods of other evidence read in the same hand (the red team's size reader)."""
    logp = [math.log(p) + ll + x for p, ll, x in zip(prior, log_likelihood(acts), extra)]
    top = max(logp)
    p = [math.exp(x - top) for x in logp]
    total = sum(p)
    return p[0] / total, p[1] / total, p[2] / total


UNIFORM = (1 / 3, 1 / 3, 1 / 3)


def book_for(belief, confident=CONFIDENT) -> Policy:
    """The playbook a belief points to: the exploit of the kind it holds likeliest once it holds it at least that
    kind's threshold in `confident` (one per kind, in `KINDS` order, or one number for all), else the line."""
    top = max(belief)
    i = belief.index(top)
    return PLAYBOOKS[KINDS[i]] if top >= (confident if isinstance(confident, (int, float)) else confident[i]) \
        else PLAYBOOKS["default"]


@dataclass(frozen=True)
class ReadingPlay(Policy):
    """The reference's play in one hand: reads the kind from `prior` (what it knew of this opponent before
    the hand: uniform when it has not met it) and the hand's moves so far (`posterior`), and plays
    `book_for` that belief. Stateless, from the uniform prior, it is the best one-hand read the reference's
    model makes, so a learner must out-earn what one hand's betting tells."""

    prior: tuple = UNIFORM
    confident: float | tuple = CONFIDENT  # one threshold for every kind, or one per kind (`book_for`)

    def decide(self, s: Spot) -> Decision:
        return book_for(posterior(self.prior, s.history), self.confident).decide(s)


#: the last hand of each place of the default schedule (its five variants in order; every world plays these counts,
#: and the observation numbers each hand, so a memoryless policy knows a hand's place)
PLACE_ENDS = (40, 60, 70, 110, 120)
#: P(kind) (`KINDS` order) of the player the world generator seats at each place of the default schedule, over the
#: test split's worlds (tasks/poker/fit_reference.py --places: counted on test worlds 1001-1400, never a world a
#: verdict judges). The generator does not seat the kinds alike by place, and its code is public, so a memoryless
#: policy may know this: the reference reads an opponent it has not met from its place's prior (Poker-v9; on v8 a
#: read from these priors led the stateless reference's uniform prior pooled over fresh worlds: red team s22)
PLACE_PRIORS: tuple[tuple[float, float, float], ...] = (
    (0.5682, 0.0025, 0.4293),
    (0.2556, 0.5831, 0.1613),
    (0.4293, 0.0025, 0.5682),
    (0.1588, 0.67, 0.1712),
    (0.2556, 0.5831, 0.1613),
)


def place_of(hand: int, hands: int) -> int | None:
    """The place (0 .. 4) of hand number `hand` (1-based) in a run of `hands` hands; None off the default schedule."""
    return bisect.bisect_left(PLACE_ENDS, hand) if hands == PLACE_ENDS[-1] else None


def prior_at(place: int | None, priors: tuple = PLACE_PRIORS) -> tuple:
    """What the reference knows of a player it has not met at `place` (`priors`, one per place; uniform off the
    default schedule)."""
    return UNIFORM if place is None else priors[place]


@dataclass(frozen=True)
class PlacedReading(Policy):
    """The stateless reference's play: one hand's read (`ReadingPlay`) from the prior of the hand's place (`priors`,
    one per place; uniform off the default schedule). A hand's play needs its place: `at(place)` gives the policy
    for it (`poker_redteam.replay` resolves it per hand)."""

    priors: tuple = PLACE_PRIORS
    confident: float | tuple = CONFIDENT

    def at(self, place: int | None) -> ReadingPlay:
        return ReadingPlay(prior=prior_at(place, self.priors), confident=self.confident)

    def decide(self, s: Spot) -> Decision:
        raise TypeError("PlacedReading plays a hand at a place of the schedule: play `at(place)`")


#: the stateless reference's play (a fresh agent per hand, which has met no opponent): one hand's read from the prior
#: of the hand's place
STATELESS = PlacedReading()


class Belief:
    """What the reference knows of one named opponent: P(kind), updated by Bayes after every hand and
    let drift by `HAZARD` (a hidden Markov filter): a player who changes kind is re-read in a few hands."""

    def __init__(self, p=None, hazard: float | None = None):
        self.p: tuple = UNIFORM if p is None else tuple(float(x) for x in p)
        self.hazard = HAZARD if hazard is None else hazard

    def observe(self, acts) -> None:
        keep, spread = 1 - self.hazard, self.hazard / len(KINDS)
        self.p = tuple(keep * x + spread for x in posterior(self.p, acts))

    def likeliest(self) -> str:
        """The kind the belief holds most probable."""
        return KINDS[self.p.index(max(self.p))]

    def style(self) -> str | None:
        """The kind the belief holds likeliest, once it holds it at least that kind's `CONFIDENT` (None: not clear
        yet)."""
        top = max(self.p)
        i = self.p.index(top)
        return KINDS[i] if top >= CONFIDENT[i] else None


class PokerReference(Agent):
    """Reads every named opponent's kind from what it sees and plays the matching exploit."""

    name = "reference"
    deterministic = True  # plays from its observations only: one stateless pass measures it

    def __init__(self, card, seed: int = 0, latent=None, freeze_at: int | None = None):
        super().__init__(card, seed=seed)
        self.beliefs: dict[str, Belief] = {}
        self.freeze_at = freeze_at

    def act(self, observation: str, info: dict) -> str:
        table = info["table"]
        if table["over"]:
            return CHECK
        spot = table_spot(table)
        belief = self.beliefs.get(table["opponent"])
        prior = prior_at(place_of(table["hand"], table["hands"])) if belief is None else belief.p
        book = book_for(posterior(prior, spot.history))
        d = spot.legalize(book.decide(spot))
        return f"RAISE {d.total}" if d.kind == RAISE else d.kind  # = action_text(d)

    def end_instance(self, reward: float, info: dict) -> None:
        table = info.get("table")
        if self.frozen(info) or not (table and table["over"]):
            return
        belief = self.beliefs.get(table["opponent"])
        if belief is None:
            belief = self.beliefs[table["opponent"]] = Belief(prior_at(place_of(table["hand"], table["hands"])))
        belief.observe(table_spot(table).history)

    def state_dict(self) -> dict:
        return {"beliefs": {name: list(b.p) for name, b in self.beliefs.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.beliefs = {name: Belief(p) for name, p in state["beliefs"].items()}


# ------------------------------------------------------------------ the oracle
class PokerOracle(Agent):
    """Best-responds to the opponent's known policy, without seeing hidden or future cards."""

    name = "oracle"
    deterministic = True  # plays from its observations only: one stateless pass measures it
    privileged = True

    def __init__(self, card, seed: int = 0, latent=None, samples: int = 160, margin_bb: float = 0.25, z: float = 2.0):
        super().__init__(card, seed=seed, latent=latent)
        if not latent:
            raise ValueError("the oracle needs the env's latent structure (make it with make_agent)")
        specs = latent["opponents"]
        self.opponents = {name: make_opponent(spec) for name, spec in specs.items()}
        self.styles = {name: spec["style"] for name, spec in specs.items()}
        self.policies = latent["policies"]  # instance id -> the policy playing that hand
        self.samples, self.margin_bb, self.z = samples, margin_bb, z
        self._posterior: tuple[int, list] = (0, [])

    def begin_instance(self, observation: str, info: dict) -> None:
        self._posterior = (0, [])

    def act(self, observation: str, info: dict) -> str:
        table = info["table"]
        if table["over"]:
            return CHECK
        return action_text(self.decide(table, info["instance_id"]))

    def decide(self, table: dict, instance_id: str) -> Decision:
        policy = self.policies[instance_id]
        opponent, base = self.opponents[policy], PLAYBOOKS[self.styles[policy]]
        hole, board = hand_cards(table)
        betting = replay(table)
        spot = betting.spot(hole, board)
        choice = spot.legalize(base.decide(spot))
        # bets up to the pot: enough to exploit, without staking whole stacks on one sampled guess
        candidates = {choice, spot.check_or_call(), spot.check_or_fold(), spot.bet_pot(0.5), spot.bet_pot(1.0)}
        if len(candidates) == 1:
            return choice
        combos = self.consistent_holdings(table, opponent, hole, board)
        rng = np.random.default_rng([zlib.crc32(instance_id.encode()), len(table["history"])])
        seen = set(hole) | set(board)
        order = sorted(candidates)
        chips = np.zeros((self.samples, len(order)))
        for i in range(self.samples):  # the same sampled cards for every candidate (paired comparison)
            opp = combos[int(rng.integers(len(combos)))]
            rest = [c for c in FULL_DECK if c not in seen and c not in opp]
            runout = board + tuple(rest[j] for j in rng.choice(len(rest), 5 - len(board), replace=False))
            for j, d in enumerate(order):
                chips[i, j] = self.play_out(betting.copy(), d, (hole, opp), runout, base, opponent)
        # leave the exploit only for a clear improvement: mean gain above the margin and z standard errors
        gains = chips - chips[:, [order.index(choice)]]
        mean, se = gains.mean(axis=0), gains.std(axis=0) / np.sqrt(self.samples)
        lower = np.minimum(mean - self.z * se, mean - self.margin_bb * table["blinds"][1])
        best = int(np.argmax(lower))
        return order[best] if lower[best] > 0 else choice

    @staticmethod
    def play_out(b: Betting, first: Decision, holes, board, hero: Policy, opponent: Policy) -> int:
        """The hero's chips after `first` and the rest of the hand with both policies."""
        b.apply(first)
        players = (hero, opponent)
        while not b.over:
            p = b.to_act
            spot = b.spot(holes[p], board[:BOARD_LEN[b.street]])
            b.apply(spot.legalize(players[p].decide(spot)))
        return b.payoff(0, holes, board)

    def consistent_holdings(self, table: dict, opponent: Policy, hole: tuple, board: tuple) -> list:
        """Opponent holdings that would have made every opponent action seen so far (uniform prior)."""
        done, combos = self._posterior
        if not combos:
            combos = all_combos(hole)
        acts = table_acts(table)
        b = Betting(0 if table["button"] else 1, table["stack"], *table["blinds"])
        for i, (street, player, kind, total) in enumerate(acts):
            if player == 1 and i >= done:
                shown = board[:BOARD_LEN[street]]
                seen = (kind, total if kind == RAISE else 0)
                combos = [c for c in combos if not set(c) & set(shown)
                          and self._would_play(b, opponent, c, shown) == seen]
            b.apply(Decision(kind, total))
        combos = [c for c in combos if not set(c) & set(board)]
        if not combos:
            raise RuntimeError("no opponent holding explains the actions seen: the policy model is wrong")
        self._posterior = (len(acts), combos)
        return combos

    @staticmethod
    def _would_play(b: Betting, opponent: Policy, holding: tuple, shown: tuple) -> tuple[str, int]:
        spot = b.spot(holding, shown)
        d = spot.legalize(opponent.decide(spot))
        return d.kind, d.total
