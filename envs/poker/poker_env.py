"""Poker-v9: heads-up no-limit hold'em hands against deterministic, exploitable opponents."""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import lru_cache

from clbench.actions import ActionError, ToolCall, tool_schema
from clbench.env import InstanceSequenceEnv, Outcome, load_task_spec
from clbench.feedback import score_report
from clbench.envs.poker.cards import Deal, card_names, deal_hands
from clbench.envs.poker.opponents import CHANGES, NAMES, STYLES, draw_opponent, make_opponent
from clbench.envs.poker.policy import CALL, CHECK, FOLD, KINDS, RAISE, Decision
from clbench.envs.poker.table import AGENT, HandTable
from clbench.envs.poker.view import HandView
from clbench.schedule import Instance, Schedule, Slot, Variant


_RT = "clbench.agents.poker_redteam"
_new = tuple.__new__

#: opponent-blind memoryless lines (agents/poker_redteam.py): a few points each by default, `full_grid`
#: with CLBENCH_SLOW=1 or `clbench redteam --full` (issue 28's widest search: `poker_redteam.search`)
FAMILIES: dict[str, tuple[str, dict[str, list], dict]] = {
    "card_blind_sizing": (f"{_RT}:BetSizingAgent", {"fraction": [0.0, 0.5, 1.0], "cap": [1, 9], "fold": [False, True]},
                          {"full_grid": {"fraction": [0.0, 0.33, 0.5, 1.0, 2.0], "cap": [1, 2, 9],
                                         "fold": [False, True]}}),
    "strength_thresholds": (f"{_RT}:ThresholdsAgent", {
        "pre_raise": [0.6, 0.8], "pre_call": [0.1, 0.4], "bet_tier": [2, 4], "call_tier": [1, 3], "fraction": [0.66]},
        {"full_grid": {"pre_raise": [0.5, 0.7, 0.85], "pre_call": [0.1, 0.3, 0.5], "bet_tier": [2, 3, 4, 5],
                       "call_tier": [0, 1, 2, 3], "fraction": [0.33, 0.66, 1.0]}}),
    "check_call": (f"{_RT}:CheckCallAgent", {"pre_call": [0.5, 1.0], "call_tier": [-1, 1, 3]},
                   {"full_grid": {"pre_call": [0.3, 0.6, 1.0], "call_tier": [-1, 0, 1, 2, 3]}}),
    "bet_give_up": (f"{_RT}:BetGiveUpAgent", {"fraction": [0.33, 1.0], "streets": [1, 3], "keep_tier": [4, 9]},
                    {"full_grid": {"fraction": [0.33, 0.66, 1.0], "streets": [1, 2, 3], "keep_tier": [2, 3, 4, 5, 9]}}),
    "value_bluff": (f"{_RT}:ValueBluffAgent", {"open_pct": [0.7], "defend_pct": [0.6], "value_tier": [3],
                                              "bluff": [0.0, 0.3], "fraction": [0.5], "small_tier": [0, 1],
                                              "big_tier": [3]},
                    {"full_grid": {"open_pct": [0.5, 0.8], "defend_pct": [0.4, 0.7], "value_tier": [2, 3],
                                   "bluff": [0.0, 0.3, 0.6], "fraction": [0.5, 1.0], "small_tier": [0, 1],
                                   "big_tier": [3, 4]}}),
    "hand_reader": (f"{_RT}:HandReaderAgent", {"raised": ["default", "loose_aggressive"],
                                                "raised_checked": ["default", "fit_or_fold"],
                                                "raised_bet": ["default", "loose_aggressive"]},
                    {"full_grid": {k: ["default", "calling_station", "fit_or_fold", "loose_aggressive"]
                                   for k in ("raised", "raised_checked", "raised_bet", "called", "called_checked")}}),
    "likelihood_reader": (f"{_RT}:LikelihoodReaderAgent", {"confident": [0.5, 0.6, 0.8, 0.9]},
                          {"full_grid": {"confident": [0.4, 0.5, 0.6, 0.65, 0.75, 0.8, 0.9, 0.95, 0.99]}}),
    # the likelihood reader that also reads raise sizes by what each kind bets on the train split (issue 29)
    "size_reader": (f"{_RT}:SizeReaderAgent", {"confident": [0.6, 0.7, 0.8, 0.9]},
                    {"full_grid": {"confident": [0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9, 0.95]}}),
    "push_fold": (f"{_RT}:PushFoldAgent", {"push_pct": [0.1, 0.5]}, {"full_grid": {"push_pct": [0.05, 0.1, 0.2, 0.35,
                                                                                               0.5, 0.75, 1.0]}}),
}


@dataclass(frozen=True)
class HandSpec:
    """Env-private payload of one instance."""

    deal: Deal
    opponent: str
    agent_button: bool
    met_before: int  # hands against this opponent in earlier variants of the schedule
    policy: str  # key of the opponent's policy in the task spec (differs from the name once it adapted)


_ACTION = re.compile(r"(?:action\s*[:=]\s*)?(fold|check|call|raise|bet|all[-_ ]?in)(?:\s+(?:to\s+)?(\d+))?\s*[.!]?",
                     re.IGNORECASE)
#: the usual reply, one bare move: read at once, with `_ACTION`'s groups (the general parser would give the
#: same call, slower)
_PLAIN = re.compile(r"(FOLD|CHECK|CALL|RAISE(?= ))(?: (\d{1,6}))?")
_PLAIN_MAX = len("RAISE 999999")


def _move_args(m: re.Match) -> dict:
    """The act tool's arguments for a move matched by `_ACTION` or `_PLAIN` (ALL-IN excepted)."""
    word = m.group(1).upper()
    args = {"action": RAISE if word in ("RAISE", "BET") else word}
    if m.group(2) is not None:
        args["total"] = int(m.group(2))
    return args


_ALREADY_OVER = "The hand is already over; reply anything (e.g. CHECK) to collect the result."


@lru_cache(maxsize=4096)
def _plain_call(action: str) -> ToolCall | None:
    """The call of a bare move (`_PLAIN`), else None: built once per distinct reply, as calls are only read."""
    m = _PLAIN.fullmatch(action)
    return ToolCall("act", _move_args(m)) if m else None


@lru_cache(maxsize=4096)
def _score_report(profit: int, big_blind: int, showdown: bool) -> str:
    """The score part of a hand's last observation (few distinct results recur: rendered once each)."""
    ended = ("at the showdown: both hands are shown above" if showdown else
             "by a fold: folded cards stay hidden, as at a real table")
    return score_report(profit / big_blind, "chip profit in big blinds", [
        ("chips won or lost", f"{profit:+d}"), ("big blind", f"{big_blind} chips")], [f"The hand ended {ended}."])


class PokerEnv(InstanceSequenceEnv):
    """
    ## Description
    Heads-up no-limit Texas hold'em (the `texasholdem` library is the referee) against
    rule-based, fully deterministic opponents. One episode is one hand: both stacks start at
    1000 chips, blinds 5/10, and the agent is on the button in every other hand of a variant.
    Each opponent has a name, shown every hand, and an exploitable style that is never
    described: the latent structure to learn is each named opponent's policy, which recurs
    later in the schedule. The styles are of three kinds (envs/poker/opponents.py): one calls
    almost every bet, one plays few hands and folds without a fit, one plays most hands, bets and
    bluffs a lot and defends by pot odds; what wins against one kind loses against another. Every
    kind mixes its visible moves (a drawn share of its hands is played with another kind's move, by
    a fixed pseudo-random number of its cards), so one hand's betting hints at the kind and only a
    run of hands shows it. Default schedule (120 hands, five variants): Mara (40 hands), Dex (20),
    Mara again (10), Quinn (40), Dex again (10). Each variant deals from its own seed; rollouts
    permute the hands within a variant.

    Deals: rollout seed s plays deal s % 5 of the world's cards (the same opponents, seats and
    hand ids, other cards; deal 0 of the canonical world is v3's). The default run's five
    rollouts and five stateless passes (one per rollout seed, paired by seed) play 600 distinct
    hands, and r_max and r_reference are means over the five deals: one deal of 120 hands is
    too few for a score, the gain or a verdict (docs/poker-variance-levers.md).

    `policy_families` declares opponent-blind memoryless lines (bet-sizing rules, hand-strength
    thresholds, check/call and bet/give-up lines) for the red team (`clbench redteam`), which
    chooses each family's point on re-deals of the world (`redeal=K`: five more deals) and plays
    it on the benchmark's five deals.

    Concept drift (variant 3, hand 61): Mara returns playing a style of another kind, so the
    exploit learned against her in variant 1 now loses chips. Nothing an agent is shown says
    so (`agent_card`); the task YAML declares the drift under `drifts` for `clbench drift-check`.

    ## Worlds
    The canonical world (`world_seed=None`, test split) plays the opponents written in
    tasks/poker/default.yaml. Any other world (the train split, `world_seed=N`) draws its own:
    the players' names, which kind each plays, the kind the returning player changes to (one its
    old exploit loses to), every exploitable parameter (shares of hands, bet sizes) and the deals,
    from `world_rng` and `draw_seed`, so worlds share the kinds of structure and never the values.
    No answer carries between the splits, by name or by place in the schedule: a drawn world never
    uses a canonical name, a train world's players each play another kind than the canonical
    world's player in the same place, and a test world never has the canonical world's kinds in
    their places or any a train world may have (`_draw_world`). Every world meets all three kinds.

    ## Action Space
    `Text`: `FOLD`, `CHECK`, `CALL`, `RAISE <total>` (raise *to* that many chips this betting
    round; `BET <total>` is the same, `ALL-IN` raises to the whole stack), case-insensitive,
    on the last line of the reply; or the tool call
    `{"tool": "act", "arguments": {"action": "RAISE", "total": 120}}`. Once the hand is over
    (the opponent folded before the agent acted), any reply collects the result.

    ## Observation Space
    `Text` (printable ASCII): hand number, opponent (announced when new or returning), blinds,
    position, hole cards, board, this hand's betting so far, pot, stacks, amount to call and the
    legal actions with the raise range; at hand end the showdown (both hands when shown), the
    chip result and the score (see Feedback). `info["table"]` holds the same public state as a
    dict whose every field keeps one type in every hand and step (ints are 0, strings "" and
    lists empty when not applicable), so vector envs can stack it.

    ## Feedback
    The terminal observation states the score (chip profit in big blinds) and its parts (chips
    won or lost, the big blind), the whole hand's betting, and the opponent's hole cards with
    both hands' names when the hand reached a showdown. After a fold the cards stay hidden, as at
    a real table: showing a folded hand would reveal how often the opponent bluffs or folds
    strength, which is the latent policy the task asks the agent to learn from play. Deals are
    per instance, so no hand's cards tell anything about another hand's cards.

    ## Rewards
    The agent's chip profit in big blinds, on the step that ends the hand (0 before).
    raw_metric = ("chips", profit in chips); solved = profit > 0. r_max is the oracle's mean
    on the default schedule's five deals (it knows each opponent's policy, not the hidden cards);
    r_reference the stateless reference agent's mean on the same hands.

    ## Episode End
    The hand ends when a player folds or at the showdown (terminated). An illegal or
    unreadable action changes nothing and costs no step; the observation names the legal
    moves; after 3 in a row the table folds for the agent (or checks when checking is free)
    and says so. The budget is 30 actions per hand; when it runs out the agent checks or folds
    to the end of the hand (truncated).

    ## Arguments
    `schedule`: "default" (120 hands), "mara", "dex", "quinn" (one opponent, 40 hands each),
    "short" (12 hands, two opponents, for tests), "drift_short" (8 hands against Mara, then 6
    after she changed, for tests); `cycle`; `render_mode` ("ansi"); `split` ("test", the
    benchmark's hands; "train": another world of the same kinds, ids "train-<variant>-hNN");
    `world_seed` (None: the canonical world; N: a fresh world, see Worlds); `redeal` (0: the
    benchmark's five deals; K >= 1: five other deals of the same opponents and seats).

    Seeds: `reset(seed=s)` starts rollout s: deal s % 5, hands permuted within variants by s.

    ## Version History
    * v9: the reference reads a player it has not met from a prior of the hand's place in the schedule
      (`agents/poker.py` `PLACE_PRIORS`: how often the world generator seats each kind there, counted on test
      worlds no verdict judges; v8 read every unmet player from the uniform prior). The generator does not
      seat the kinds alike by place and a hand's number tells its place, so a memoryless read from those priors
      led v8's stateless reference pooled over fresh worlds (red team s22). r_reference recalibrated (the
      stateless pass reads every hand as a first meeting); opponents, deals, the oracle and r_max are v8's.
    * v8: the reference reads each kind against a threshold of its own (`agents/poker.py`
      `CONFIDENT`, one per kind, fitted on the train worlds by coordinate search; v7 had one for
      all three): red team rt7's per-kind-threshold reader, chosen on the train split and frozen,
      led v7's stateless reference pooled over fresh worlds. The belief's drift (`HAZARD`)
      refitted with it; r_reference recalibrated. Opponents, deals and the oracle are as in v7.
    * v7: the kinds' tells are no longer certain (issue 29: on v6 a station never raised and a
      loose-aggressive player bet every flop, so a memoryless line that read the kind off one hand's
      betting beat the learning reference): each kind plays a drawn share of its hands with another
      kind's visible move, and every kind draws its bet and raise sizes per hand from the same range
      (each kind's own sizes told it in one raise: red team rt7). The reference reads kinds by
      likelihood (a belief per opponent, updated by Bayes after every hand and within the hand), so its stateless pass is a reader too and the
      learner must out-earn the best in-hand read. The default schedule gives the canonical world's
      kinds 40 hands each (Mara 40, Dex 20, Mara again 10, Quinn 40, Dex again 10; every world plays
      these counts), so no memoryless line tuned on it profits from one kind's share, and every drawn
      world meets all three kinds. The red team confirms a point that reaches r_reference on the
      benchmark on other re-deals (`clbench.redteam.confirm`). Line, exploits, tells and the
      reading's thresholds refitted on the train worlds; r_max, r_reference recalibrated.
    * v6: worlds other than the canonical one draw the players' names, and the kinds in their
      places from assignments the other split never has (see Worlds; on v5 the train split and a
      quarter of fresh worlds had the canonical world's kinds, so a reference trained on the train
      split and frozen scored as much as the stateful one). The canonical world plays as in v5;
      the reference's line and exploits are refitted on the new train worlds (r_max, r_reference
      recalibrated).
    * v5: the kinds' exploits that the reference learns to play and the oracle plays out
      (agents/poker.py `EXPLOIT_PARAMS`) are fitted on 20 deals of the train worlds instead of 3
      and may check strong hands to a player who bets when checked to; the stateless reference's
      line is unchanged. Dynamics and scoring are unchanged; r_max recalibrated (3.850 -> 4.803:
      the oracle plays the new exploits after each decision), r_reference unchanged (2.125).
    * v4: five deals (issues 28, 29): rollout seed s plays deal s % 5, stateless passes follow
      the rollout seeds, and r_max, r_reference and the red team's verdict are means over the
      five deals (v3 scored one deal of 120 hands); the red team chooses its points on five
      held-out deals; r_max and r_reference recalibrated.
    * v3: opponents whose exploits are their own (issue 28): the calling station calls only a good
      hand or a pair against overbets, the loose-aggressive player barrels weak hands on the turn
      and river and defends them by pot odds, so card-blind aggression loses; the stateless
      reference plays a line fitted on the train split's worlds (tasks/poker/fit_reference.py);
      `redeal=K` deals other cards to the same opponents (the red team chooses its points there);
      r_max and r_reference recalibrated.
    * v2: worlds: the train split and `world_seed=N` draw which kind each opponent plays, the
      kind Mara changes to and every exploitable parameter (the canonical world plays as in
      v1); `info["table"]` keeps its field types (vector envs); the agent's brief and the spec
      card no longer speak of the opponents' styles or of the change; schedules "mara", "dex",
      "quinn" replace the ones named after styles.
    * v1 (split kwarg, no change to the test split): `split="train"` for training.
    * v1: Mara returns changed in variant 3 of the default schedule: real concept drift;
      r_max and r_reference recalibrated. The terminal observation carries the score and its
      parts and says how the hand ended (see Feedback); the brief states the rules for invalid
      moves and the action budget.
    * v0: initial release.
    """

    env_id = "clbench/Poker-v9"
    #: modules a scripted agent may import (game mechanics, cards, hand strength and the opponent archetypes with their parameter ranges: what a poker player knows, no world's values; tests/test_reference_imports.py)
    public_modules = ("betting", "cards", "opponents", "policy", "strength", "table")
    reward_unit = "BB per hand"
    brief = (
        "You play heads-up no-limit Texas hold'em, one hand per episode, against named opponents. Every hand "
        "starts with 1000 chips each and blinds 5/10, so hands are independent; the "
        "opponent's name is shown, and an opponent may come back later. Win as many chips as you can. "
        "An illegal or unreadable move changes nothing and is not counted; after three in a row the table checks "
        "for you (or folds if checking is not free). A hand allows {max_steps} moves; after that you check or fold to its "
        "end."
    )
    reward_text = "Chip profit of the hand in big blinds (10 chips), given when the hand ends."
    feedback_text = (
        "At hand end: the score and its parts (chips won or lost, big blind), the whole hand's betting, and at a "
        "showdown the opponent's hole cards and both hands' names. After a fold the cards stay hidden, as at a "
        "real table.")
    action_grammar = (
        "Reply FOLD, CHECK, CALL or RAISE <total> (raise to that total bet this round; BET <total> and ALL-IN "
        'also work), or {"tool": "act", "arguments": {"action": "RAISE", "total": 120}}.'
    )
    invalid_action_costs_step = False
    max_invalid_repeats = 3
    #: wall seconds of an instance (one hand), roughly: the runner starts the dearest jobs first
    instance_seconds = 0.0005
    #: fixed replies that ignore the observation (clbench.agents.degenerate, tests/test_honest_scores.py)
    degenerate_answers = {"call": "CALL", "fold": "FOLD", "check": "CHECK", "all-in": "ALL-IN"}
    agents = {
        "reference": "clbench.agents.poker:PokerReference",
        "oracle": "clbench.agents.poker:PokerOracle",
    }

    #: opponent-blind memoryless lines the red team searches (agents/poker_redteam.py)
    policy_families = FAMILIES
    #: the opponents come from the spec or `world_rng` only, the cards from `draw_seed`: `redeal=K` deals
    #: other cards to the same opponents
    redealable = True
    #: rollout seed s plays deal s % 5: the default run's five rollouts (and its stateless passes) play 600
    #: distinct hands, so a score is the play's, not one deal's luck (docs/poker-variance-levers.md)
    deals = 5

    def __init__(self, schedule: str = "default", cycle: bool = False, render_mode: str | None = None,
                 split: str = "test", world_seed: int | None = None, redeal: int = 0):
        super().__init__(schedule=schedule, cycle=cycle, render_mode=render_mode, split=split, world_seed=world_seed,
                         redeal=redeal)
        spec = self.spec_data
        self.stack = int(spec["stack"])
        self.small_blind, self.big_blind = int(spec["blinds"]["small"]), int(spec["blinds"]["big"])
        self.opponent_specs = {key: dict(p) for key, p in spec["opponents"].items()}
        self.opponents = {name: make_opponent(p) for name, p in self.opponent_specs.items()}
        self._table: HandTable | None = None
        self._view: HandView | None = None

    def _draw_world(self) -> None:
        """Rewrite the task spec as this world's (any world but the canonical one): every player gets a
        name from `opponents.NAMES` and a kind, the changing player one of the kinds `opponents.CHANGES`
        knows and afterwards the kind it changes to, every parameter from `opponents.RANGES`. The kinds,
        one per player in the task YAML's order (the schedule's places), with every kind met in
        the world (before or after the change), are an assignment drawn from those no world of the
        other split has: a train world shares no player's kind
        with the canonical world's player in the same place; a test world has neither the canonical
        assignment nor any a train world may have. So what a player's name or place told in one world never
        answers another (tests/test_poker.py). The schedule (hands per variant) is the canonical one in every
        world: counts fitted to a world's kinds would tell which players share a kind."""
        spec = self.spec_data = dict(self.spec_data)  # load_task_spec's dict is shared by every env: replace, never edit
        written = spec["opponents"]
        players = [key for key, p in written.items() if "name" not in p]
        changing = {p["name"] for p in written.values() if "name" in p}
        canonical = tuple(written[key]["style"] for key in players)
        # every kind is met in every world, whatever the change: in a world without one, a memoryless line tuned on
        # it reads a kind among fewer (and players all of one kind need no telling apart at all)
        every = [a for a in itertools.product(*(sorted(CHANGES) if key in changing else sorted(STYLES) for key in players))
                 if all(set(a) | {after} == set(STYLES) for key, k in zip(players, a) if key in changing
                        for after in CHANGES[k])]
        apart = [a for a in every if all(k != c for k, c in zip(a, canonical))]
        pool = apart if self.split == "train" else [a for a in every if a != canonical and a not in apart]
        rng = self.world_rng("opponents")
        kinds = dict(zip(players, pool[int(rng.integers(len(pool)))]))
        drawn = {key: draw_opponent(kinds[key], rng) for key in players}
        for key, p in written.items():
            if "name" in p:  # the same player later on, playing the kind it changes to
                after = CHANGES[kinds[p["name"]]]
                drawn[key] = {"name": p["name"], **draw_opponent(after[int(rng.integers(len(after)))], rng)}
        names = self.world_rng("names").choice(sorted(set(NAMES) - set(players)), size=len(players), replace=False)
        rename = dict(zip(players, map(str, names)))
        pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, players)) + r")\b")

        def sub(text: str) -> str:
            return pattern.sub(lambda m: rename[m.group()], text)

        spec["opponents"] = {sub(key): {**p, "name": sub(p["name"])} if "name" in p else p for key, p in drawn.items()}
        spec["schedules"] = {name: [{**v, "opponent": sub(v["opponent"])} for v in variants]
                             for name, variants in spec["schedules"].items()}
        spec["drifts"] = {name: [{k: sub(x) if isinstance(x, str) else x for k, x in d.items()} for d in drifts]
                          for name, drifts in (spec.get("drifts") or {}).items()}

    @classmethod
    def public_secrets(cls) -> list[str]:
        """Each canonical opponent's kind as text would state it ("Mara is a station", "Dex: nit",
        ...) and every parameter value as written ("call_pct: 0.83", "call_pct=0.83")."""
        written = load_task_spec(cls.task)["opponents"]
        secrets = set()
        for key, spec in written.items():
            name, style = spec.get("name", key), spec["style"]
            for words in {style, style.replace("_", " ")}:
                secrets.update({f"{name} is {words}", f"{name} is a {words}", f"{name}: {words}", f"{name} ({words})",
                                f"{name} plays {words}", f"{name} becomes a {words}", f"{name} returns as a {words}"})
            for param, value in spec.items():
                if param in ("name", "style") or isinstance(value, int):
                    continue  # small integers (tiers) occur in any text by chance
                secrets.update({f"{param}: {value}", f"{param}={value}", f"{param} = {value}"})
        return sorted(secrets)

    # ---------------------------------------------------------------- schedule and latent
    def _build_schedule(self, name: str) -> Schedule:
        if not self.canonical_world and not getattr(self, "_world_drawn", False):
            self._draw_world()  # once: a new deal rebuilds the schedule of the same world
            self._world_drawn = True
        schedules = self.spec_data["schedules"]
        if name not in schedules:
            raise ValueError(f"unknown schedule {name!r}; known: {sorted(schedules)}")
        variants, met = [], {}
        for i, v in enumerate(schedules[name]):
            key, count = v["opponent"], int(v["hands"])
            if key not in self.spec_data["opponents"]:
                raise ValueError(f"schedule {name!r}: unknown opponent {key!r}")
            opp = self.spec_data["opponents"][key].get("name", key)
            description = f"{count} hands against {opp}"
            vname = f"{i + 1}-{opp}"
            insts = tuple(
                Instance(f"{vname}-h{k + 1:02d}", vname, HandSpec(deal, opp, k % 2 == 0, met.get(opp, 0), key))
                for k, deal in enumerate(deal_hands(self.draw_seed(v["seed"]), count))
            )
            variants.append(Variant(vname, insts, description))
            met[opp] = met.get(opp, 0) + count
        return Schedule(name, variants)

    def latent(self) -> dict:
        """Each opponent policy (style and parameters) and which one plays each hand: for the oracle only."""
        return {"opponents": {name: dict(p) for name, p in self.opponent_specs.items()},
                "policies": {inst.instance_id: inst.payload.policy for v in self.schedule.variants
                             for inst in v.instances}}

    @property
    def tools(self) -> list[dict]:
        return [tool_schema(
            "act", "Take your poker action for this turn.",
            {"action": {"type": "string", "enum": list(KINDS),
                        "description": "FOLD, CHECK, CALL or RAISE (a first bet is a RAISE too)"},
             "total": {"type": "integer", "minimum": 0, "maximum": self.stack,
                       "description": "RAISE only: your total bet in this betting round after raising"}},
            required=["action"])]

    # ---------------------------------------------------------------- episode hooks
    def _enter(self, slot: Slot, fresh: bool) -> str:
        hand: HandSpec = slot.instance.payload
        self._table = HandTable(hand.deal, hand.agent_button, self.opponents[hand.policy], self.stack,
                                self.small_blind, self.big_blind)
        self._table.play_opponent()
        self._view = HandView(self._table, {
            "hand": slot.position + 1, "hands": len(self._order), "opponent": hand.opponent,
            "button": hand.agent_button, "blinds": [self.small_blind, self.big_blind], "stack": self.stack,
            "hole": card_names(hand.deal.agent),
        })
        view = self._view
        end = _ALREADY_OVER if self._table.over else self.action_grammar
        return f"{view.header(hand.met_before, slot.variant_position == 0)}\n{view.text(title=False)}\n{end}"

    def parse_action(self, action: str) -> ToolCall:
        table = self._table
        if table is not None and table.over:  # nothing left to decide: any reply collects
            return ToolCall("act", {"action": CHECK})
        plain = _plain_call(action) if len(action) <= _PLAIN_MAX else None
        return plain or super().parse_action(action)

    def _parse_text(self, text: str) -> ToolCall:
        lines = [ln.strip().strip("`*") for ln in text.strip().splitlines() if ln.strip()]
        m = _ACTION.fullmatch(lines[-1]) if lines else None
        if not m:
            raise ActionError(f"could not read an action. {self._view.legal_text()} {self.action_grammar}")
        return self._call(m)

    def _call(self, m: re.Match) -> ToolCall:
        if m.group(1).upper().startswith("ALL"):
            legal = self._table.legal()
            return ToolCall("act", {"action": RAISE, "total": legal.max_raise} if legal.max_raise else {"action": CALL})
        return ToolCall("act", _move_args(m))

    def _act(self, call: ToolCall) -> Outcome:
        table = self._table
        if table.over:
            return self._finish("")
        if call.tool != "act":
            raise ActionError(f"unknown tool {call.tool!r}; use act")
        kind, total = call.arguments.get("action"), call.arguments.get("total")
        if isinstance(total, float) and total.is_integer():  # JSON writers often send 120.0
            total = int(total)
        if kind not in KINDS:
            raise ActionError(f"unknown action {kind!r}. {self._view.legal_text()}")
        if kind == RAISE and not isinstance(total, int):
            raise ActionError(f"RAISE needs a total, e.g. RAISE {table.legal().min_raise or 0}. "
                              f"{self._view.legal_text()}")
        decision = _new(Decision, (kind, int(total) if kind == RAISE else 0))  # NamedTuple's __new__ is slower
        # = table.legal().check(decision) is not None, read off the betting model's own tuple (every step)
        to_call, low, high = table.betting.legal()
        if (kind == CHECK and to_call or kind == CALL and not to_call
                or kind == RAISE and not (high and low <= decision.total <= high)):
            raise ActionError(f"{table.legal().check(decision)}. {self._view.legal_text()}")
        return self._advance(decision, "")

    def _advance(self, decision: Decision, note: str) -> Outcome:
        table = self._table
        table.apply(decision)
        table.play_opponent()
        if table.over:
            return self._finish(note)
        view = self._view
        view.refresh()
        return Outcome(note + view.text())

    def _on_invalid_cap(self) -> Outcome:
        decision = Decision(CHECK) if self._table.legal().can_check else Decision(FOLD)
        self._invalid_streak = 0  # the forced move resolves the streak (the base class keeps counting)
        note = f"{self.max_invalid_repeats} invalid actions in a row: the table plays {decision.kind} for you.\n"
        return self._advance(decision, note)

    def _on_budget_exhausted(self) -> Outcome:
        table = self._table
        while not table.over:
            if table.to_act == AGENT:
                table.apply(Decision(CHECK) if table.legal().can_check else Decision(FOLD))
            table.play_opponent()
        return self._finish(f"The budget of {self.max_steps} actions is used up: you check or fold to the end.\n")

    def _finish(self, note: str) -> Outcome:
        snap = self._view.refresh()
        profit, reward = snap["result"], snap["result"] / self.big_blind
        report = _score_report(profit, self.big_blind, snap["showdown"])
        return Outcome(f"{note}{self._view.text()}\n{report}", done=True, reward=reward,
                       raw_metric=("chips", float(profit)), solved=profit > 0)

    def _info(self) -> dict:
        info = InstanceSequenceEnv._info(self)  # = super()._info(), without making a super object at every step
        if self._table is not None:
            info["table"] = self._view.snap.copy()  # = public_state(), one call fewer at every step
        return info

    def public_state(self) -> dict:
        """Everything the agent may know about the current hand (the observation, as a dict)."""
        return dict(self._view.snap)

    @property
    def hand_log(self) -> list[tuple[int, int, str, int]]:
        """This hand's moves so far as (street, player, kind, total); the agent is player 0."""
        return list(self._table.log) if self._table else []
