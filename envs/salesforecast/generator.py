"""Seeded generator of the furniture retailer: catalog, latent demand, sales and store exports.

All numbers come from tasks/salesforecast/default.yaml (the canonical world) or, in any other
world, from `draw_world` (store levels, base volumes, growth rates, price response, seasonality and
the regime change drawn anew from ranges of their own, never the canonical values). The world (catalog, prices, expected
demand, Poisson sales) depends on the seed only, never on the schedule; what one instance shows
(the visible store's export, the catalog, the request) depends on its forecast year and variant.
The latent structure: a growth rate per collection, one price elasticity, store levels and
store-by-type interactions. All are fixed across years except at the `regime_change` (not
announced to the agent): from its year on, the listed collections grow at new yearly rates
(continuing from their level of the year before) and the listed stores' levels are multiplied
by new factors.
"""
from __future__ import annotations

import copy
import csv
import io
import json
from dataclasses import dataclass

import numpy as np

LAYOUTS = ("long_quarterly_csv", "wide_quarterly_csv", "json_lines")


@dataclass(frozen=True)
class Product:
    product_id: str  # P01..
    name: str
    type: str
    collection: str
    launch_year: int
    sku: int  # numeric reference used by some store systems


@dataclass
class World:
    """The latent retailer. `expected[(pid, store, year)]` is mu; `sales[...]` its Poisson draw."""

    spec: dict
    products: list[Product]
    prices: dict[tuple[str, int], float]  # (product_id, year) -> list price
    expected: dict[tuple[str, str, int], float]
    sales: dict[tuple[str, str, int], int]
    interaction: dict[tuple[str, str], float]
    quality: dict[str, float]

    @property
    def stores(self) -> list[dict]:
        return self.spec["stores"]

    def launched(self, year: int) -> list[Product]:
        return [p for p in self.products if p.launch_year <= year]

    def latent(self) -> dict:
        """Every parameter and the expected demand of every cell (for the oracle only)."""
        s = self.spec
        return {
            "growth": dict(s["collections"]), "regime_change": s.get("regime_change"),
            "price_elasticity": s["price_elasticity"],
            "store_levels": {st["id"]: st["level"] for st in s["stores"]},
            "base_units": {t: v["base_units"] for t, v in s["types"].items()},
            "quarter_shares": list(s["quarter_shares"]),
            "interaction": {f"{k[0]}|{k[1]}": v for k, v in self.interaction.items()},
            "quality": dict(self.quality),
            "expected": {f"{p}|{st}|{y}": mu for (p, st, y), mu in self.expected.items()},
        }


def growth_factor(spec: dict, collection: str, year: int) -> float:
    """Demand multiplier of `collection` in `year` relative to base_year (the regime change included)."""
    rate, base = spec["collections"][collection], spec["base_year"]
    change = spec.get("regime_change") or {}
    new = change.get("growth", {}).get(collection)
    if new is None or year < change["year"]:
        return rate ** (year - base)
    pivot = change["year"] - 1  # the last year of the old regime
    return rate ** (pivot - base) * new ** (year - pivot)


def store_level(spec: dict, store: dict, year: int) -> float:
    """A store's demand level in `year` (the regime change included)."""
    change = spec.get("regime_change") or {}
    factor = change.get("store_levels", {}).get(store["id"], 1.0) if year >= change.get("year", year + 1) else 1.0
    return store["level"] * factor


def last_year(spec: dict) -> int:
    """The last year any schedule asks about."""
    years = [y for sched in spec["schedules"].values() for v in sched for y in v["years"]]
    return max(years) + spec["horizon_years"] - 1


#: ranges the fresh draws come from: independent of the canonical values (a range, not a jitter around them)
LEVEL_LOW, LEVEL_RATIO = (0.45, 0.8), (2.0, 3.2)  # the lowest store level; highest / lowest
BASE_UNITS = (35, 170)                           # a type's base volume, log-uniform
GROWTH_FAST, GROWTH_SLOW = (1.06, 1.11), (0.9, 0.95)  # fastest / slowest collection; the rest in between
ELASTICITY = (0.9, 1.7)
REGIME_CUT, REGIME_TURN = (0.5, 0.72), (0.9, 0.96)  # the cut store's level factor; the new decline rate
Q4_SHARE, OTHER_SHARES = (0.28, 0.36), (0.19, 0.27)  # seasonal split: a year-end peak, the rest spread


def _fresh(draw, canonical) -> list:
    """`draw()` (a list of rounded values) redrawn until none of them is a canonical value."""
    taken = set(canonical)
    while True:
        values = draw()
        if not taken & set(values):
            return values


def draw_world(spec: dict, rng: np.random.Generator) -> dict:
    """`spec` with every latent value drawn anew, of the canonical world's kind and size but from ranges of
    its own (never a canonical value, never a shuffle or jitter of them): the stores' levels (one low, one
    high, one between, in random order), each type's base volume, the collections' growth rates (one fast,
    one declining, three between, in random order), the price elasticity, the seasonal split of the quarters,
    and the regime change (the level of one random store other than the largest cut, the fastest-growing
    collection turning to decline).
    Kept: the regime change's year and the repricing (the second variant's start: the schedule's structure),
    the types' reference prices (read off every catalog), the spreads of interactions, quality and prices,
    and the names and export layouts (format, read off every export)."""
    spec = copy.deepcopy(spec)

    def levels() -> list:
        low = rng.uniform(*LEVEL_LOW)
        high = low * rng.uniform(*LEVEL_RATIO)
        mid = np.exp(rng.uniform(np.log(low) + 0.25 * np.log(high / low), np.log(high) - 0.25 * np.log(high / low)))
        return [round(float(v), 3) for v in rng.permutation([low, mid, high])]

    for st, level in zip(spec["stores"], _fresh(levels, [st["level"] for st in spec["stores"]])):
        st["level"] = level
    types = spec["types"]
    units = _fresh(lambda: [int(round(np.exp(rng.uniform(*np.log(BASE_UNITS))))) for _ in types],
                   [t["base_units"] for t in types.values()])
    for typ, u in zip(types, units):
        types[typ] = {**types[typ], "base_units": u}

    def rates() -> list:
        fast, slow = rng.uniform(*GROWTH_FAST), rng.uniform(*GROWTH_SLOW)
        middle = rng.uniform(slow, fast, size=len(spec["collections"]) - 2)
        return [round(float(r), 3) for r in rng.permutation([fast, slow, *middle])]

    spec["collections"] = dict(zip(spec["collections"], _fresh(rates, spec["collections"].values())))
    spec["price_elasticity"], = _fresh(lambda: [round(float(rng.uniform(*ELASTICITY)), 3)], [spec["price_elasticity"]])

    def shares() -> list:
        q = [*rng.uniform(*OTHER_SHARES, size=3), rng.uniform(*Q4_SHARE)]
        return [round(float(v / sum(q)), 3) for v in q]

    spec["quarter_shares"] = _fresh(shares, spec["quarter_shares"])
    change = spec["regime_change"]
    (cut,), (turn,) = change["store_levels"].values(), change["growth"].values()
    # the cut falls on a store other than the largest, as in the canonical world: cutting the largest one pulls it
    # toward the others and erases the store differences a memory learns (400 draws: the stores' spread, the mean
    # |level - visible level| / total over visible stores, fell from 0.41 to 0.23, at worst 0.10, so a forecaster
    # taking every store for the visible one was nearly right after the change: world 16's gain was 0.02); any
    # other store's cut widens it (0.41 -> 0.48-0.55; canonical 0.39 -> 0.44)
    smaller = sorted(spec["stores"], key=lambda st: st["level"])[:-1]
    store = smaller[int(rng.integers(len(smaller)))]["id"]
    fastest = max(spec["collections"], key=spec["collections"].get)
    change["store_levels"] = {store: _fresh(lambda: [round(float(rng.uniform(*REGIME_CUT)), 3)], [cut])[0]}
    change["growth"] = {fastest: _fresh(lambda: [round(float(rng.uniform(*REGIME_TURN)), 3)], [turn])[0]}
    return spec


def _catalog(spec: dict, rng: np.random.Generator) -> list[Product]:
    types = list(spec["types"])
    used: set[tuple[str, str]] = set()
    rows: list[tuple[str, str, str, int]] = []  # (name, type, collection, launch)

    def add(coll: str, typ: str, launch: int) -> None:
        nouns = [n for n in spec["types"][typ]["nouns"] if (coll, n) not in used]
        noun = nouns[int(rng.integers(len(nouns)))]
        used.add((coll, noun))
        rows.append((f"{coll} {noun}", typ, coll, launch))

    for coll in spec["collections"]:
        for typ in rng.permutation(types)[: spec["products_per_collection"]]:
            add(coll, str(typ), spec["history_start"])
    colls = list(spec["collections"])
    for _ in range(spec["new_lines"]["count"]):
        add(colls[int(rng.integers(len(colls)))], types[int(rng.integers(len(types)))], spec["new_lines"]["year"])
    skus = rng.choice(np.arange(10000, 99999), size=len(rows), replace=False)
    return [Product(f"P{i + 1:02d}", n, t, c, launch, int(sku))
            for i, ((n, t, c, launch), sku) in enumerate(zip(rows, skus))]


def generate_world(spec: dict) -> World:
    rng = np.random.default_rng(spec["seed"])
    products = _catalog(spec, rng)
    store_ids = [s["id"] for s in spec["stores"]]
    interaction = {(s, t): float(np.exp(rng.normal(0, spec["store_type_sd_log"])))
                   for s in store_ids for t in spec["types"]}
    quality = {p.product_id: float(np.exp(rng.normal(0, spec["quality_sd_log"]))) for p in products}
    base_price = {p.product_id: round(float(spec["types"][p.type]["reference_price"]
                                            * np.exp(rng.normal(0, spec["price_sd_log"]))), 2) for p in products}
    rep = spec["repricing"]
    changed = {p.product_id: round(float(rng.uniform(*rep["factor"])), 3) for p in products
               if p.launch_year < rep["year"] and rng.random() < rep["share"]}
    first, last = spec["history_start"], last_year(spec)
    prices, expected, sales = {}, {}, {}
    stores = {s["id"]: s for s in spec["stores"]}
    for y in range(first, last + 1):
        for p in products:
            factor = changed.get(p.product_id, 1.0) if y >= rep["year"] else 1.0
            prices[(p.product_id, y)] = round(base_price[p.product_id] * factor, 2)
            typ = spec["types"][p.type]
            for s in store_ids:
                mu = 0.0
                if y >= p.launch_year:
                    mu = (typ["base_units"] * store_level(spec, stores[s], y) * interaction[(s, p.type)]
                          * quality[p.product_id]
                          * (prices[(p.product_id, y)] / typ["reference_price"]) ** -spec["price_elasticity"]
                          * growth_factor(spec, p.collection, y))
                expected[(p.product_id, s, y)] = mu
                sales[(p.product_id, s, y)] = int(rng.poisson(mu))
    return World(spec, products, prices, expected, sales, interaction, quality)


# ---------------------------------------------------------------------------- instances
@dataclass(frozen=True)
class InstanceData:
    """Everything one forecast year shows and asks (env-private; files are written from it)."""

    year: int  # first forecast year
    variant: str
    store: dict  # the store whose previous-year export is visible
    export: str  # workspace-relative path of that export
    files: dict[str, str]  # workspace-relative path -> content
    cells: tuple[tuple[str, str, int], ...]  # requested (product_id, store, year)
    listed: tuple[str, ...]  # product_ids in the visible export


def _label(name: str, layout: str) -> str:
    """A distractor column as each store's system spells it."""
    if layout == "wide_quarterly_csv":
        return name.replace("_usd", " ($)").replace("_", " ").title()
    if layout == "json_lines":
        head, *rest = name.split("_")
        return head + "".join(w.title() for w in rest)
    return name


def _csv(rows: list[list]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def export_file(world: World, store: dict, year: int, listed: list[Product], distractors: list[str],
                rng: np.random.Generator) -> tuple[str, str]:
    """(file name, content) of `store`'s sales export for `year` in the store's own layout."""
    spec, layout, sid = world.spec, store["layout"], store["id"]
    shares = np.asarray(spec["quarter_shares"], dtype=float)
    quarters = {p.product_id: rng.multinomial(world.sales[(p.product_id, sid, year)], shares / shares.sum())
                for p in listed}
    extra = {p.product_id: [round(float(rng.uniform(*spec["distractors"][d])), 2) for d in distractors]
             for p in listed}
    labels = [_label(d, layout) for d in distractors]
    if layout == "long_quarterly_csv":
        rows = [["sku", "quarter", "units", "unit_price", *labels]]
        for p in listed:
            for q in range(4):
                rows.append([p.sku, f"{year}Q{q + 1}", int(quarters[p.product_id][q]),
                             f"{world.prices[(p.product_id, year)]:.2f}", *extra[p.product_id]])
        return f"sf_sales_{year}.csv", _csv(rows)
    if layout == "wide_quarterly_csv":
        rows = [["Item", "Retail Price ($)", "Units Q1", "Units Q2", "Units Q3", "Units Q4", *labels]]
        for p in listed:
            rows.append([p.name, f"{world.prices[(p.product_id, year)]:.0f}",
                         *(int(u) for u in quarters[p.product_id]), *extra[p.product_id]])
        return f"NY_{year}_report.csv", _csv(rows)
    if layout == "json_lines":
        lines = []
        for p in listed:
            rec = {"productRef": p.sku, "fiscalYear": year, "qtyTotal": int(quarters[p.product_id].sum()),
                   "avgPrice": world.prices[(p.product_id, year)]}
            rec.update(zip(labels, extra[p.product_id]))
            lines.append(json.dumps(rec))
        return f"chicago_{year}.jsonl", "\n".join(lines) + "\n"
    raise ValueError(f"unknown export layout {layout!r}; known: {LAYOUTS}")


def catalog_file(world: World, year: int) -> str:
    """Catalog of the products on sale in `year`, with the planned list price of each forecast year."""
    years = range(year, year + world.spec["horizon_years"])
    rows = [["product_id", "name", "type", "collection", "sku", "launch_year", *(f"price_{y}" for y in years)]]
    for p in world.launched(year):
        rows.append([p.product_id, p.name, p.type, p.collection, p.sku, p.launch_year,
                     *(f"{world.prices[(p.product_id, y)]:.2f}" for y in years)])
    return _csv(rows)


def make_instance(world: World, year: int, variant: dict) -> InstanceData:
    spec = world.spec
    rng = np.random.default_rng([spec["seed"], year])
    first = min(y for sched in spec["schedules"].values() for v in sched for y in v["years"])
    store = spec["stores"][(year - first) % len(spec["stores"])]
    history = world.launched(year - 1)
    n_listed = max(1, round(spec["export_coverage"] * len(history)))
    listed = sorted((history[i] for i in rng.choice(len(history), n_listed, replace=False)),
                    key=lambda p: p.product_id)
    listed_ids = {p.product_id for p in listed}
    req = spec["requests"]
    recent = [p.product_id for p in world.launched(year) if p.launch_year > spec["history_start"]]
    skip = listed_ids | set(recent)
    absent = [p.product_id for p in world.launched(year) if p.product_id not in skip]
    present = sorted(listed_ids)
    chosen = list(rng.permutation(recent)[: req["new_min"]]) if recent else []
    need_absent = max(0, req["absent_min"] - sum(c not in listed_ids for c in chosen))
    chosen += list(rng.permutation(absent)[:need_absent])
    rest = [p for p in present if p not in chosen]
    chosen += list(rng.permutation(rest)[: req["products"] - len(chosen)])
    chosen = sorted(str(c) for c in chosen)
    horizon = range(year, year + spec["horizon_years"])
    cells = tuple((pid, s["id"], y) for pid in chosen for s in spec["stores"] for y in horizon)
    name, content = export_file(world, store, year - 1, listed, list(variant["distractors"]), rng)
    head = json.dumps({"forecast_years": list(horizon), "stores": {s["id"]: s["name"] for s in spec["stores"]}})
    rows = ",\n".join(" " + json.dumps({"product_id": p, "store": s, "year": y}) for p, s, y in cells)
    files = {
        f"inbox/{name}": content,
        "inbox/catalog.csv": catalog_file(world, year),
        "inbox/request.json": head[:-1] + ', "cells": [\n' + rows + "\n]}\n",  # one cell per line
    }
    return InstanceData(year, variant["name"], store, f"inbox/{name}", files, cells, tuple(sorted(listed_ids)))
