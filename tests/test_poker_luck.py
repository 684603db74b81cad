"""The board-luck correction of Poker's chip results (clbench/envs/poker/luck.py): its terms have mean zero
over the cards that could come, it telescopes on an all-in, and its stakes agree with the library's pots."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import clbench  # noqa: F401
from clbench.agent import make_agent
from clbench.envs.poker.betting import Betting
from clbench.envs.poker.cards import FULL_DECK, deal_hands
from clbench.envs.poker.luck import board_luck, equity, luck_adjusted, stakes
from clbench.envs.poker.policy import CALL, RAISE, Decision
from clbench.runner import play_instance

DEALS = deal_hands(7, 40)
#: deals whose river is still open at the turn (a made lock would make the mean-zero check empty)
OPEN = [d for d in DEALS if 0 < equity(d.agent, d.opponent, d.board[:4]) < 1][:3]


@pytest.mark.parametrize("deal", OPEN, ids=["a", "b", "c"])
@pytest.mark.parametrize("shown", [3, 4])
def test_the_next_card_moves_the_equity_by_zero_on_average(deal, shown):
    """eq_{s-1} is the mean of eq_s over every card that can come next: each correction term has mean zero."""
    board = deal.board[:shown]
    left = [c for c in FULL_DECK if c not in deal.agent + deal.opponent + board]
    after = [equity(deal.agent, deal.opponent, board + (c,)) for c in left]
    assert np.mean(after) == pytest.approx(equity(deal.agent, deal.opponent, board), abs=1e-12)
    assert len(set(after)) > 1  # the card matters


def test_an_all_in_before_the_flop_scores_its_preflop_equity():
    """Nothing is decided after an all-in: chips minus the board's luck is the pot at stake times (2 eq - 1)."""
    deal = DEALS[3]
    b = Betting(0, 1000, 5, 10)
    b.apply(Decision(RAISE, 1000))
    b.apply(Decision(CALL, 0))
    assert b.over and b.folded is None
    profit = b.payoff(0, (deal.agent, deal.opponent), deal.board)
    luck = board_luck(deal.agent, deal.opponent, deal.board, b.log, 10, showdown=True)
    eq = equity(deal.agent, deal.opponent, (), 40_000)
    assert profit - luck == pytest.approx(1000 * (2 * eq - 1), abs=1e-9)
    assert luck != 0


def test_a_hand_folded_before_the_flop_has_no_board_luck():
    deal = DEALS[4]
    b = Betting(0, 1000, 5, 10)
    b.apply(Decision("FOLD", 0))
    assert board_luck(deal.agent, deal.opponent, deal.board, b.log, 10, showdown=False) == 0


def test_the_stakes_are_the_library_pots_on_a_real_rollout():
    """On every hand of a real Poker rollout that reached a showdown, the chips at stake read from the move log
    times the showdown's result are the library's settlement; a folded hand's luck counts only the cards that
    came before the fold."""
    env = gym.make("clbench/Poker-v9")
    agent = make_agent("reference", env, seed=0)
    poker = env.unwrapped
    showdowns = folds = 0
    for pos in range(len(poker.schedule)):
        obs, info = env.reset(seed=0) if pos == 0 else env.reset()
        play_instance(env, agent, obs, info, [])
        t = poker._table
        b = t.betting
        if b.folded is None:
            showdowns += 1
            last = max(s for s, *_ in b.log)
            share = equity(*t.holes, tuple(t.game.board))
            assert t.profit() == pytest.approx(stakes(b.log, 10)[last] * (2 * share - 1)), b.log
        else:
            folds += 1
            if b.log[-1][0] == 0:
                assert luck_adjusted(t) == t.profit()
    env.close()
    assert showdowns > 10 and folds > 10


def test_each_card_is_weighed_by_the_chips_in_when_it_came():
    """Limped preflop (10 each in when the flop comes), a 50 bet called on the flop (60 each when the turn and
    the river come), checked down: the luck is 2 * 10 * (flop - preflop) + 2 * 60 * (river - flop)."""
    deal = OPEN[0]
    b = Betting(0, 1000, 5, 10)
    for d in (Decision(CALL, 0), Decision("CHECK", 0), Decision("CHECK", 0), Decision(RAISE, 50), Decision(CALL, 0),
              *[Decision("CHECK", 0)] * 4):
        b.apply(d)
    assert b.over and b.folded is None and stakes(b.log, 10) == [10, 60, 60, 60]
    eq = [equity(deal.agent, deal.opponent, deal.board[:n], 2_000) for n in (0, 3, 4, 5)]
    expected = 2 * 10 * (eq[1] - eq[0]) + 2 * 60 * (eq[3] - eq[1])
    assert board_luck(deal.agent, deal.opponent, deal.board, b.log, 10, showdown=True) == pytest.approx(expected)
