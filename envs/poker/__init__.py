"""Heads-up no-limit hold'em against deterministic, exploitable opponents (texasholdem)."""

REGISTRATIONS = [
    {"id": "clbench/Poker-v9", "entry_point": "clbench.envs.poker.poker_env:PokerEnv"},
]
