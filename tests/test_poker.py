"""Poker-v9: the library as referee, dealing, hidden cards, opponents, agents. The env contract
(check_env, reset modes, determinism whatever the global random state, info keys, spec card, r_max
and r_reference) is checked for every env in tests/test_contract.py."""
from __future__ import annotations

import functools
import json
import os
import re

import gymnasium as gym
import numpy as np
import pytest
from texasholdem.game.action_type import ActionType
from texasholdem.game.game import TexasHoldEm

import clbench  # noqa: F401
from clbench.agent import make_agent
from clbench.env import load_task_spec
from clbench.metrics import estimate
from clbench import redteam
from clbench.agents.poker_redteam import FRESH_WORLD_FAMILIES, PLACE_PRIOR, held_out_per_deal
from clbench.runner import play_instance
from clbench.agents.poker import STATELESS, PokerReference, hand_cards
from clbench.envs.poker.betting import Betting
from clbench.envs.poker.cards import StackedDeck, card_names, deal_hands, names, parse_card
from clbench.envs.poker.opponents import CHANGES, make_opponent
from clbench.envs.poker.policy import CALL, CHECK, FOLD, RAISE, Decision
from clbench.envs.poker.strength import preflop_pct, strength
from clbench.envs.poker.table import HandTable
from tests.fit_scripts import fit_script

ENV_ID = "clbench/Poker-v9"
SPEC = load_task_spec("poker")


def make(schedule: str = "default", **kwargs):
    return gym.make(ENV_ID, schedule=schedule, **kwargs)


def cards(text: str) -> tuple:
    return tuple(parse_card(c) for c in text.split())


def shows(text: str, card_list) -> bool:
    """Whether any of the cards is written in `text` as a card (not inside a word)."""
    return any(re.search(rf"(?<![A-Za-z0-9]){name}(?![A-Za-z0-9])", text) for name in names(card_list).split())


def play(env, agent, seed: int = 0, stateless: bool = False) -> dict[str, float]:
    """Rewards by instance id: one stateful pass (one agent) or the stateless pass (fresh agents)."""
    rewards = {}
    order = env.unwrapped.schedule.order(seed)
    obs, info = env.reset(seed=seed)
    for slot in order:
        if stateless:
            agent = make_agent("reference", env, seed=0)
            obs, info = env.reset(seed=seed, options={"instance": slot.instance_id, "stateless": True})
        elif slot.position:
            obs, info = env.reset()
        out = play_instance(env, agent, obs, info, [])
        assert out["error"] is None, out["error"]
        rewards[slot.instance_id] = out["reward"]
    return rewards


# ---------------------------------------------------------------- the table
def test_spec_card_names_the_opponents_never_their_styles():
    card = make().unwrapped.spec_card
    assert card.instances == 120
    assert [(v["name"], v["instances"]) for v in card.variants] == [
        ("1-Mara", 40), ("2-Dex", 20), ("3-Mara", 10), ("4-Quinn", 40), ("5-Dex", 10)]
    told = json.dumps(card.to_dict()).lower()  # the styles are the latent structure: never told
    assert not any(w in told for w in ("station", "aggress", "fit_or_fold", "fit-or-fold", "loose"))


def test_schedules_and_rollout_order():
    env = make().unwrapped
    canonical, other = env.schedule.order(0), env.schedule.order(3)
    assert [s.variant for s in canonical] == [s.variant for s in other]
    assert [s.instance_id for s in canonical] != [s.instance_id for s in other]
    by_id = {s.instance_id: s.instance.payload for s in canonical}
    assert [by_id[f"4-Quinn-h{k:02d}"].agent_button for k in range(1, 7)] == [True, False] * 3
    assert by_id["3-Mara-h01"].deal != by_id["1-Mara-h01"].deal  # each variant deals from its own seed
    for name in ("mara", "dex", "quinn", "short"):
        assert len(make(name).unwrapped.schedule) == sum(v["hands"] for v in SPEC["schedules"][name])
    with pytest.raises(ValueError, match="unknown schedule"):
        make("nope")


def test_observation_shows_the_table_and_announces_opponents():
    env = make()
    obs, info = env.reset(seed=0)
    for needle in ("Hand 1 of 120 against Mara", "New opponent: Mara", "button", "Your cards:", "Board: -",
                   "Pot: 15", "To call: 5", "RAISE <total> with total 20..1000"):
        assert needle in obs
    table = info["table"]
    assert table["hole"] == names(env.unwrapped.slot.instance.payload.deal.agent).split()
    assert (table["to_call"], table["min_raise"], table["max_raise"], table["opp_hole"]) == (5, 20, 1000, [])
    obs, info = env.reset(options={"instance": "3-Mara-h01"})
    assert info["variant_position"] == 0 and "Mara returns: you played 40 hands against Mara earlier." in obs
    obs, info = env.reset(options={"instance": "3-Mara-h02"})
    assert "returns" not in obs and "New opponent" not in obs


def test_cards_are_the_seeded_deal():
    env = make()
    obs, info = env.reset(seed=0)
    deal = env.unwrapped.slot.instance.payload.deal
    assert deal == deal_hands(SPEC["schedules"]["default"][0]["seed"], 1)[0]
    done = False
    while not done:  # check/call down: Mara never folds, so the hand reaches the showdown
        obs, r, term, trunc, info = env.step("CALL" if info["table"]["to_call"] else "CHECK")
        done = term or trunc
    assert info["table"]["board"] == names(deal.board).split()
    assert info["table"]["opp_hole"] == names(deal.opponent).split()
    assert f"Mara shows {names(deal.opponent)}" in obs
    game = env.unwrapped._table.game  # the library played exactly these cards
    assert list(game.board) == list(deal.board) and list(game.hands[1]) == list(deal.opponent)



def test_the_library_deals_a_hand_unshuffled_and_still_shuffles_for_everyone_else():
    """HandTable's game skips the shuffle of the deck whose cards it replaces (no global patch): the
    library's own games still shuffle, and the library plays our cards either way."""
    from texasholdem.card.deck import Deck

    from clbench.envs.poker import table as table_module

    game = table_module._Game(buyin=1000, big_blind=10, small_blind=5, max_players=2)
    game.start_hand()
    assert type(game._deck) is table_module._Unshuffled
    assert game._deck.cards == Deck._get_full_deck()[4:]  # dealt from the top, in order
    plain = TexasHoldEm(buyin=1000, big_blind=10, small_blind=5, max_players=2)
    plain.start_hand()
    assert type(plain._deck) is Deck and plain._deck.cards != Deck._get_full_deck()[4:]  # 1 in 48! by chance
    deal = deal_hands(11, 1)[0]
    hand = HandTable(deal, True, make_opponent({"style": "calling_station"}), 1000, 5, 10)
    assert type(hand.game._deck) is StackedDeck and list(hand.game.hands[1]) == list(deal.opponent)

def test_reward_only_at_hand_end_in_big_blinds():
    env = make()
    obs, info = env.reset(seed=0)
    rewards, term = [], False
    while not term:  # check or call down: the hand reaches a showdown or the opponent folds
        obs, r, term, trunc, info = env.step("CALL" if info["table"]["to_call"] else "CHECK")
        rewards.append(r)
    assert len(rewards) > 1 and not trunc and all(r == 0 for r in rewards[:-1])
    chips = info["table"]["result"]
    assert rewards[-1] == chips / 10 == info["instance_reward"]
    assert info["raw_metric"] == {"name": "chips", "value": float(chips)} and info["solved"] == (chips > 0)
    assert f"Result: {chips:+d} chips" in obs


def test_illegal_actions_cost_nothing_and_three_fold_for_you():
    env = make()
    obs, info = env.reset(seed=0)
    before = info["table"]
    for action, message in (("CHECK", "cannot CHECK: there is a bet of 5"), ("RAISE 15", "between 20 and 1000"),
                            ('{"tool": "act", "arguments": {"action": "RAISE"}}', "RAISE needs a total")):
        obs, r, term, trunc, info = env.step(action)
        assert message in obs and "Legal actions: FOLD | CALL" in obs
        if term:
            break
        assert info["step"] == 0 and info["table"] == before
    assert term and r == -0.5 and "3 invalid actions in a row: the table plays FOLD for you" in obs


def test_forced_check_when_free_and_the_streak_restarts():
    env = make()
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("call")  # button limps; Mara checks, then checks the flop to us
    assert info["table"]["to_call"] == 0 and info["table"]["street"] == "flop"
    for junk in ("hello", "RAISE 5", "CALL"):
        obs, r, term, trunc, info = env.step(junk)
    assert not term and "the table plays CHECK for you" in obs and info["table"]["street"] == "turn"
    obs, r, term, trunc, info = env.step("nonsense")
    assert not term and "could not read an action" in obs and info["table"]["street"] == "turn"


@pytest.mark.parametrize("action", ["RAISE 40", "bet 40", "Action: RAISE TO 40", "I will raise.\nRAISE 40",
                                    '{"tool": "act", "arguments": {"action": "RAISE", "total": 40}}'])
def test_action_grammar(action):
    env = make()
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step(action)
    assert info["table"]["history"][0] == ["preflop", "you", "RAISE", 40]


def test_all_in_and_opponent_folding_first():
    env = make()
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("ALL-IN")  # Mara calls everything: a showdown for 100 big blinds
    assert term and abs(r) in (100.0, 0.0) and "(all-in)" in obs and info["table"]["showdown"]
    env = make("quinn")
    for slot in env.unwrapped.schedule.order(0):
        obs, info = env.reset(options={"instance": slot.instance_id})
        if info["table"]["over"]:  # Quinn folded the button before the agent could act
            assert "already over" in obs and "Quinn folds" in obs and not shows(obs, slot.instance.payload.deal.opponent)
            obs, r, term, trunc, info = env.step("{not even json")
            assert term and r == 0.5
            return
    pytest.fail("no hand where Quinn folds first")


def test_step_budget_checks_or_folds_to_the_end():
    env = make()
    env.unwrapped.max_steps = 1
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step("CALL")
    assert trunc and not term and "budget of 1 actions is used up" in obs
    assert r == info["table"]["result"] / 10 and info["table"]["over"]


# ---------------------------------------------------------------- hidden information
def test_opponent_cards_stay_hidden_until_a_showdown():
    env = make()
    agent = make_agent("reference", env)
    obs, info = env.reset(seed=1)
    for pos in range(60):
        if pos:
            obs, info = env.reset()
        opp = env.unwrapped.slot.instance.payload.deal.opponent
        agent.begin_instance(obs, info)
        done = False
        while not done:
            assert not shows(obs, opp) and info["table"]["opp_hole"] == []
            assert not any(w in obs.lower() for w in ("station", "aggressive", "fit_or_fold", "style"))
            obs, r, term, trunc, info = env.step(agent.act(obs, info))
            done = term or trunc
        assert shows(obs, opp) == info["table"]["showdown"] == bool(info["table"]["opp_hole"])
        agent.end_instance(r, info)


# ---------------------------------------------------------------- the game model
def test_betting_model_agrees_with_the_library():
    rng = np.random.default_rng(0)
    station = make_opponent({"style": "calling_station"})
    for k, deal in enumerate(deal_hands(3, 300)):
        t = HandTable(deal, k % 2 == 0, station, 1000, 5, 10)
        while not t.over:
            g = t.game
            moves = g.get_available_moves()
            rr = moves.raise_range if ActionType.RAISE in moves.action_types else range(0)
            legal = t.legal()
            assert t.to_act == g.current_player and legal.to_call == g.chips_to_call(g.current_player)
            assert (legal.min_raise, legal.max_raise) == ((rr.start, rr[-1]) if rr else (0, 0))
            assert t.pot == sum(p.get_total_amount() for p in g.pots)
            assert g._is_hand_over() is TexasHoldEm._is_hand_over(g)  # HandTable's game answers without generators
            u = rng.random()
            if u < 0.1:
                d = Decision(FOLD)
            elif u < 0.5 or not legal.max_raise:
                d = Decision(CALL if legal.to_call else CHECK)
            else:
                high = legal.max_raise if rng.random() < 0.2 else min(legal.max_raise, 3 * legal.min_raise)
                d = Decision(RAISE, int(rng.integers(legal.min_raise, high + 1)))
            t.apply(d)
            assert g._is_hand_over() is TexasHoldEm._is_hand_over(g)
        assert t.betting.over and t.betting.payoff(0, t.holes, deal.board) == t.profit()


def library_replay(hand, moves) -> TexasHoldEm:
    """A fresh library game with the hand's cards, after `moves` (street, player, kind, total)."""
    game = TexasHoldEm(buyin=SPEC["stack"], big_blind=SPEC["blinds"]["big"], small_blind=SPEC["blinds"]["small"],
                       max_players=2)
    game.btn_loc = 1 if hand.agent_button else 0  # the library moves the button one seat on
    game.start_hand()
    game.hands[0], game.hands[1] = list(hand.deal.agent), list(hand.deal.opponent)
    game._deck = StackedDeck(hand.deal.board)
    for _, _, kind, total in moves:
        game.take_action(ActionType[kind], total=total if kind == RAISE else None)
    return game


def assert_table_is_the_library_s(table: dict, game: TexasHoldEm) -> None:
    """The public state the env reports, read back from the library's own game."""
    assert table["board"] == card_names(game.board)
    assert table["pot"] == sum(p.get_total_amount() for p in game.pots)
    assert (table["my_stack"], table["opp_stack"]) == (game.players[0].chips, game.players[1].chips)
    assert game.current_player == 0 and table["my_bet"] == game.player_bet_amount(0)
    assert table["to_call"] == game.chips_to_call(0)
    moves = game.get_available_moves()
    rr = moves.raise_range if ActionType.RAISE in moves.action_types else range(0)
    assert (table["min_raise"], table["max_raise"]) == ((rr.start, rr[-1]) if rr else (0, 0))


@pytest.mark.parametrize("agent_name, seeds, schedule", [
    ("reference", (0, 3), "default"), ("random", (0, 1, 2), "default"), ("oracle", (0, 1), "short")])
def test_every_step_agrees_with_an_independent_library_replay(agent_name, seeds, schedule):
    """Whatever the agent plays, every observation's numbers and the reward are what the library
    itself computes when the hand's moves are replayed on a fresh game (the env's fast paths:
    betting model, cached text, parsing, never change the dynamics)."""
    env = make(schedule)
    base = env.unwrapped
    for seed in seeds:
        agent = make_agent(agent_name, env, seed=seed)
        obs, info = env.reset(seed=seed)
        for pos in range(len(base.order)):
            if pos:
                obs, info = env.reset()
            hand, done = base.slot.instance.payload, False
            agent.begin_instance(obs, info)  # as the runner does (the oracle's posterior is per hand)
            while not done:
                table = info["table"]
                if not table["over"]:
                    assert_table_is_the_library_s(table, library_replay(hand, base.hand_log))
                    assert obs.startswith("Invalid action") or f"To call: {table['to_call']}." in obs
                obs, reward, term, trunc, info = env.step(agent.act(obs, info))
                done = term or trunc
            game = library_replay(hand, base.hand_log)
            assert not game.is_hand_running() and info["table"]["over"]
            assert reward * SPEC["blinds"]["big"] == game.players[0].chips - SPEC["stack"] == info["table"]["result"]
            assert [h[2:] for h in info["table"]["history"]] == [[kind, total] for *_, kind, total in base.hand_log]
            agent.end_instance(reward, info)


def test_strength_features():
    board = cards("Ks 7c 2d")
    assert strength(cards("Ah Ad"), board).tier == 4  # overpair
    assert strength(cards("7h 7d"), board).tier == 5  # set
    assert strength(cards("Kh Qd"), board).tier == 4 and strength(cards("Kh 5d"), board).tier == 3
    assert strength(cards("7h 5d"), board).tier == 2 and strength(cards("2h 5d"), board).tier == 1
    assert strength(cards("Ah Qd"), board).tier == 0 and not strength(cards("Ah Qd"), board).overcards
    assert strength(cards("Ah Qd"), cards("Js 7c 2d")).overcards
    assert strength(cards("Ah 5h"), cards("Kh 7h 2c")).flush_draw
    assert strength(cards("9h 8d"), cards("7s 6c 2d")).straight_draw
    assert not strength(cards("9h 8d"), cards("7s 6c 2d 3h 4h")).straight_draw  # no draws on the river
    assert preflop_pct(cards("As Ac")) > 0.99 and preflop_pct(cards("7s 2c")) < 0.05


def opponent_decisions(style: str, hands: int = 300, hero=None):
    """(spot, decision) of the named style against `hero` (default: the default playbook)."""
    from clbench.agents.poker import PLAYBOOKS, BOARD_LEN

    hero = hero or PLAYBOOKS["default"]
    opp = make_opponent(SPEC["opponents"][{"calling_station": "Mara", "fit_or_fold": "Quinn",
                                           "loose_aggressive": "Dex"}[style]])
    seen = []
    for k, deal in enumerate(deal_hands(11, hands)):
        b, holes = Betting(k % 2, 1000, 5, 10), (deal.agent, deal.opponent)
        while not b.over:
            spot = b.spot(holes[b.to_act], deal.board[:BOARD_LEN[b.street]])
            d = spot.legalize((hero if b.to_act == 0 else opp).decide(spot))
            if b.to_act == 1:
                seen.append((spot, d))
            b.apply(d)
    return seen


def share_near(hits, target: float, slack: float = 0.1) -> bool:
    """The share of True in `hits` (a few hundred decisions) is `target` within `slack`."""
    return len(hits) >= 50 and abs(np.mean(hits) - target) <= slack


def test_opponents_play_their_styles():
    """Each kind's exploitable play, and its mixed visible moves: a share of hands (by `Strength.code`, whatever
    the cards) played with a move another kind makes, so no single move is a certain tell."""
    from clbench.agents.poker import bet_share
    from clbench.agents.poker_redteam import BetSizing

    mara = SPEC["opponents"]["Mara"]
    station = opponent_decisions("calling_station") + opponent_decisions("calling_station", 200, BetSizing(2.0, 1))
    assert all(not s.raises for s, d in station if d.kind == RAISE)  # never raises a bet ...
    assert all(d.kind == RAISE for s, d in station if not s.raises and s.strength.code < 100 * mara["raise_pct"]
               and (s.street == 0 or not s.to_call))  # ... but opens a drawn share of its hands, any two cards
    assert share_near([d.kind == RAISE for s, d in station if s.street == 0 and not s.raises], mara["raise_pct"])
    assert share_near([d.kind == RAISE for s, d in station if s.street and not s.to_call], mara["stab_pct"])

    def big(s):
        return s.to_call > mara["big_share"] * max(s.pot - s.to_call, 4 * s.big_blind)
    assert all(d.kind != FOLD for s, d in station if s.raises and not big(s))  # calls every bet up to about the pot
    assert all((s.strength.tier < 1) if s.street else (s.strength.pct < 1 - mara["big_pct"])
               for s, d in station if d.kind == FOLD)  # an overbet only finds a pair or a good hand
    quinn = SPEC["opponents"]["Quinn"]
    fof = [(s, d) for s, d in opponent_decisions("fit_or_fold") if s.street > 0]
    assert all(s.strength.tier >= 5 for s, d in fof if d.kind == RAISE and s.to_call)  # raises a bet with strength
    assert all(s.strength.tier >= 3 for s, d in fof if s.to_call and d.kind != FOLD)  # fits or folds
    assert any(d.kind == FOLD for s, d in fof if s.strength.tier == 2)  # folds middle pairs
    weak = [(s, d) for s, d in fof if not s.to_call and s.strength.tier < quinn["value_tier"]]
    assert share_near([d.kind == RAISE for s, d in weak], quinn["stab_pct"])  # and stabs a share of the rest
    buttons = [(s, d) for s, d in opponent_decisions("fit_or_fold", 600)
               if s.street == 0 and not s.raises and s.to_call]
    assert share_near([d.kind == RAISE for s, d in buttons], quinn["open_pct"])
    assert share_near([d.kind == CALL for s, d in buttons if d.kind != RAISE], quinn["limp_pct"])
    lag = opponent_decisions("loose_aggressive") + opponent_decisions("loose_aggressive", 200, BetSizing(0.5, 1))
    dex = SPEC["opponents"]["Dex"]
    flop = [(s, d) for s, d in lag if s.street == 1 and not s.to_call]
    assert all(d.kind == RAISE for s, d in flop if s.strength.tier >= 4 or s.strength.draw)  # bets what it has
    assert share_near([d.kind == RAISE for s, d in flop if s.strength.tier < 4 and not s.strength.draw],
                      dex["flop_pct"])  # and most of what it has not
    late = [(s, d) for s, d in lag if s.street >= 2]
    assert any(d.kind == RAISE and s.strength.tier <= 0 for s, d in late)  # barrels weak hands
    assert any(d.kind == CALL and s.strength.tier <= 0 for s, d in late)  # and calls small bets with nothing
    assert all(d.kind == CALL for s, d in late if s.to_call and 1 <= s.strength.tier < 4 and d.kind != RAISE
               and bet_share(s) <= dex["call_share"])  # a pair calls by pot odds
    assert all(d.kind == FOLD for s, d in late if s.to_call and s.strength.tier <= 0 and not s.strength.draw
               and bet_share(s) > dex["float_share"])
    opens = [d.kind != FOLD for s, d in lag if s.street == 0 and not s.raises and s.to_call]
    assert np.mean(opens) > 0.75
    played = [d.kind == CALL for s, d in lag if s.street == 0 and not s.raises and s.to_call and d.kind != FOLD]
    assert share_near(played, dex["limp_pct"])  # limps a share of the buttons it plays


EXPLOITS = ("calling_station", "fit_or_fold", "loose_aggressive")


def exploit_matrix(worlds=(None, 1, 2), redeals=range(1, 4)) -> dict[tuple[str, str], float]:
    """{(line, kind): mean big blinds per hand} of the reference's line ("default") and each kind's exploit
    against the opponents of each kind, over re-deals of the canonical and a few fresh worlds (every line on
    the same hands)."""
    from clbench.agents.poker import PLAYBOOKS
    from clbench.agents.poker_redteam import replay
    from clbench.envs.poker.poker_env import PokerEnv

    envs = [PokerEnv(world_seed=w) for w in worlds]
    return {(line, kind): float(np.mean([r for env in envs for k in redeals
                                         for r in replay(env, PLAYBOOKS[line], k, kind).values()]))
            for line in ("default", *EXPLOITS) for kind in EXPLOITS}


def test_each_kind_has_its_own_exploit():
    """What wins against one kind loses against another: each kind's exploit earns the most against its own
    kind; bluffing and catching lines give up most of what thin value takes from a station, and the station's
    line leaves much of what bluffs take from fit-or-fold (v7: -1.88 vs 0.69 bb/hand; v6: 0.93 vs 1.11)."""
    m = exploit_matrix()
    for kind in EXPLOITS:
        assert m[(kind, kind)] == max(m[(e, kind)] for e in EXPLOITS), (kind, m)
        # the line itself bets every pair for value: against a station its exploit only ties it (12.63 both, v7)
        assert m[(kind, kind)] >= m[("default", kind)] - 0.05, (kind, m)
    for e in ("fit_or_fold", "loose_aggressive"):
        assert m[(e, "calling_station")] < m[("calling_station", "calling_station")] - 3, m
    assert m[("calling_station", "fit_or_fold")] < m[("fit_or_fold", "fit_or_fold")] - 0.1, m


def test_no_opponent_blind_trap_or_exploit_line_reaches_the_reference():
    """v5's trap (check strong hands to a bettor) and each kind's exploit, played against every opponent
    without reading who it is: a memoryless line of a kind the red team's families do not hold. On the
    canonical world's benchmark deals each stays below the stateless reference, and over 40 held-out deals
    none is measurably above it: its paired lead per deal is under two standard errors (v6: the station's
    exploit played blind tied the line in expectation, +0.00 +- 0.2 bb/hand, 1.66 vs 2.34 on the benchmark;
    v7's canonical world meets each kind in 40 hands)."""
    from clbench.agents.poker import EXPLOIT_PARAMS, REFERENCE_PARAMS, DefaultPlay
    from clbench.agents.poker_redteam import replay
    from clbench.envs.poker.poker_env import PokerEnv

    env = PokerEnv()
    lines = [DefaultPlay(**{**REFERENCE_PARAMS, "trap_tier": t}) for t in (2, 3, 4, 5)]
    lines += [DefaultPlay(**params) for params in EXPLOIT_PARAMS.values() if params != REFERENCE_PARAMS]

    def per_deal(line, deals) -> np.ndarray:
        return np.array([np.mean(list(replay(env, line, d).values())) for d in deals])

    bench = [r for d in range(5) for r in replay(env, STATELESS, d).values()]
    assert np.mean(bench) == pytest.approx(SPEC["r_reference"], abs=1e-6)  # the betting model is the game
    held = per_deal(STATELESS, range(10, 50))
    for line in lines:
        assert np.mean([r for d in range(5) for r in replay(env, line, d).values()]) < np.mean(bench), line
        lead = per_deal(line, range(10, 50)) - held
        assert lead.mean() < 2 * lead.std(ddof=1) / np.sqrt(lead.size), (line, lead.mean())


# ---------------------------------------------------------------- agents
def test_reference_learns_each_opponent_and_recovers_faster_on_return():
    from clbench.agents.poker import LAG, PLAYBOOKS, book_for

    env = make()
    passes = {seed: play(env, None, seed=seed, stateless=True) for seed in range(5)}  # deal s: seed s's pass
    assert np.mean([r for p in passes.values() for r in p.values()]) == pytest.approx(SPEC["r_reference"], abs=1e-6)
    first = []
    for seed in range(5):
        agent = make_agent("reference", env, seed=seed)
        stateful, stateless = play(env, agent, seed=seed), passes[seed]
        first += [stateful[s.instance_id] - stateless[s.instance_id] for s in env.unwrapped.order
                  if s.variant in ("1-Mara", "2-Dex", "4-Quinn") and s.variant_position == 0]
        styles = {name: b.likeliest() for name, b in agent.beliefs.items()}
        # each name's last policy: Dex and Quinn never change; Mara ends adapted (the drift), and ten hands after
        # her change the belief has left the station (test_a_changed_player_is_re_read_within_a_few_hands)
        last = {SPEC["opponents"][v["opponent"]].get("name", v["opponent"]): SPEC["opponents"][v["opponent"]]["style"]
                for v in SPEC["schedules"]["default"]}
        assert last["Mara"] == "loose_aggressive" and styles["Mara"] != "calling_station"
        assert {n: s for n, s in styles.items() if n != "Mara"} == {n: s for n, s in last.items() if n != "Mara"}
    # first meeting: the first hand is played exactly as without memory (gain 0, every rollout); a returning
    # opponent that did not change is met as the kind it was before it has made a move: its exploit where the
    # belief is confident (`CONFIDENT`), else the line
    assert first == [0] * 15

    class Recording(PokerReference):
        def act(self, observation, info):
            belief = self.beliefs.get(info["table"]["opponent"])
            self.books.setdefault(info["instance_id"], belief and (belief.likeliest(), book_for(belief.p)))
            return super().act(observation, info)

    met = []
    for seed in range(5):
        agent = Recording(env.unwrapped.agent_card, seed=seed)
        agent.books = {}
        play(env, agent, seed=seed)
        first = min((s for s in env.unwrapped.order if s.variant == "5-Dex"), key=lambda s: s.position)
        met.append(agent.books[first.instance_id])
    # a loose-aggressive player mixes in a fit-or-fold player's moves: 20 hands leave it likeliest in most rollouts
    assert sum(kind == LAG for kind, _ in met) >= 3, met
    assert all(book is PLAYBOOKS[kind] or book is PLAYBOOKS["default"] for kind, book in met), met


def reference_gains(env, seeds) -> list[float]:
    """Per rollout seed, the stateful reference's mean over its stateless line, hand by hand on the same cards."""
    gains = []
    for seed in seeds:  # rollout s and stateless pass s play the same deal
        stateless = play(env, None, seed=seed, stateless=True)
        stateful = play(env, make_agent("reference", env, seed=seed), seed=seed)
        gains.append(np.mean([stateful[i] - stateless[i] for i in stateful]))
    return gains


def test_reference_gains_over_its_stateless_line_on_the_benchmark():
    """Learning each opponent pays on the benchmark's five deals: the mean gain is above 0. Its interval is
    not: v7's reference gains +0.62 [0.41, 0.84] bb/hand over its stateless pass (one hand's read) in 100
    re-dealt rollouts (the next test), but the benchmark's five deals give +0.25 [-0.41, 1.01] (v6 +0.11
    [-1.08, 1.29]); 600 hands cannot tell a gain this size from the cards' luck (docs/poker-variance-levers.md)."""
    gains = reference_gains(make(), range(5))
    assert np.mean(gains) > 0, gains


def test_reference_learning_pays_in_expectation():
    """... and in expectation: over 100 rollouts on twenty re-deals (other cards, the same opponents and seats)
    the reference's gain over its stateless pass is above 0 with its interval (v7: +0.62 [0.41, 0.84] bb/hand;
    v5: +0.38 +- 0.11; v4's
    exploits, fitted on 3 deals, gave -0.09 +- 0.11; 30 rollouts are too few: +0.26, interval from -0.13)."""
    gains = [g for redeal in range(1, 21) for g in reference_gains(make(redeal=redeal), range(5))]
    assert estimate(gains)["ci"][0] > 0, (np.mean(gains), gains)


@pytest.mark.parametrize("world", [None, 3])
def test_a_changed_player_is_re_read_within_a_few_hands(world):
    """The reference's belief may drift (`HAZARD`), so when the returning player comes back as another kind (the
    canonical world: station to loose-aggressive; world 3: the other way round), its moves carry the belief to
    the new kind (the likeliest): over 20 rollouts (4 deals x 5 seeds) within a median of 3 of the return's hands
    and within the variant in 18 of 20 rollouts at least; the frozen reference (`freeze_at`, as `clbench
    drift-check` plays it) never changes its read."""
    waits = []
    for redeal in range(4):
        env = make(world_seed=world, redeal=redeal)
        back = env.unwrapped.schedule.variants[2]
        new_kind = env.unwrapped.opponents[back.instances[0].payload.policy].style
        old_kind = env.unwrapped.opponents[env.unwrapped.schedule.variants[0].instances[0].payload.policy].style
        assert new_kind != old_kind
        for seed in range(5):
            reads = []

            class Reading(PokerReference):
                def end_instance(self, reward, info):
                    super().end_instance(reward, info)
                    if info["instance_id"].startswith(f"{back.name}-"):
                        reads.append(self.beliefs[info["table"]["opponent"]].likeliest())

            play(env, Reading(env.unwrapped.agent_card, seed=seed), seed=seed)
            waits.append(reads.index(new_kind) + 1 if new_kind in reads else len(reads) + 1)
            start = env.unwrapped.schedule.variant_starts()[back.name]
            frozen = Reading(env.unwrapped.agent_card, seed=seed, freeze_at=start)
            reads.clear()
            play(env, frozen, seed=seed)
            assert len(set(reads)) == 1, reads  # what it believed at the freeze, whatever the hands show
    assert len(waits) == 20 and np.median(waits) <= 3 and sum(w <= len(back.instances) for w in waits) >= 18, waits


def test_reference_state_round_trip():
    env = make("short")
    agent = make_agent("reference", env)
    play(env, agent)
    clone = PokerReference(env.unwrapped.spec_card)
    clone.load_state_dict(json.loads(json.dumps(agent.state_dict())))
    assert {n: b.likeliest() for n, b in clone.beliefs.items()} == \
        {n: b.likeliest() for n, b in agent.beliefs.items()}
    assert clone.beliefs["Mara"].p == agent.beliefs["Mara"].p


def test_oracle_posterior_always_holds_the_true_cards():
    env = make("short")
    oracle = make_agent("oracle", env)
    assert oracle.privileged and "Quinn" in oracle.opponents
    checked = 0
    for slot in env.unwrapped.schedule.order(0):
        obs, info = env.reset(options={"instance": slot.instance_id, "stateless": True})
        oracle.begin_instance(obs, info)
        truth = tuple(slot.instance.payload.deal.opponent)
        done = info["table"]["over"]
        while not done:
            table = info["table"]
            hole, board = hand_cards(table)
            combos = oracle.consistent_holdings(table, oracle.opponents[table["opponent"]], hole, board)
            assert truth in combos or truth[::-1] in combos
            checked += 1
            obs, r, term, trunc, info = env.step(oracle.act(obs, info))
            done = term or trunc
    assert checked >= 12

# (the oracle's lead over the stateless reference on the benchmark's five deals, with its paired interval:
# tests/test_calibration.py::test_poker_r_max_standard_error_matches_the_oracle_and_its_lead_is_real)



# ---------------------------------------------------------------- what agents are told, worlds, vectors
def test_agent_card_says_nothing_about_styles_or_the_change():
    base = make().unwrapped
    told = json.dumps(base.agent_card).lower()
    assert not re.search(r"\b(style|changed|adapt|fixed|station|aggress|fit\b)", told)
    variants = json.dumps(base.spec_card.to_dict()["variants"]).lower()
    assert not re.search(r"\b(style|changed|adapt)", variants)


def test_public_text_holds_no_canonical_opponent_value():
    import inspect
    from pathlib import Path

    import clbench.agents.poker as agents_mod
    import clbench.envs.poker.opponents as opponents_mod
    import clbench.envs.poker.poker_env as env_mod

    secrets = gym.make(ENV_ID).unwrapped.public_secrets()
    assert "Mara is a calling station" in secrets and "open_pct: 0.85" in secrets
    root = Path(env_mod.__file__).resolve().parents[2]
    yaml_comments = "\n".join(line.split("#", 1)[1] for line in (root / "tasks/poker/default.yaml").read_text().splitlines()
                              if "#" in line)
    base = make().unwrapped
    texts = {"README": (root / "README.md").read_text(), "yaml comments": yaml_comments,
             **{f"docs/{p.name}": p.read_text() for p in (root / "docs").glob("*.md")},
             "agent card": json.dumps(base.agent_card), "spec card": json.dumps(base.spec_card.to_dict()),
             **{m.__name__: inspect.getdoc(m) or "" for m in (env_mod, opponents_mod, agents_mod)},
             "env docstring": inspect.getdoc(env_mod.PokerEnv)}
    found = {(where, s) for where, text in texts.items() for s in secrets if s.lower() in text.lower()}
    assert not found


def _keys(base) -> list[str]:
    """The policies of a world's places: its players in the order the default schedule meets them, with the
    changing player's policy after its change where it comes back changed."""
    out, seen = [], set()
    for variant in base.schedule.variants:
        hand = variant.instances[0].payload
        if hand.opponent not in seen or hand.policy != hand.opponent:
            out.append(hand.policy)
        seen.add(hand.opponent)
    return out


def _players(base) -> list[tuple[str, str]]:
    """Each place's (name shown, kind): the answer a stateful agent learns, by name and by place (the
    parameters only tune how much each exploit earns)."""
    specs = base.opponent_specs
    return [(specs[key].get("name", key), specs[key]["style"]) for key in _keys(base)]


def _places(base) -> tuple[str, ...]:
    return tuple(kind for _, kind in _players(base))


def test_worlds_draw_the_opponents_their_names_and_the_change():
    canonical = make().unwrapped
    names = {name for name, _ in _players(canonical)}
    seen = []
    for kwargs in ({"world_seed": 1}, {"world_seed": 2}, {"split": "train"}, {"split": "train", "world_seed": 1}):
        base = gym.make(ENV_ID, **kwargs).unwrapped
        specs = base.opponent_specs
        assert specs == gym.make(ENV_ID, **kwargs).unwrapped.opponent_specs  # deterministic
        players = _players(base)
        assert len(players) == 4 and players[0][0] == players[2][0]  # the first player returns ...
        assert players[2][1] in CHANGES[players[0][1]]  # ... changed, in every world
        assert not names & {name for name, _ in players}  # never a canonical name
        assert {s.instance.payload.opponent for s in base.schedule.order(0)} == {name for name, _ in players}
        deal = base.schedule.order(0)[0].instance.payload.deal
        assert deal != canonical.schedule.order(0)[0].instance.payload.deal
        seen.append(json.dumps(specs, sort_keys=True))
    assert len(set(seen)) == len(seen)
    drift = base.spec_data["drifts"]["default"][0]  # the declared drift follows the drawn names
    assert drift["variant"] == f"3-{players[0][0]}" and drift["variant"] in base.schedule.variant_starts()


def test_no_train_or_fresh_world_has_a_canonical_or_train_answer():
    """Red team (s16, Poker-v5): the reference trained on split="train" and then frozen scored 2.879 on the
    benchmark, as much as the stateful reference (2.878; r_reference 2.125): the train split's players played
    the canonical kinds. Since v6 no answer carries between the splits, whether it is keyed by a player's name
    or by its place in the schedule: every train world's player plays another kind than the canonical
    world's player in the same place, no test world has the canonical world's or a train world's kinds in
    their places, and no drawn world uses a canonical name. Train and test worlds share structure, never
    answers (40 worlds of each split)."""
    canonical = _places(make().unwrapped)
    train = {(w, _places(gym.make(ENV_ID, split="train", world_seed=w).unwrapped)) for w in (None, *range(1, 41))}
    assert all(all(k != c for k, c in zip(places, canonical)) for _, places in train), train
    test = {w: _places(gym.make(ENV_ID, world_seed=w).unwrapped) for w in range(1, 41)}
    taken = {places for _, places in train} | {canonical}
    assert not {w: p for w, p in test.items() if p in taken}
    assert len(set(test.values())) >= 5  # the test worlds spread over many of the 7 answers, not one or two


def test_a_train_worlds_answer_by_place_loses_on_the_benchmark():
    """The train-learned attack keyed by place, which the red team's generic one (keyed by the names the
    reference's state holds, clbench/redteam.py) cannot play: in each place of the schedule, the exploit of
    the kind a train world had there, i.e. everything a train world can teach, carried over by place. Every
    train world's places hold other kinds than the canonical world's, so on the benchmark's five deals each
    such line earns less than the stateless reference's line (measured: 0.16 at best against 2.34)."""
    from clbench.agents.poker import PLAYBOOKS

    base = make().unwrapped
    place_of = {base.opponents[key]: i for i, key in enumerate(_keys(base))}
    answers = {_places(gym.make(ENV_ID, split="train", world_seed=w).unwrapped) for w in (None, *range(1, 13))}
    reference = kind_aware(base, lambda opp: STATELESS, range(base.deals))
    carried = {a: kind_aware(base, lambda opp, a=a: PLAYBOOKS[a[place_of[opp]]], range(base.deals)) for a in answers}
    assert max(carried.values()) < reference, (reference, carried)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_steps_through_several_hands(mode):
    """Every info field keeps its type, so gymnasium stacks infos of sub-envs at different points of
    different hands (before v2: an int in one sub-env and None in another crashed the vector)."""
    from clbench.agents.poker import PLAYBOOKS, table_spot, action_text

    kwargs = {"vector_kwargs": {"shared_memory": False}} if mode == "async" else {}
    envs = gym.make_vec(ENV_ID, 3, vectorization_mode=mode, **kwargs)
    try:
        obs, infos = envs.reset(seed=0)
        ends = 0
        for step in range(160):
            actions = []
            for i in range(3):
                table = {k: infos["table"][k][i] for k in infos["table"] if not k.startswith("_")}
                if table["over"]:
                    actions.append("CHECK")
                else:  # sub-envs play differently, so they stand at different points of different hands
                    book = PLAYBOOKS["default"] if i else PLAYBOOKS["calling_station"]
                    actions.append(action_text(table_spot(table).legalize(book.decide(table_spot(table)))))
            obs, rewards, term, trunc, infos = envs.step(actions)
            ends += int(np.sum(term | trunc))
        assert ends >= 12  # several instance boundaries in every sub-env
        assert infos["table"]["to_call"].dtype.kind == "i"
    finally:
        envs.close()


def family_points(full: bool = False):
    """(agent class, policy class, params) of every declared red-team family point."""
    from clbench import redteam
    from clbench.agent import load_object

    for fam in redteam.families(make().unwrapped.__class__).values():
        cls = load_object(fam.cls)
        for params in fam.points(full):
            yield cls, cls.policy_class, params


@pytest.mark.parametrize("schedule", ["short", "drift_short"])
def test_replay_gives_the_chips_the_env_gives(schedule):
    """`poker_redteam.replay` (the betting model, no runner) pays every family point hand for hand
    what the env pays it: the wide search measures the env itself."""
    from clbench.agents.poker_redteam import replay

    env = make(schedule)
    base = env.unwrapped
    points = list(family_points())
    checked = 0
    for cls, policy_class, params in points[::3]:
        fast = replay(base, policy_class(**params))
        for slot in base.schedule.order(0):
            obs, info = env.reset(seed=0, options={"instance": slot.instance_id, "stateless": True})
            out = play_instance(env, cls(base.agent_card, seed=0, **params), obs, info, [])
            assert out["reward"] == pytest.approx(fast[slot.instance_id]), (cls.__name__, params, slot.instance_id)
            checked += 1
    assert checked >= 10 * len(base.schedule.order(0))


def test_redeals_keep_the_schedule_and_change_only_the_cards():
    """`hands(env, k)`: re-deal k keeps every hand's id, seat and opponent, deals other cards (the same for
    the same k), and re-deal 0 is the benchmark's own deal, so `replay` measures play apart from luck."""
    from clbench.agents.poker_redteam import hands

    base = make("short").unwrapped
    own, first, again, second = (hands(base, k) for k in (0, 1, 1, 2))
    assert [h[1] for h in own] == [inst.payload.deal for v in base.schedule.variants for inst in v.instances]
    for a, b in ((own, first), (first, second)):
        assert [(h[0], h[2], h[3]) for h in a] == [(h[0], h[2], h[3]) for h in b]
        assert all(x[1] != y[1] for x, y in zip(a, b))
    assert [h[1] for h in first] == [h[1] for h in again]
    for deal in (h[1] for h in second):
        assert len(set(deal.agent) | set(deal.opponent) | set(deal.board)) == 9


def test_each_rollout_seed_plays_its_own_deal_and_the_stateless_passes_follow():
    """Rollout seed s plays deal s % 5 (hands(env, s % 5)), the same ids and seats with other cards; seed 5
    plays deal 0 again, `redeal=1` holds deals 5-9; every deal of a hand differs; a run's stateless passes
    are one per rollout seed, so both sides of the gain average over the same deals."""
    from clbench.agents.poker_redteam import hands
    from clbench.runner import RunConfig, stateless_plan

    env = make("short")
    base = env.unwrapped
    assert base.deals == 5
    played = {}
    for seed in (0, 1, 4, 5, 6):
        env.reset(seed=seed)
        cards = {inst.instance_id: inst.payload.deal for v in base.schedule.variants for inst in v.instances}
        assert base.deal_index == seed % 5
        assert list(cards.values()) == [h[1] for h in hands(base, seed % 5)]
        played[seed] = cards
    assert played[5] == played[0] and played[6] == played[1]
    assert all(played[0][i] != played[1][i] != played[4][i] for i in played[0])
    again = make("short", redeal=1).unwrapped
    assert [h[1] for h in hands(again, 5)] == [inst.payload.deal for v in again.schedule.variants for inst in v.instances]
    assert stateless_plan(RunConfig(env_id=ENV_ID, agent="reference", out="x", rollouts=5))["passes"] == 5


def test_selection_gain_separates_the_luckiest_point_from_the_best_play():
    """`selection`: the grid's maximum on a deal set is at least its best point there (the gain is >= 0), the
    best point is the one with the best mean over the re-deals, and the reference's rows are its own replays."""
    from clbench import redteam
    from clbench.agents.poker_redteam import mean_over, selection

    base = make("short").unwrapped
    fams = {k: v for k, v in redteam.families(type(base)).items() if k in ("card_blind_sizing", "push_fold")}
    out = selection(base, fams, STATELESS, redeals=3, full=False)
    assert out["selection_gain_max"] >= out["selection_gain"] >= 0
    assert out["benchmark_max"] >= out["benchmark_best_point"]
    ref0 = mean_over(base, STATELESS, range(base.deals))  # column 0: the benchmark's five deals
    assert out["benchmark_reference"] == pytest.approx(ref0)
    assert out["max_minus_reference"][0] == pytest.approx(out["benchmark_max"] - ref0)
    assert out["best_point"][0] in fams and len(out["max_minus_reference"]) == 4


def fit_module():
    return fit_script("poker")


def test_the_reference_reads_with_what_the_train_worlds_fit():
    """The reference's reading comes from tasks/poker/fit_reference.py on train-split worlds only: each kind's
    moves' shares (`TELLS`), the belief from which a read plays each kind's exploit (`CONFIDENT`, one per kind, for
    one hand's read)
    and the beliefs' drift (`HAZARD`, for the stateful reference) reproduce from there. No kind's share of a
    move is 0 or 1: one surprising move lowers a read, never ends it."""
    from clbench.agents import poker

    fit = fit_module()
    envs = fit.train_worlds()
    assert fit.tells(envs) == poker.TELLS
    if os.environ.get("CLBENCH_SLOW") == "1":  # ~15 minutes: 25 worlds x 12 deals at each point of the search
        assert fit.reading(envs) == (poker.CONFIDENT, poker.HAZARD)
    assert len(poker.CONFIDENT) == len(poker.KINDS) and set(poker.CONFIDENT) <= set(fit.CONFIDENT_GRID)
    assert poker.HAZARD in fit.HAZARD_GRID
    assert all(0 < share < 1 for shares in poker.TELLS.values() for share in shares)
    for situation in {key[:2] for key in poker.TELLS}:  # each kind's shares of a situation's moves sum to 1
        moves = [shares for key, shares in poker.TELLS.items() if key[:2] == situation]
        assert np.allclose(np.sum(moves, axis=0), 1, atol=1e-3), situation


def test_the_reference_reads_an_unmet_player_from_the_generators_place_priors():
    """v9: the prior an unmet player is read from (`PLACE_PRIORS`) is what `fit_reference.py --places` counts, how
    often the world generator seats each kind at each place, over test worlds 1001-1400 (never one a verdict judges:
    `poker_redteam.GENERATOR_WORLDS`), and it is used at the place the hand's number tells, on the default schedule
    only. No kind's prior is 0 (the changing player is never drawn fit-or-fold, yet a read can still find one)."""
    from clbench.agents import poker
    from clbench.agents.poker_redteam import GENERATOR_WORLDS, place_priors

    assert min(GENERATOR_WORLDS) > max(RED_TEAM_WORLDS[1:] or [0]) and min(GENERATOR_WORLDS) > 20
    assert tuple(tuple(round(x, 4) for x in p) for p in place_priors()) == poker.PLACE_PRIORS
    assert all(0 < x < 1 for p in poker.PLACE_PRIORS for x in p)
    assert [poker.place_of(h, 120) for h in (1, 40, 41, 60, 61, 70, 71, 110, 111, 120)] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert poker.place_of(3, 12) is None and poker.prior_at(None) == poker.UNIFORM
    with pytest.raises(TypeError, match="place"):
        STATELESS.decide(None)  # a placed read cannot be played without its place


def test_fitted_reference_is_a_coordinate_optimum_of_its_train_fit():
    """REFERENCE_PARAMS come from tasks/poker/fit_reference.py on train-split worlds only: no grid value of a
    few parameters improves the fit's objective (all of them, and the whole refit, with CLBENCH_SLOW=1)."""
    from clbench.agents.poker import REFERENCE_PARAMS

    fit = fit_module()
    envs = fit.train_worlds()
    assert all(env.split == "train" for env in envs)
    if os.environ.get("CLBENCH_SLOW") == "1":
        assert fit.fit(envs)[0] == REFERENCE_PARAMS
        return
    best = fit.score(envs, REFERENCE_PARAMS)
    for name in ("open_at", "catch_tier"):
        for v in fit.GRID[name]:
            assert fit.score(envs, {**REFERENCE_PARAMS, name: v}) <= best + 1e-9, (name, v)


FULL = os.environ.get("CLBENCH_SLOW") == "1"
RED_TEAM_WORLDS = [None, *(range(1, 21) if FULL else (1, 2, 5))]
FRESH_WORLDS = [w for w in RED_TEAM_WORLDS if w is not None]


@functools.lru_cache(maxsize=None)
def red_team_verdict(world) -> tuple[float, dict, float, dict]:
    """The red team's verdict in one world: each family's point chosen by its mean over five held-out deals
    (never the benchmark's hands; full grids with CLBENCH_SLOW=1), then played on the benchmark's five deals
    and on 40 other held-out deals. Returns (reference on the benchmark, {family: its benchmark mean},
    reference over the held-out deals, {family: (its mean there, its paired lead's standard error)})."""
    from clbench import redteam
    from clbench.agents.poker_redteam import benchmark_deals, choose, held_out_deals, mean_over, world_env
    from clbench.envs.poker.poker_env import PokerEnv

    base = world_env(world)
    chosen = choose(base, redteam.families(PokerEnv), full=FULL)
    assert list(held_out_deals(base)) == [5, 6, 7, 8, 9]  # what `choose` looks at: no benchmark deal
    bench = benchmark_deals(base)
    ref = held_out_per_deal(world, STATELESS)
    expected = {}
    for name, (_, p) in chosen.items():
        lead = held_out_per_deal(world, p) - ref
        expected[name] = (float(ref.mean() + lead.mean()), float(lead.std(ddof=1) / np.sqrt(lead.size)))
    return (mean_over(base, STATELESS, bench), {name: mean_over(base, p, bench) for name, (_, p) in chosen.items()},
            float(ref.mean()), expected)


def beats_in_expectation(mean_se: tuple[float, float], r_exp: float) -> bool:
    """A point's lead over the reference across 40 held-out deals is above 0 by two paired standard errors."""
    mean, se = mean_se
    return mean - r_exp > 2 * se
def test_red_team_points_chosen_on_redeals_stay_below_the_reference_on_the_benchmark():
    """The verdict on the benchmark (canonical world), by the red team's rule (`clbench.redteam`): no family's
    point, chosen on held-out deals, reaches r_reference on the benchmark's five deals unless the benchmark's
    cards favoured it: then it does not lead the reference over 40 other held-out deals. The readers come close:
    they play as the reference but where one hand's betting reads otherwise (a few hands in a hundred), so on
    600 hands either may be ahead by luck (on v8's canonical benchmark the likelihood reader at 0.75 scores 4.266
    against r_reference 4.154, and -0.10 bb/hand against the reference on 8 other re-deals). The betting model
    replays the runner's stateless reference."""
    r_ref, bench, r_exp, expected = red_team_verdict(None)
    assert r_ref == pytest.approx(SPEC["r_reference"])
    reached = {name for name, mean in bench.items() if mean >= r_ref}
    assert reached <= {"hand_reader", "likelihood_reader", "size_reader"}, (r_ref, bench)
    assert not any(beats_in_expectation(expected[name], r_exp) for name in reached), (r_exp, expected)


def test_a_size_reader_does_not_out_earn_the_stateless_reference():
    """A memoryless reader of the opponent's raise sizes (`SizeReader`: how much each kind bets as the train
    split shows it, on top of the reference's own in-hand read) does not lead the stateless reference over 100
    held-out canonical deals by two paired standard errors: neither its point chosen on held-out deals 5-9 nor
    the one at the reference's own `CONFIDENT`. Red team rt7, on v7.0, where each canonical kind raised by its
    own sizes (published in tasks/poker/default.yaml): leads of +0.28 +- 0.12 and +0.36 +- 0.11 bb/hand here;
    since then every kind draws its sizes alike (opponents.raise_mixed, bet_mixed), so the sizes a kind bets
    say nothing of it."""
    from clbench import redteam
    from clbench.agents.poker_redteam import SizeReader, choose, replay
    from clbench.envs.poker.poker_env import PokerEnv

    base = PokerEnv()
    (_, chosen), = choose(base, {"size_reader": redteam.families(PokerEnv)["size_reader"]}).values()
    deals = range(10, 110)

    def per_deal(policy):
        return np.array([np.mean(list(replay(base, policy, d).values())) for d in deals])

    ref = per_deal(STATELESS)
    leads = {p: per_deal(p) - ref for p in (chosen, SizeReader())}
    assert not any(d.mean() > 2 * d.std(ddof=1) / np.sqrt(d.size) for d in leads.values()), \
        {p: (d.mean(), d.std(ddof=1) / np.sqrt(d.size)) for p, d in leads.items()}


#: the per-world choice (red_team_verdict, fresh worlds): its best family's lead over the reference in expectation
#: (40 held-out deals) minus the canonical world's stays in this band (issue 29), bb/hand; measured -0.12..+0.61
#: with full grids over worlds 1-20, -0.06..+0.29 with the default grids over worlds 1, 2, 5
BEST_LEAD_BAND = (-0.3, 0.75)


def best_lead(world) -> float:
    """The lead in expectation (40 held-out deals) of the best family point chosen on re-deals of `world`."""
    _, _, r_exp, expected = red_team_verdict(world)
    return max(mean for mean, _ in expected.values()) - r_exp


@pytest.mark.parametrize("world", FRESH_WORLDS)
def test_points_chosen_on_a_fresh_worlds_redeals_stay_within_a_band_of_the_canonical_worlds(world):
    """A point chosen on a fresh world's own re-deals is not a memoryless policy of that world: it was tuned on
    hundreds of the world's hands, far more of the world than the stateful agent ever sees, so its lead measures
    how well the world can be learned, which is the reference's learning gain's business, not the red team's (the
    memoryless threat is test_train_chosen_frozen_points_do_not_lead_the_reference_pooled_over_fresh_worlds). What
    issue 29 asks of it: the best chosen point's lead over the reference in expectation (40 held-out deals) stays
    within BEST_LEAD_BAND of the canonical world's. Measured with full grids (bb/hand, lead over 40 held-out deals):
    canonical -0.16 (the likelihood reader); worlds 1-20 mean +0.10 +- 0.04, from -0.28 (world 15) to +0.45 (world
    7, the hand reader, z 2.8), above 0 by two paired standard errors in worlds 6 (the size reader, +0.07), 7 and 18
    (the hand reader, +0.42): those were the strict xfails EXPECTATION_FAILS = {6, 7, 18} (and, on the benchmark's
    deals, BENCHMARK_FAILS = {7, 18}) while a point chosen on the world was held to stay below the reference. The
    hand reader chosen on the train split and frozen leads in 7 (+0.18) and 18 (+0.52) too, worlds whose mix of kinds
    favours it, and trails in 11 of the 20: -0.18 +- 0.10 pooled (200 deals per world; the test below)."""
    assert BEST_LEAD_BAND[0] <= best_lead(world) - best_lead(None) <= BEST_LEAD_BAND[1], \
        (world, best_lead(world), best_lead(None), red_team_verdict(world))


#: families whose frozen point leads pooled over fresh worlds 1-20 (CLBENCH_SLOW=1; measured below): none since v9
#: (v7: kind_thresholds; v8: the generator-tuned place prior, `poker_redteam.PLACE_PRIOR`)
FROZEN_FAILS: set[str] = set()


@functools.lru_cache(maxsize=1)
def pooled_frozen() -> dict:
    """The pooled verdict over FRESH_WORLDS (`clbench.redteam.pooled_verdict`, as `clbench redteam --pooled-worlds`),
    by family: each family's train-chosen frozen point and its PooledLead."""
    return {r["family"]: r for r in redteam.pooled_verdict(ENV_ID, FRESH_WORLDS, full=FULL)["rows"]}


@pytest.mark.parametrize("family", [pytest.param(f, marks=pytest.mark.xfail(
    strict=True, reason="issue 29: this family's point, frozen on the train split, leads pooled"))
    if f in FROZEN_FAILS else f
    for f in sorted({*redteam.families(make().unwrapped.__class__), *FRESH_WORLD_FAMILIES, PLACE_PRIOR})])
def test_train_chosen_frozen_points_do_not_lead_the_reference_pooled_over_fresh_worlds(family):
    """issue 29: the threat a fresh world must hold against is a memoryless policy written without it. Each
    family's point (and `FRESH_WORLD_FAMILIES`') is chosen on the train split (`poker_redteam.train_choice`: 25 train
    worlds x 2 deals, never a test world), frozen and played on every fresh world; its per-world lead over the
    stateless reference on `poker_redteam.frozen_deals` held-out deals (200 with CLBENCH_SLOW=1, else 40), pooled over
    the worlds (mean, standard error across worlds; `clbench.redteam.pooled_verdict`), must not be above 0
    by two standard errors (`clbench.redteam.PooledLead`), but in FROZEN_FAILS. Measured on Poker-v9 with full grids
    (`clbench redteam --pooled-worlds 1-20 --full`: 200 deals per world), each family's frozen point: mean lead +- SE
    over worlds 1-20 (worlds where it leads):
      card_blind_sizing    -3.639 +- 0.490 (0)     strength_thresholds  -1.124 +- 0.073 (0)
      check_call           -3.864 +- 0.505 (0)     bet_give_up          -3.178 +- 0.483 (0)
      value_bluff          -1.222 +- 0.224 (0)     hand_reader          -0.263 +- 0.105 (8)
      likelihood_reader    -0.080 +- 0.022 (4)     size_reader          -0.098 +- 0.022 (3)
      push_fold            -3.318 +- 0.525 (0)     kind_thresholds      -0.065 +- 0.023 (5)
      place_prior          +0.000 +- 0.000 (0)
    On v7 kind_thresholds' point (a belief threshold per kind: calling station 0.8, fit-or-fold 0.5, loose-aggressive
    0.7, where v7's reference read every kind at 0.7) led by +0.016 +- 0.004 in 18 of 20 worlds (red team rt7). v8's
    reference fits a threshold per kind on the train split (agents/poker.py CONFIDENT) and lands on that very point.
    PLACE_PRIOR (red team s22) is not chosen on the train split: it is the reference's one-hand read with, for each
    place of the schedule (read off the hand's number), the kinds the public world generator seats there, counted on
    test worlds 1001-1400. The generator draws the kinds of the test split's worlds unevenly by place (the changing
    player is never fit-or-fold; a test world must share a place's kind with the canonical world, which the train
    split never does), so such a prior knows what the uniform prior does not: it led v8 by +0.060 +- 0.025 over
    worlds 1-20 (40 deals; 15 of 20 worlds; +0.11 +- 0.11 on the canonical world). v9's reference reads every unmet
    player from its place's prior (`PLACE_PRIORS`), so PLACE_PRIOR plays as the reference, and the uniform-prior
    readers (kind_thresholds, likelihood_reader, size_reader) trail it by more than on v8. Default grids (3 worlds,
    40 deals): every family below 2 SE."""
    from clbench.agents.poker_redteam import TRAIN_WORLDS, train_worlds

    assert all(env.split == "train" for env in train_worlds()) and len(TRAIN_WORLDS) == 25
    row = pooled_frozen()[family]
    assert not row["pooled"].leads, (family, row["params"], str(row["pooled"]), row["leads"])


def _stateful_on_deal(env, deal: int, flip: bool) -> float:
    """The stateful reference on the betting model over deal `deal` of `env`'s schedule (beliefs by name, each new
    player's from its place's prior, as `PokerReference` holds them); with `flip`, at the returning changed player's
    first hand its belief swaps station and loose-aggressive, as the public rule (`opponents.CHANGES`) says."""
    from clbench.agents.poker import Belief, ReadingPlay, prior_at
    from clbench.agents.poker_redteam import hands, places, play_hand

    beliefs, flipped, rewards, place = {}, set(), [], places(env)
    for iid, cards, button, opponent in hands(env, deal):
        name, at = iid.split("-")[-2], place[iid]
        belief = beliefs.get(name)
        if belief is None:
            belief = beliefs[name] = Belief(prior_at(at))
        elif flip and at == 2 and name not in flipped:
            belief.p = (belief.p[2], belief.p[1], belief.p[0])
            flipped.add(name)
        reward, seen = play_hand(env, cards, button, ReadingPlay(prior=tuple(belief.p)), opponent)
        belief.observe(seen)
        rewards.append(reward)
    return float(np.mean(rewards))


@pytest.mark.slow
def test_knowing_the_public_change_rule_does_not_lead_the_reference():
    """Red team s22, a stateful attack on what the code tells: in every world the returning player turns station <->
    loose-aggressive (`CHANGES`), so a reference that swaps its belief at her return's first hand, instead of
    re-reading her, uses a rule rather than the run. Pooled over fresh worlds 1-20 (20 held-out deals each) it must
    not lead the reference by two standard errors. Measured on v9: +0.022 +- 0.015 bb/hand (leads in 10 of 20; the
    belief's hazard re-reads her within a few hands anyway). Issue 29 lists how players change among what a world
    should draw; this test says when the rule starts to pay."""
    from clbench.agents.poker_redteam import world_env

    leads = [np.mean([_stateful_on_deal(world_env(w), k, True) - _stateful_on_deal(world_env(w), k, False)
                      for k in range(10, 30)]) for w in range(1, 21)]
    pooled = redteam.PooledLead.of(leads)
    assert not pooled.leads, str(pooled)


#: every fresh world on the slow run (v4's exploits left worlds 3, 10, 14 and 17 without learning headroom)
WORLDS = range(1, 21) if os.environ.get("CLBENCH_SLOW") == "1" else (1, 2)


def kind_aware(base, line, deals, variant: str | None = None) -> float:
    """Mean big blinds per hand over re-deals `deals` of `base`'s schedule (or of one variant) when each hand is
    played by `line(opponent)`: what a player who knows (or guesses) each opponent's kind can earn."""
    from clbench.agents.poker import BOARD_LEN
    from clbench.agents.poker_redteam import hands, hero_at, places

    out, place = [], places(base)
    for k in deals:
        for iid, deal, button, opponent in hands(base, k):
            if variant and f"{variant}-h" not in iid:
                continue
            hero = hero_at(line(opponent), place[iid])  # the stateless reference reads from the hand's place
            b, holes, players = Betting(0 if button else 1, 1000, 5, 10), (deal.agent, deal.opponent), (hero, opponent)
            while not b.over:
                spot = b.spot(holes[b.to_act], deal.board[:BOARD_LEN[b.street]])
                b.apply(spot.legalize(players[b.to_act].decide(spot)))
            out.append(b.payoff(0, holes, deal.board) / 10)
    return float(np.mean(out))


@pytest.mark.parametrize("world", WORLDS)
def test_worlds_keep_the_difficulty(world):
    """A fresh world is learnable like the canonical one, in expectation over re-deals (one deal of 120 hands is
    too noisy to show it): playing each opponent's kind's exploit out-earns the stateless reference (one hand's
    read), the reference's beliefs end on each player's last kind, and the change is real: on the hands after it
    the exploit of the kind the changing player had earns less than the exploit of the kind she has now."""
    from clbench.agents.poker import KINDS, PLAYBOOKS

    env = gym.make(ENV_ID, world_seed=world)
    base = env.unwrapped
    deals = range(10, 50)  # 40 held-out deals: on 6 the kind-aware lead (a few tenths of a bb/hand) flipped sign by luck
    r_ref = kind_aware(base, lambda opp: STATELESS, deals)
    assert kind_aware(base, lambda opp: PLAYBOOKS[opp.style], deals) > r_ref
    (_, before), _, (_, after), _ = players = _players(base)
    last = {v.name.split("-")[1]: v.name for v in base.schedule.variants}  # each name's last variant
    held: dict[str, list] = {}

    class Recording(PokerReference):
        def end_instance(self, reward, info):
            super().end_instance(reward, info)
            name = info["table"]["opponent"]
            if info["instance_id"].startswith(f"{last[name]}-"):
                held.setdefault(name, []).append(self.beliefs[name].p)

    play(env, Recording(base.agent_card))
    read = {name: KINDS[int(np.argmax(np.mean(ps, axis=0)))] for name, ps in held.items()}
    assert read == dict(players[1:]), (read, players)  # over its last variant, each player's belief on average
    changed = base.schedule.variants[2].name
    # 200 deals of the changed variant (2,000 hands): on 12 (120 hands) world 8's old exploit led by luck (+0.66
    # bb/hand), while over 200 every world 1-40's change costs its old exploit 2-15 bb/hand (issue 29)
    means = {style: kind_aware(base, lambda opp: PLAYBOOKS[style], range(1, 201), changed) for style in (before, after)}
    assert means[after] > means[before], means


def simulate(hero, opponent, hands: int, seed: int = 7) -> list[float]:
    """`hero`'s results in big blinds against `opponent` on the betting model (hero on the button every other hand)."""
    from clbench.agents.poker import BOARD_LEN

    out = []
    for k, deal in enumerate(deal_hands(seed, hands)):
        b, holes, players = Betting(k % 2, 1000, 5, 10), (deal.agent, deal.opponent), (hero, opponent)
        while not b.over:
            spot = b.spot(holes[b.to_act], deal.board[:BOARD_LEN[b.street]])
            b.apply(spot.legalize(players[b.to_act].decide(spot)))
        out.append(b.payoff(0, holes, deal.board) / 10)
    return out


def test_a_card_blind_first_in_aggressor_stays_below_the_reference():
    """A red-team attack of a kind no declared family plays (2026-11-26): card-blind, it bets `size` of the pot
    whenever it is first in (its button preflop, any street checked to it) and gives up to any bet above `share`
    of the pot, else calls. Measured on the grid below: -0.64 bb/hand at best on the benchmark (+0.03 to -5.2
    over 20 held-out deals), against v6's r_reference 2.125; the assertions hold it a big blind under v7's."""
    from dataclasses import dataclass

    from clbench.agents.poker_redteam import benchmark_deals, held_out_deals, mean_over
    from clbench.envs.poker.policy import Policy
    from clbench.envs.poker.poker_env import PokerEnv

    @dataclass(frozen=True)
    class FirstIn(Policy):
        size: float
        share: float

        def decide(self, s):
            first_in = s.max_raise and not s.raises and (s.to_call if s.street == 0 else not s.to_call)
            if first_in:
                return s.bet_pot(self.size)
            if s.to_call > self.share * max(1, s.pot - s.to_call):
                return s.check_or_fold()
            return s.check_or_call()

    env = PokerEnv()
    reference = STATELESS
    for deals in (benchmark_deals(env), held_out_deals(env, 2, 20)):
        r_ref = mean_over(env, reference, deals)
        for size in (0.33, 0.5, 1.0):
            for share in (0.25, 1.0):
                assert mean_over(env, FirstIn(size, share), deals) < r_ref - 1.0, (size, share, r_ref)


@pytest.mark.parametrize("world", [None, 3])
def test_nothing_an_agent_sees_in_play_names_a_kind_or_a_change(world):
    """An agent that reads the answer off what the env hands it, rather than learning it: over a whole
    stateful pass and the stateless pass, no observation, info, tool schema or spec card names an opponent's
    kind (in any spelling), the key of a changed player's policy, or an exploitable parameter's value
    (each instance's id names only its variant and opponent, which a player at the table sees anyway)."""
    env = make(**({} if world is None else {"world_seed": world}))
    base = env.unwrapped
    latent = base.latent()
    changed = {key for key in latent["opponents"] if key not in {inst.payload.opponent for v in base.schedule.variants
                                                                  for inst in v.instances}}
    assert changed  # the canonical world has a changed player, whose policy is played under its own key
    seen = [json.dumps(base.spec_card, sort_keys=True, default=str), json.dumps(base.tools)]

    class Reader(PokerReference):
        def act(self, observation, info):
            seen.append(observation + json.dumps(info, sort_keys=True, default=str))
            return super().act(observation, info)

    order = base.schedule.order(0)
    obs, info = env.reset(seed=0)
    agent = Reader(base.spec_card)
    for slot in order:
        if slot.position:
            obs, info = env.reset()
        play_instance(env, agent, obs, info, [])
    for slot in order[:30]:
        obs, info = env.reset(seed=0, options={"instance": slot.instance_id, "stateless": True})
        play_instance(env, Reader(base.spec_card), obs, info, [])
    text = "\n".join(seen).lower()
    names = {inst.payload.opponent for v in base.schedule.variants for inst in v.instances}
    assert len(seen) > 250 and len(names) == 3 and all(name.lower() in text for name in names)  # what a player sees
    for kind in ("calling_station", "loose_aggressive", "fit_or_fold"):
        for spelling in {kind, kind.replace("_", " "), kind.replace("_", "-")}:
            assert spelling not in text, spelling
    for key in changed:
        assert key.lower() not in text, key
    values = {f"{v}" for spec in latent["opponents"].values() for k, v in spec.items()
              if k not in ("style", "name") and isinstance(v, float) and len(f"{v}") > 3}
    assert values or world is None  # a drawn world's parameters have three decimals
    assert not {v for v in values if re.search(rf"(?<![\d.]){re.escape(v)}(?![\d])", text)}, values
