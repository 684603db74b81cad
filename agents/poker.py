"""Scripted agents for Poker-v6: `PokerReference` (learns each named opponent) and `PokerOracle`.

Both read `info["table"]` (the public state the observation shows) and play `PLAYBOOKS`: one
parametric line (`DefaultPlay`: preflop ranges, value and bluff shares, bet sizes, calling
thresholds by bet size) with one set of parameters for playing any opponent (`REFERENCE_PARAMS`)
and one per opponent kind (`EXPLOIT_PARAMS`), all fitted on the train split's worlds
(tasks/poker/fit_reference.py): the first on every hand, each exploit on the hands against its
kind (over 20 deals per world: on 3 the search fitted noise). What an exploit wins against its kind
it loses against another (bluffs that take pots from a fit-or-fold player are called by a station;
thin value that a station pays is wasted on fit-or-fold; checking strong hands to let a
loose-aggressive player bet, and calling its barrels, pays only against it: a station never bets).

- reference, stateful: counts, per opponent name, how often it folds to bets, calls, and
  bets or raises by street, and what it showed down with; once the counts point to a style it
  plays that style's exploit, and remembers it when the opponent returns. When a hand
  contradicts the style (`OpponentModel.contradicted_by`: e.g. a "calling station" folds, bets or
  raises) it drops that opponent's counts and starts over: the opponent has changed. Stateless (a fresh
  agent per hand) it has no counts and plays the default.
  `freeze_at=K` (for `clbench drift-check`): from position K on it stops updating its counts
  and keeps playing what they pointed to at K.
- oracle: knows each opponent's exact policy (`latent`) but not the hidden cards. At every
  decision it keeps the opponent holdings consistent with the policy and the actions seen so
  far, samples them with the unseen board cards, and plays each candidate action out on a
  betting model (its own exploit afterwards, the opponent's true policy), choosing the action
  with the best mean chip result (the exploit's own choice unless another is clearly better).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from clbench.agent import Agent
from clbench.envs.poker.betting import Betting
from clbench.envs.poker.cards import FULL_DECK, parse_cards
from clbench.envs.poker.opponents import make_opponent
from clbench.envs.poker.policy import CALL, CHECK, FOLD, RAISE, Act, Decision, Memo, Policy, Spot, bet_share
from clbench.envs.poker.strength import all_combos, strength
from clbench.envs.poker.table import STREETS

BOARD_LEN = (0, 3, 4, 5)
_STREET_NO = {name: i for i, name in enumerate(STREETS)}
_new = tuple.__new__
#: a table's card names (as a tuple) -> its cards: one dict lookup instead of one per card (every decision)
_CARDS = Memo(parse_cards).__getitem__
# count names, built once (hand_counts runs after every hand)
_FACED = {kind: f"faced_{kind}" for kind in (FOLD, CHECK, CALL, RAISE)}
_OPEN_CHANCES = tuple(f"open_chances_{street}" for street in range(4))
_OPENED = tuple(f"opened_{street}" for street in range(4))
_CONTRADICTING = ("faced_FOLD", "faced_RAISE", *_OPENED)
STATION, FIT_OR_FOLD, LAG = "calling_station", "fit_or_fold", "loose_aggressive"
_UNREAD = object()  # `OpponentModel.style` not read since the counts last changed


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
    "open_at": 0.0, "iso_at": 0.5, "defend_at": 0.6, "defend_big_at": 0.7, "threebet_at": 0.7, "cbet": 100,
    "bluff": 0, "river_bluff": 0, "value_tier": 1, "river_tier": 1, "bet_small": 1.0, "bet_big": 1.0,
    "raise_tier": 3, "mid_share": 1.0, "top_share": 0.5, "draw_share": 0.4, "weak_share": 0.0, "catch_tier": 1,
    "trap_tier": 9}

#: each kind's exploit (`DefaultPlay`'s parameters), fitted by the same search on the train worlds' hands
#: against opponents of that kind only, over more deals (tasks/poker/fit_reference.py --exploits)
EXPLOIT_PARAMS: dict[str, dict] = {
    STATION: {"open_at": 0.0, "iso_at": 0.5, "defend_at": 0.5, "defend_big_at": 0.7, "threebet_at": 0.92,
              "cbet": 100, "bluff": 0, "river_bluff": 0, "value_tier": 1, "river_tier": 1, "bet_small": 1.0,
              "bet_big": 1.0, "raise_tier": 5, "mid_share": 0.7, "top_share": 1.0, "draw_share": 0.3,
              "weak_share": 0.0, "catch_tier": 9, "trap_tier": 9},
    FIT_OR_FOLD: {"open_at": 0.0, "iso_at": 0.7, "defend_at": 0.1, "defend_big_at": 0.7, "threebet_at": 0.7,
                  "cbet": 100, "bluff": 45, "river_bluff": 30, "value_tier": 1, "river_tier": 4, "bet_small": 0.33,
                  "bet_big": 1.0, "raise_tier": 4, "mid_share": 0.0, "top_share": 0.5, "draw_share": 0.0,
                  "weak_share": 0.0, "catch_tier": 9, "trap_tier": 9},
    LAG: {"open_at": 0.2, "iso_at": 0.7, "defend_at": 0.2, "defend_big_at": 0.7, "threebet_at": 0.7, "cbet": 75,
          "bluff": 0, "river_bluff": 0, "value_tier": 3, "river_tier": 4, "bet_small": 0.5, "bet_big": 0.66,
          "raise_tier": 5, "mid_share": 1.0, "top_share": 1.0, "draw_share": 0.4, "weak_share": 0.0, "catch_tier": 1,
          "trap_tier": 3},
}

PLAYBOOKS: dict[str, Policy] = {"default": DefaultPlay(**REFERENCE_PARAMS),
                                **{style: DefaultPlay(**params) for style, params in EXPLOIT_PARAMS.items()}}
#: the playbooks that play otherwise than the reference's line (ids: checked at every decision)
_EXPLOITS = {id(book) for book in PLAYBOOKS.values() if book != PLAYBOOKS["default"]}


# ------------------------------------------------------------------ opponent modelling
def hand_counts(table: dict) -> dict[str, int]:
    """One finished hand's counts of the opponent's behaviour (a plain dict: a Counter runs Python
    code for every key it lacks). A key once counted stays, at 0 when nothing was seen (e.g.
    `sd_weak_calls` after a call without a showdown)."""
    hand = {"hands": 1}
    get = hand.get
    shown = table.get("opp_hole")
    if shown:  # a showdown: the opponent's strengths are read, for its calls and bets after the flop only
        opp_hole, board = _CARDS(tuple(shown)), _CARDS(tuple(table["board"]))
    after_bet = -1  # the street on which our bet or raise was the move before, else -1
    for name, who, kind, _ in table["history"]:  # read as they are (no Act needed: one look-up per entry)
        street = _STREET_NO[name]
        if who != "you":
            weak = False  # shown down with a weak hand
            if shown and street and (kind == CALL or kind == RAISE):
                held = strength(opp_hole, board[:BOARD_LEN[street]])
                weak = held.tier <= 1 and not held.draw
            # stacks are equal, so the opponent faces a bet exactly after our bet or raise on this street
            if after_bet == street:
                hand["faced"] = get("faced", 0) + 1
                key = _FACED[kind]
                hand[key] = get(key, 0) + 1
                hand["sd_weak_calls"] = get("sd_weak_calls", 0) + (weak and kind == CALL)
            else:
                key = _OPEN_CHANCES[street]
                hand[key] = get(key, 0) + 1
                key = _OPENED[street]
                hand[key] = get(key, 0) + (kind == RAISE)
                hand["limped"] = get("limped", 0) + (street == 0 and kind == CALL)
            hand["sd_weak_bets"] = get("sd_weak_bets", 0) + (weak and kind == RAISE)
            after_bet = -1
        else:
            after_bet = street if kind == RAISE else -1
    return hand


class OpponentModel:
    """Counts of one opponent's observed behaviour, and the style they point to."""

    MIN_EVIDENCE = 3  # actions behind a rate
    MIN_HANDS = 4  # hands seen before judging a style (a few hands of cards say little)

    def __init__(self, counts: dict | None = None):
        # a plain dict (a Counter runs Python code for every key it lacks); change it through `observe`,
        # which keeps `style` current
        self.counts: dict[str, int] = dict(counts or {})
        self._style: str | None | object = _UNREAD

    def observe(self, hand: dict) -> None:
        """Add one finished hand's counts (`hand_counts`); when the hand contradicts the style read so far,
        the opponent has changed and what we knew about it is wrong: start over from this hand."""
        if self.contradicted_by(hand):
            self.counts = dict(hand)
        else:
            counts = self.counts
            get = counts.get
            for key, n in hand.items():
                counts[key] = get(key, 0) + n
        self._style = _UNREAD

    def rate(self, hits: str, chances: str) -> float | None:
        get = self.counts.get
        n = get(chances, 0)
        return get(hits, 0) / n if n >= self.MIN_EVIDENCE else None

    def contradicted_by(self, hand: dict) -> bool:
        """One hand's counts (`hand_counts`) show what the style read so far never does: the opponent
        has changed. A calling station never folds, bets or raises; a loose-aggressive player never
        limps and bets every flop it can; a fit-or-fold player never limps and never puts chips in after
        the flop with a weak hand."""
        style = self.style()
        if style == STATION:
            return any(hand.get(k) for k in _CONTRADICTING)
        if style == LAG:
            # a limp shows in half the hands (the opponent's button), a checked flop only when we check to it
            return bool(hand.get("limped")) or hand.get(_OPEN_CHANCES[1], 0) > hand.get(_OPENED[1], 0)
        if style == FIT_OR_FOLD:
            return bool(hand.get("limped") or hand.get("sd_weak_calls") or hand.get("sd_weak_bets"))
        return False

    def contradicted_now(self, acts: tuple[Act, ...]) -> bool:
        """What of `contradicted_by` a hand still in play shows in its actions so far (a spot's `history`, as
        the decision reads them already), read without counting them: a calling station bet or raised; a
        loose-aggressive player limped or checked the flop; a fit-or-fold player limped (we never limp, so
        the opponent's call before the flop that follows no bet of ours is a limp)."""
        style = self.style()
        after_bet = -1  # the street on which our bet or raise was the move before, else -1
        for street, mine, kind, _ in acts:
            if mine:
                after_bet = street if kind == RAISE else -1
                continue
            if kind == RAISE and style == STATION:
                return True
            if after_bet != street and style != STATION and (
                    street == 0 and kind == CALL or street == 1 and style == LAG and kind != RAISE):
                return True  # a limp, or a flop it could bet and did not
            after_bet = -1
        return False

    def style(self) -> str | None:
        """The style the counts point to (None: not clear yet); read once per change of the counts."""
        if self._style is _UNREAD:
            self._style = self._read_style()
        return self._style

    def _read_style(self) -> str | None:
        c = self.counts.get
        if c("hands", 0) < self.MIN_HANDS:
            return None
        chances = c("open_chances_0", 0) + c("open_chances_1", 0)
        aggression = (c("opened_0", 0) + c("opened_1", 0)) / chances if chances >= self.MIN_EVIDENCE else None
        folds = self.rate("faced_FOLD", "faced")
        if aggression is not None and aggression >= 0.6:
            return LAG
        if folds is not None and folds >= 0.3:
            return FIT_OR_FOLD
        if folds is not None and folds <= 0.05 and c("faced_RAISE", 0) == 0 and (aggression or 0.0) <= 0.1:
            return STATION
        if c("sd_weak_calls", 0) and not c("faced_FOLD", 0) and not c("faced_RAISE", 0):
            return STATION
        return None


class PokerReference(Agent):
    """Models every named opponent from what it sees and plays the matching exploit."""

    name = "reference"
    deterministic = True  # plays from its observations only: one stateless pass measures it

    def __init__(self, card, seed: int = 0, latent=None, freeze_at: int | None = None):
        super().__init__(card, seed=seed)
        self.models: dict[str, OpponentModel] = {}
        self.freeze_at = freeze_at
        self._books: dict[str, Policy] = {}  # `playbook` per opponent; cleared when `models` change

    def playbook(self, opponent: str) -> Policy:
        book = self._books.get(opponent)
        if book is None:
            model = self.models.get(opponent)
            book = self._books[opponent] = PLAYBOOKS.get(model.style() if model else None, PLAYBOOKS["default"])
        return book

    def act(self, observation: str, info: dict) -> str:
        table = info["table"]
        if table["over"]:
            return CHECK
        spot = table_spot(table)
        opponent = table["opponent"]
        book = self._books.get(opponent) or self.playbook(opponent)  # the lookup inline: this runs at every decision
        if id(book) in _EXPLOITS and not self.frozen(info) and self.models[opponent].contradicted_now(spot.history):
            book = PLAYBOOKS["default"]  # this hand already shows the opponent has changed: its exploit is wrong
        d = spot.legalize(book.decide(spot))
        return f"RAISE {d.total}" if d.kind == RAISE else d.kind  # = action_text(d)

    def end_instance(self, reward: float, info: dict) -> None:
        table = info.get("table")
        if self.frozen(info):
            return
        if table and table["over"]:
            hand = hand_counts(table)
            opponent = table["opponent"]
            model = self.models.get(opponent)
            if model is None:
                model = self.models[opponent] = OpponentModel()
            model.observe(hand)
            self._books.pop(opponent, None)  # only this opponent's playbook may have changed

    def state_dict(self) -> dict:
        return {"models": {name: dict(m.counts) for name, m in self.models.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.models = {name: OpponentModel(c) for name, c in state["models"].items()}
        self._books.clear()


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
