"""The latent structure of one DBExplore world: schema names, per-group conventions, status codes
and the migration.

The canonical world is written in tasks/dbexplore/default.yaml (`world`). Every other world (the
train split, `world_seed=N`) is drawn here from the env's `world_rng`: the same kinds of
convention (table names, price units, time encodings, flag encodings, fiscal calendars (each
group reports its review intake per fiscal quarter, the cue that shows the calendar), which
group lacks which table, status codes, what the migration changes) with other values. The roles
of the canonical groups are handed to the drawn world's groups by a permutation `perm`
(canonical group -> world group), so a drawn world asks the same kinds of question with the same
difficulty (tasks/dbexplore/default.yaml `world_draw` holds the pools).
"""
from __future__ import annotations

import copy
import math

import numpy as np

GROUPS = ("g1", "g2", "g3")
ROLES = ("items", "reviews", "taxonomy", "attributes", "intake")
#: roles every group has a table for (the others depend on the world)
ALWAYS = ("items", "reviews", "intake")


def canonical(spec: dict) -> dict:
    """The canonical world as written, with the identity permutation."""
    world = copy.deepcopy(spec["world"])
    world["perm"] = {g: g for g in GROUPS}
    return world


def table(world: dict, role: str, g: str) -> str:
    return f"{world['stems'][role]}_{world['groups'][g]['suffix']}"


def _choice(rng: np.random.Generator, pool: list):
    return pool[int(rng.integers(len(pool)))]


def _codes(rng: np.random.Generator, d: dict, kind: str, mention: bool) -> dict:
    """Three status codes (active, kept, deleted) with drawn tokens, type and descriptions; the kept
    code's description mentions deletion when `mention`."""
    published = kind == "reviews"
    if rng.random() < 0.5:
        ctype, tokens = "INTEGER", [str(t) for t in rng.choice(np.arange(0, 10), size=3, replace=False)]
    else:
        ctype, tokens = "VARCHAR", [str(t) for t in rng.choice(d["code_letters"], size=3, replace=False)]
    active = rng.uniform(0.66, 0.82)
    deleted = rng.uniform(0.05, 0.12)
    descr = [_choice(rng, d["active_published" if published else "active_listed"]),
             _choice(rng, d[("kept_published" if published else "kept_listed") + ("_deletion" if mention else "")]),
             _choice(rng, d["deleted_descriptions"])]
    shares = [round(active, 3), round(1 - active - deleted, 3), round(deleted, 3)]
    return {"column": "st", "type": ctype,
            "codes": [[tok, k, s, text] for tok, k, s, text in zip(tokens, ("active", "kept", "deleted"), shares, descr)]}


def _rate(rng: np.random.Generator, lo: float, hi: float, avoid: tuple[float, float]) -> float:
    """A log-uniform exchange-rate-like factor in [lo, hi] outside `avoid` (too close to 1)."""
    while True:
        r = round(math.exp(rng.uniform(math.log(lo), math.log(hi))), 2)
        if not avoid[0] <= r <= avoid[1]:
            return r


def draw(spec: dict, rng_for) -> dict:
    """A fresh world: `rng_for(purpose)` gives the env's world_rng for each purpose."""
    d = spec["world_draw"]
    base = spec["world"]
    rng = rng_for("schema")
    perm = dict(zip(GROUPS, (GROUPS[i] for i in rng.permutation(len(GROUPS)))))
    world = {"lookup": _choice(rng, d["lookup_names"]),
             "stems": {role: _choice(rng, d["stems"][role]) for role in ROLES if role != "intake"},
             "perm": perm, "groups": {}, "status": {}}
    suffixes = set()
    while len(suffixes) < len(GROUPS):
        suffixes.add(str(_choice(rng, d["suffix_letters"])) + str(int(rng.integers(1, 10))))
    world["stems"]["intake"] = _choice(rng_for("intake"), d["stems"]["intake"])  # its own stream: v2's draws stay
    suffixes = sorted(suffixes)
    rng.shuffle(suffixes)
    conv = rng_for("conventions")
    ts = list(conv.permutation(d["ts_encodings"]))
    flags = [d["flag_encodings"][i] for i in conv.choice(len(d["flag_encodings"]), size=3, replace=False)]
    fiscal = [int(m) for m in conv.choice(np.arange(2, 13), size=3, replace=False)]
    for k, c in enumerate(GROUPS):  # canonical group c's role goes to world group perm[c]
        g = perm[c]
        unit = base["groups"][c]["price"]["unit"]
        if unit == "foreign":
            price = {"unit": unit, "rate": _rate(conv, *d["foreign_rate"], d["foreign_avoid"]), "type": "DOUBLE"}
        elif unit == "cents":
            price = {"unit": unit, "rate": 100, "type": _choice(conv, ["DOUBLE", "DECIMAL(12,0)"])}
        else:
            price = {"unit": unit, "rate": 1, "type": "DOUBLE"}
        world["groups"][g] = {"suffix": suffixes[k], "price": price, "ts": str(ts[k]), "vrf": list(flags[k]),
                              "fiscal_start": fiscal[k], "taxonomy": base["groups"][c]["taxonomy"],
                              "attributes": base["groups"][c]["attributes"]}
    codes = rng_for("status")
    keys = [f"{kind}.{g}" for kind in ("items", "reviews") for g in GROUPS]
    mention = set(codes.choice(keys, size=len(keys) // 2, replace=False).tolist())
    world["status"] = {key: _codes(codes, d, key.split(".")[0], key in mention) for key in keys}
    m = base["migration"]
    mig = rng_for("migration")
    old = world["groups"][perm[m["redenominate"]["group"]]]["price"]["rate"]
    new_rate = old
    while abs(math.log(new_rate / old)) < 0.15:
        new_rate = _rate(mig, *d["foreign_rate"], d["foreign_avoid"])
    fgroup = perm[m["fiscal"]["group"]]
    starts = [s for s in range(2, 13) if s != world["groups"][fgroup]["fiscal_start"]]
    world["migration"] = {"new_price": perm[m["new_price"]], "reaudit": perm[m["reaudit"]], "dates": perm[m["dates"]],
                          "attributes": perm[m["attributes"]],
                          "redenominate": {"group": perm[m["redenominate"]["group"]], "rate": new_rate},
                          "fiscal": {"group": fgroup, "start": int(mig.choice(starts))}}
    return world


def migrated(world: dict) -> dict:
    """The world's conventions after the migration (what changes silently: a price unit, a fiscal calendar)."""
    after = copy.deepcopy(world)
    m = world["migration"]
    after["groups"][m["redenominate"]["group"]]["price"]["rate"] = m["redenominate"]["rate"]
    after["groups"][m["fiscal"]["group"]]["fiscal_start"] = m["fiscal"]["start"]
    return after
