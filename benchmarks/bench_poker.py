"""Poker-v9 speed: hands per second of the env with scripted agents vs a bare texasholdem loop.

    python benchmarks/bench_poker.py [--quick]

Both sides play the same hands (the default schedule's 120 deals) with the same moves. The env
side is `gym.make` + a scripted agent (the stateful reference, and a check/call agent that
costs next to nothing), with observations, parsing, the opponent's policy and info dicts. The
bare side replays every recorded move of both players on `TexasHoldEm` with the same cards and
nothing else. Target (issue 34): the env with the reference agent at least 0.7x as fast as the bare
library (hands per CPU second).
"""
from __future__ import annotations

import statistics
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _ratio import Ratio, env_id, load, run_script, table  # noqa: E402

TARGET = 0.7


class CheckCall:
    """A scripted agent with no thinking: check when free, else call."""

    def begin_instance(self, observation, info):
        pass

    def act(self, observation, info):
        return "CALL" if info["table"]["to_call"] else "CHECK"

    def end_instance(self, reward, info):
        pass


def env_pass(agent_name: str) -> tuple[float, list]:
    """Seconds for one stateful pass over the default schedule, and every hand's moves."""
    import gymnasium as gym

    import clbench  # noqa: F401
    from clbench.agent import make_agent

    env = gym.make(env_id("Poker"))
    agent = CheckCall() if agent_name == "check/call" else make_agent(agent_name, env, seed=0)
    hands = []
    elapsed = 0.0
    t = time.process_time()
    obs, info = env.reset(seed=0)
    for pos in range(len(env.unwrapped.order)):
        if pos:
            obs, info = env.reset()
        agent.begin_instance(obs, info)
        done = False
        while not done:
            obs, reward, term, trunc, info = env.step(agent.act(obs, info))
            done = term or trunc
        agent.end_instance(reward, info)
        # the bench's own record of the hand (for the bare replay) is not the env's work: off the clock
        elapsed += time.process_time() - t
        hands.append((env.unwrapped.slot.instance.payload, list(env.unwrapped.hand_log)))
        t = time.process_time()
    env.close()
    return elapsed, hands


def bare_pass(hands: list, ask_moves: bool = False) -> float:
    """Seconds to replay the same hands, move for move, on the library alone.

    ask_moves=True: before each move the loop asks the library for the legal moves, as any
    player loop on the library must to choose one; False: moves only (the strictest baseline).
    """
    from texasholdem.game.action_type import ActionType
    from texasholdem.game.game import TexasHoldEm

    from clbench.envs.poker.cards import StackedDeck

    kinds = {k.name: k for k in ActionType}
    t = time.process_time()
    for spec, moves in hands:
        game = TexasHoldEm(buyin=1000, big_blind=10, small_blind=5, max_players=2)
        game.btn_loc = 1 if spec.agent_button else 0
        game.start_hand()
        game.hands[0], game.hands[1] = list(spec.deal.agent), list(spec.deal.opponent)
        game._deck = StackedDeck(spec.deal.board)
        for _, _, kind, total in moves:
            if ask_moves:
                game.get_available_moves()
            game.take_action(kinds[kind], total=total if kind == "RAISE" else None)
        assert not game.is_hand_running()
    return time.process_time() - t


def replay_pass(hands: list, replies: list[str]) -> float:
    """Seconds for the env alone: the same pass, the agent's recorded replies instead of an agent."""
    import gymnasium as gym

    import clbench  # noqa: F401

    env = gym.make(env_id("Poker"))
    replies = iter(replies)
    t = time.process_time()
    env.reset(seed=0)
    for pos in range(len(hands)):
        if pos:
            env.reset()
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(next(replies))
            done = term or trunc
    seconds = time.process_time() - t
    env.close()
    return seconds


def bare_one_game_pass(hands: list) -> float:
    """`bare_pass` on one game for all hands, both stacks set back to the buy-in before each (not a
    loop the library's interface offers: it writes the players' chips; a sensitivity row only)."""
    from texasholdem.game.action_type import ActionType
    from texasholdem.game.game import TexasHoldEm

    from clbench.envs.poker.cards import StackedDeck

    kinds = {k.name: k for k in ActionType}
    t = time.process_time()
    game = TexasHoldEm(buyin=1000, big_blind=10, small_blind=5, max_players=2)
    for spec, moves in hands:
        for player in game.players:
            player.chips = 1000
        game.btn_loc = 1 if spec.agent_button else 0
        game.start_hand()
        game.hands[0], game.hands[1] = list(spec.deal.agent), list(spec.deal.opponent)
        game._deck = StackedDeck(spec.deal.board)
        for _, _, kind, total in moves:
            game.take_action(kinds[kind], total=total if kind == "RAISE" else None)
        assert not game.is_hand_running()
    return time.process_time() - t


def table_pass(hands: list) -> float:
    """Seconds for the env's referee calls alone: `HandTable` (the library game, our cards, the
    betting model) replaying the same moves, with no opponent policy, text or info."""
    from clbench.envs.poker.policy import Decision
    from clbench.envs.poker.opponents import CallingStation
    from clbench.envs.poker.table import HandTable

    t = time.process_time()
    for spec, moves in hands:
        table = HandTable(spec.deal, spec.agent_button, CallingStation(), 1000, 5, 10)
        for _, _, kind, total in moves:
            table.apply(Decision(kind, total))
        assert table.over
    return time.process_time() - t


def table_opponent_pass(hands: list, view: bool = False) -> float:
    """`table_pass` with the opponent deciding its own moves (its policy, as in the env) and, with
    `view`, the agent's view rendered (snapshot and text) at the start and after every agent move."""
    import gymnasium as gym

    import clbench  # noqa: F401
    from clbench.envs.poker.policy import Decision
    from clbench.envs.poker.table import AGENT, HandTable
    from clbench.envs.poker.view import HandView

    env = gym.make(env_id("Poker"))
    opponents = env.unwrapped.opponents
    t = time.process_time()
    for k, (spec, moves) in enumerate(hands):
        table = HandTable(spec.deal, spec.agent_button, opponents[spec.policy], 1000, 5, 10)
        table.play_opponent()
        if view:
            hv = HandView(table, {"hand": k + 1, "hands": len(hands), "opponent": spec.opponent,
                                  "button": spec.agent_button, "blinds": [5, 10], "stack": 1000, "hole": ["2s", "3s"]})
            hv.header(spec.met_before, False) + hv.text(title=False)
        for _, player, kind, total in moves:
            if player == AGENT:
                table.apply(Decision(kind, total))
                table.play_opponent()
                if view:
                    hv.refresh()
                    hv.text()
        assert table.over
    seconds = time.process_time() - t
    env.close()
    return seconds


def replies_of(hands: list) -> list[str]:
    """The agent's replies that replay `hands` (its moves, and one reply for a hand already over)."""
    out = []
    for _, moves in hands:
        mine = [f"RAISE {total}" if kind == "RAISE" else kind for _, player, kind, total in moves if player == 0]
        out += mine or ["CHECK"]
    return out


def breakdown(repeats: int) -> str:
    """Where the env + reference pass's time goes, medians of interleaved repeats (CPU seconds)."""
    _, hands = env_pass("reference")
    replies = replies_of(hands)
    parts = {"env + reference agent": lambda: env_pass("reference")[0],
             "env alone (the reference's replies replayed)": lambda: replay_pass(hands, replies),
             "+ the agent's view (HandTable, opponent policy, snapshot and text; no env)":
                 lambda: table_opponent_pass(hands, view=True),
             "+ the opponent's policy (HandTable deciding the opponent's moves)": lambda: table_opponent_pass(hands),
             "the env's referee calls alone (HandTable: library game + betting model)": lambda: table_pass(hands),
             "bare texasholdem loop, moves only": lambda: bare_pass(hands),
             "(sensitivity) bare loop on one game, stacks refilled by hand": lambda: bare_one_game_pass(hands)}
    times: dict[str, list[float]] = {k: [] for k in parts}
    for _ in range(repeats):
        for name, fn in parts.items():
            times[name].append(fn())
    bare = statistics.median(times["bare texasholdem loop, moves only"])
    rows = ["| part | median s (CPU) | min-max | / bare |", "|---|---|---|---|"]
    for name, v in times.items():
        med = statistics.median(v)
        rows.append(f"| {name} | {med:.4f} | {min(v):.4f}-{max(v):.4f} | {med / bare:.2f} |")
    return "\n".join(rows)


def ratios(quick: bool = False) -> list[Ratio]:
    """Env speed / strict bare-loop speed with the reference agent, one ratio per interleaved repeat."""
    samples = []
    for k in range(5 if quick else 11):
        if k % 2:  # alternately first (the bare side replays the hands the env side played last)
            bare = bare_pass(hands)
            seconds, hands = env_pass("reference")
        else:
            seconds, hands = env_pass("reference")
            bare = bare_pass(hands)
        samples.append(bare / seconds)
    return [Ratio("poker: env + reference speed / bare texasholdem loop", samples, TARGET, "higher",
                  "CPU seconds of a bare TexasHoldEm loop replaying the same hands move for move (same cards, "
                  "no legal-move queries) / CPU seconds of gym.make's Poker env played by the stateful "
                  "reference agent over the default schedule (i.e. env speed / bare speed)")]


def main(quick: bool = False) -> list[Ratio]:
    repeats = 3 if quick else 7
    print("| what | hands | median s (CPU) | hands/s | env speed / bare speed | target |\n|---|---|---|---|---|---|")
    for agent in ("check/call", "reference"):
        times: dict[str, list[float]] = {"env": [], "moves": [], "asking": []}
        hands = []
        for _ in range(repeats):  # interleaved, so a busy machine slows all three alike
            seconds, hands = env_pass(agent)
            times["env"].append(seconds)
            times["moves"].append(bare_pass(hands))
            times["asking"].append(bare_pass(hands, ask_moves=True))
        med = {k: statistics.median(v) for k, v in times.items()}
        n = len(hands)
        print(f"| env + {agent} agent | {n} | {med['env']:.4f} | {n / med['env']:.0f} | | |")
        for key, label in (("moves", "moves only"), ("asking", "asks legal moves, then moves")):
            print(f"| bare texasholdem loop, {label} | {n} | {med[key]:.4f} | {n / med[key]:.0f} | "
                  f"{med[key] / med['env']:.2f} | >= {TARGET} |")
    print("\n" + breakdown(repeats) + "\n")
    print(load() + "\n")
    out = ratios(quick)
    print(table(out))
    return out


if __name__ == "__main__":
    run_script(main, __doc__)
