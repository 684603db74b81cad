"""Memoryless policy families of DBExplore-v3 for the red team (`DBExploreEnv.policy_families`).

Each keeps nothing between questions and reads only its observations; the red team plays every
point of its grid stateless. None may reach r_reference, the stateless reference (the best
memoryless play we know: catalog, then one answer query with generic rules).

- `CatalogReader`: the one-look analyst of issue 28: the catalog, then the answer, with a fixed
  price rule (the reference's, integer-typed columns are cents, or prices are taken as stored)
  and a fixed guess of the fiscal calendar's start month instead of testing it against the data
  (the guess is right only for a group whose calendar it happens to hit).
- `Explorer`: the careful analyst: the catalog, a profile (SUMMARIZE) of the table the question
  is about, then the answer with the reference's rules (fiscal calendars tested against the data).
- `KeywordStatus`: reads the code lookup by one keyword (a code whose description contains it is
  deleted), as a naive analyst would.
"""
from __future__ import annotations

from clbench.agents.dbexplore import DBExploreReference, group_tables
from clbench.envs.dbexplore.logical import LogicalQuery


class _Memoryless(DBExploreReference):
    learns = False

    def __init__(self, card, seed: int = 0, latent=None, **rules):
        super().__init__(card, seed=seed, latent=latent, **rules)


class CatalogReader(_Memoryless):
    name = "catalog_reader"

    def __init__(self, card, seed: int = 0, latent=None, price_rule: str = "int_is_cents", fiscal_start: int = 7):
        super().__init__(card, seed=seed, latent=latent, price_rule=price_rule, fiscal_start=fiscal_start)


class Explorer(_Memoryless):
    name = "explorer"

    def __init__(self, card, seed: int = 0, latent=None, price_rule: str = "whole_is_cents"):
        super().__init__(card, seed=seed, latent=latent, price_rule=price_rule)

    def probe(self, q: LogicalQuery):
        tables = group_tables(self.knowledge["catalog"], q.group)
        table = tables.get("reviews" if q.entity == "reviews" else "items")
        if table:
            yield f"QUERY: SUMMARIZE {table}"


class KeywordStatus(_Memoryless):
    name = "keyword_status"

    def __init__(self, card, seed: int = 0, latent=None, keyword: str = "delet"):
        super().__init__(card, seed=seed, latent=latent, delete_rule=keyword)
