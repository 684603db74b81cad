"""Cards and seeded dealing.

A hand's cards are drawn from `np.random.default_rng(variant seed)`, never from the global
`random` module. The library's `TexasHoldEm` shuffles its own `Deck` with `random` when a hand
starts; `table.py` replaces those cards with ours (as the library does itself when it imports
a hand history), so the library's shuffle never decides a card.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from texasholdem.card.card import Card
from texasholdem.card.deck import Deck

RANKS = "23456789TJQKA"
SUITS = "shdc"
#: the 52 cards in a fixed order; a card's index here is what the generator draws
FULL_DECK: tuple[Card, ...] = tuple(Card(r + s) for r in RANKS for s in SUITS)
_SUIT_CHAR = {Card(f"2{s}").suit: s for s in SUITS}
_NAMES = {c: RANKS[c.rank] + _SUIT_CHAR[c.suit] for c in FULL_DECK}
_BY_NAME = {name: c for c, name in _NAMES.items()}


def card_name(card: int) -> str:
    """'Ah', 'Td', ... (rank then suit letter: s h d c)."""
    return _NAMES[card]


def parse_card(name: str) -> Card:
    """Inverse of `card_name`; raises KeyError for anything else."""
    return _BY_NAME[name]


def card_names(cards) -> list[str]:
    """`card_name` of each card, as a list."""
    return list(map(_NAMES.__getitem__, cards))


#: `parse_card` as a C-level lookup (for `map` over a hand's names: no Python call per card)
card_by_name = _BY_NAME.__getitem__


def parse_cards(names) -> tuple[Card, ...]:
    """`parse_card` of each name, as a tuple (one C-level lookup per card: agents parse every table)."""
    return tuple(map(_BY_NAME.__getitem__, names))


def names(cards) -> str:
    return " ".join(_NAMES[c] for c in cards) if cards else "-"


@dataclass(frozen=True)
class Deal:
    """The nine cards of one hand: the agent's two, the opponent's two, the five of the board."""

    agent: tuple[Card, Card]
    opponent: tuple[Card, Card]
    board: tuple[Card, ...]


def deal_hands(seed: int, count: int) -> list[Deal]:
    """`count` independent deals from one variant seed (hand k is the same for every rollout)."""
    rng = np.random.default_rng(seed)
    deals = []
    for _ in range(count):
        idx = rng.choice(52, size=9, replace=False)
        cards = [FULL_DECK[i] for i in idx]
        deals.append(Deal(tuple(cards[0:2]), tuple(cards[2:4]), tuple(cards[4:9])))
    return deals


class StackedDeck(Deck):
    """A library `Deck` whose cards are given (top first) instead of shuffled."""

    def __init__(self, cards):  # noqa: super().__init__ would shuffle with the global `random`
        self.cards = list(cards)

    def copy(self, shuffle: bool = False) -> "StackedDeck":
        if shuffle:
            raise ValueError("a StackedDeck is never shuffled")
        return StackedDeck(self.cards)
