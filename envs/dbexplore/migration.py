"""The migration from release 1 to release 2: a copy of release 1 changed in place.

Which product group each step touches, and the new units and calendars, are part of the world
(envs/dbexplore/world.py). The kinds of change: one group's items gain a current-price column
(prices went up; the old column stays, stale); one group's reviews gain a re-audit column, set
for part of the reviews, that overrides the old verified flag where set; one group's reviews gain
calendar year and month columns, after which the time stamp is nulled for a share of the
reviews; one group's attributes table is renamed as legacy and loses rows, a new canonical table
holding them all; one group's prices are re-stated in place in another unit, and one group's
fiscal calendar moves to another start month (its intake report is restated under it), neither
visible in the catalog.

All random choices come from numpy generators seeded from the task spec.
"""
from __future__ import annotations

import shutil

import duckdb
import numpy as np

# pandas is imported inside the build functions: a cached load (the group maps) must not pay its import

from clbench.envs.dbexplore.generator import TIME_EXPR, price_expr, write_intake
from clbench.envs.dbexplore.world import migrated, table


def _new_prices(con, items: str, dollars: str, rng: np.random.Generator, factor: dict) -> pd.DataFrame:
    import pandas as pd
    old = con.execute(f"SELECT itm_id, {dollars} AS p FROM {items} i ORDER BY itm_id").df()
    f = np.exp(rng.normal(factor["mean_log"], factor["sd_log"], size=len(old)))
    new = np.maximum(np.ceil(old["p"].to_numpy() * f) - 0.01, 0.99).round(2)
    return pd.DataFrame({"itm_id": old["itm_id"], "p": new})


def _reaudit(con, reviews: str, verified: str, rng: np.random.Generator, m: dict) -> pd.DataFrame:
    import pandas as pd
    rv = con.execute(f"SELECT rv_id, ({verified}) AS was, rtg FROM {reviews} f ORDER BY rv_id").df()
    n = len(rv)
    audited = rng.random(n) < m["vrf_st_populated"]
    was = rv["was"].to_numpy().astype(bool)
    flip_y = np.where(rv["rtg"].to_numpy() == 5, m["reaudit_flip_verified"]["five_star"],
                      m["reaudit_flip_verified"]["other"])
    u = rng.random(n)
    now = np.where(was, u >= flip_y, u < m["reaudit_flip_unverified"])
    status = np.where(now, "verified", "unverified").astype(object)
    return pd.DataFrame({"rv_id": rv["rv_id"].to_numpy()[audited], "st": status[audited]})


def migrate(spec: dict, release1: str, path: str) -> None:
    """Write release 2 to `path` (which must not exist), derived from the release-1 file."""
    import pandas as pd
    from clbench.envs.dbexplore.generator import schema_map

    m, world = spec["migration"], spec["world"]
    roles = world["migration"]
    truth = {g: schema_map(spec, world)[spec["groups"][g]["name"]] for g in world["groups"]}
    rng = np.random.default_rng([spec["seed"], m["seed_offset"]])
    shutil.copyfile(release1, path)
    con = duckdb.connect(str(path))
    try:
        con.execute("SET threads = 2")
        # the fiscal calendar moves: the intake report is restated under it (before any time stamp is nulled)
        write_intake(con, spec, roles["fiscal"]["group"], int(roles["fiscal"]["start"]))
        g = roles["new_price"]
        items = table(world, "items", g)
        con.register("new_prices", _new_prices(con, items, truth[g]["price"], rng, m["price_factor"]))
        con.execute(f"ALTER TABLE {items} ADD COLUMN prc_cur DECIMAL(10,2)")
        con.execute(f"UPDATE {items} SET prc_cur = new_prices.p FROM new_prices WHERE {items}.itm_id = new_prices.itm_id")

        g = roles["reaudit"]
        reviews = table(world, "reviews", g)
        con.register("audit", _reaudit(con, reviews, truth[g]["verified"], rng, m))
        con.execute(f"ALTER TABLE {reviews} ADD COLUMN vrf_st VARCHAR")
        con.execute(f"UPDATE {reviews} SET vrf_st = audit.st FROM audit WHERE {reviews}.rv_id = audit.rv_id")

        g = roles["dates"]
        reviews = table(world, "reviews", g)
        ts = TIME_EXPR[world["groups"][g]["ts"]].replace("f.ts", "ts")
        con.execute(f"ALTER TABLE {reviews} ADD COLUMN yr SMALLINT")
        con.execute(f"ALTER TABLE {reviews} ADD COLUMN mo TINYINT")
        con.execute(f"UPDATE {reviews} SET yr = year({ts}), mo = month({ts})")
        ids = con.execute(f"SELECT rv_id FROM {reviews} ORDER BY rv_id").fetchnumpy()["rv_id"]
        con.register("nulled", pd.DataFrame({"rv_id": ids[rng.random(len(ids)) < m["ts_nulled"]]}))
        con.execute(f"UPDATE {reviews} SET ts = NULL WHERE rv_id IN (SELECT rv_id FROM nulled)")

        g = roles["attributes"]
        attr = table(world, "attributes", g)
        name = spec["groups"][g]["name"]
        attrs = con.execute(f"SELECT itm_id, k, v FROM {attr} ORDER BY itm_id, k").df()
        con.execute(f"CREATE TABLE itm_{attr} AS SELECT itm_id, k AS attr_nm, v AS attr_val "
                    f"FROM {attr} ORDER BY itm_id, attr_nm")
        con.execute(f"COMMENT ON TABLE itm_{attr} IS 'item attributes - {name}'")
        con.register("kept", attrs[rng.random(len(attrs)) >= m["attr_legacy_dropped"]])
        con.execute(f"DROP TABLE {attr}")
        con.execute(f"CREATE TABLE {attr}_legacy AS SELECT itm_id::INTEGER AS itm_id, k::VARCHAR AS k, "
                    f"v::VARCHAR AS v FROM kept ORDER BY itm_id, k")
        con.execute(f"COMMENT ON TABLE {attr}_legacy IS 'item attributes - {name} (legacy)'")

        g = roles["redenominate"]["group"]  # same column, another unit: nothing in the catalog changes
        items = table(world, "items", g)
        old_rate = float(world["groups"][g]["price"]["rate"])
        new_rate = float(roles["redenominate"]["rate"])
        con.execute(f"UPDATE {items} SET prc = round(prc / {old_rate:g} * {new_rate:g}, 2)")
        for reg in ("new_prices", "audit", "nulled", "kept"):
            con.unregister(reg)
        con.execute("CHECKPOINT")
    finally:
        con.close()


def migrated_map(spec: dict, world: dict, release1_maps: dict[str, dict]) -> dict[str, dict]:
    """Ground truth: the group maps of release 2, from those of release 1 and the steps above."""
    maps = {name: dict(m) for name, m in release1_maps.items()}
    roles, after = world["migration"], migrated(world)
    by_group = {g: maps[spec["groups"][g]["name"]] for g in world["groups"]}
    by_group[roles["new_price"]]["price"] = "i.prc_cur"
    g = roles["redenominate"]["group"]
    if g != roles["new_price"]:
        by_group[g]["price"] = price_expr("prc", after["groups"][g]["price"]["rate"])
    audit = by_group[roles["reaudit"]]
    audit["verified"] = f"COALESCE(f.vrf_st = 'verified', {audit['verified']})"
    dates = by_group[roles["dates"]]
    dates["year"], dates["month"] = "f.yr", "f.mo"
    attr = table(world, "attributes", roles["attributes"])
    by_group[roles["attributes"]]["attributes"] = {"table": f"itm_{attr}", "item": "itm_id", "key": "attr_nm",
                                                   "value": "attr_val"}
    for g, m in by_group.items():
        m["fiscal_start"] = int(after["groups"][g]["fiscal_start"])
    return maps
