"""The migration from release 1 to release 2: a copy of release 1 changed by these steps.

1. items_g2 (electronics) gains `prc_cur DECIMAL(10,2)`: the current price in dollars, the old
   dollar price times a lognormal factor (prices went up). The old `prc` (cents) stays, stale.
2. fdbk_g1 (office) gains `vrf_st VARCHAR` ('verified' / 'unverified') for the re-audited share
   of the reviews, NULL elsewhere. The audit demoted many verified 5-star reviews and a few
   others, and promoted a few unverified ones. Where `vrf_st` is set it overrides `vrf`, so a
   review is verified iff COALESCE(vrf_st = 'verified', vrf = 'Y').
3. fdbk_g3 (musical instruments) gains `yr SMALLINT` and `mo TINYINT`, filled for every review
   from `ts`, after which `ts` is set to NULL for a share of the reviews.
4. attr_g3 is renamed `attr_g3_legacy` and loses a share of its rows; the new canonical
   attributes table `itm_attr_g3 (itm_id, attr_nm, attr_val)` holds every attribute.

All random choices come from numpy generators seeded from the task spec.
"""
from __future__ import annotations

import shutil

import duckdb
import numpy as np
import pandas as pd


def _lognormal_prices(con, rng: np.random.Generator, factor: dict) -> pd.DataFrame:
    old = con.execute("SELECT itm_id, prc FROM items_g2 ORDER BY itm_id").df()
    f = np.exp(rng.normal(factor["mean_log"], factor["sd_log"], size=len(old)))
    new = np.maximum(np.ceil(old["prc"].to_numpy() / 100.0 * f) - 0.01, 0.99).round(2)
    return pd.DataFrame({"itm_id": old["itm_id"], "p": new})


def _reaudit(con, rng: np.random.Generator, m: dict) -> pd.DataFrame:
    rv = con.execute("SELECT rv_id, vrf, rtg FROM fdbk_g1 ORDER BY rv_id").df()
    n = len(rv)
    audited = rng.random(n) < m["g1_vrf_st_populated"]
    was = rv["vrf"].to_numpy() == "Y"
    flip_y = np.where(rv["rtg"].to_numpy() == 5, m["g1_reaudit_flip_verified"]["five_star"],
                      m["g1_reaudit_flip_verified"]["other"])
    u = rng.random(n)
    now = np.where(was, u >= flip_y, u < m["g1_reaudit_flip_unverified"])
    status = np.where(now, "verified", "unverified").astype(object)
    return pd.DataFrame({"rv_id": rv["rv_id"].to_numpy()[audited], "st": status[audited]})


def migrate(spec: dict, release1: str, path: str) -> None:
    """Write release 2 to `path` (which must not exist), derived from the release-1 file."""
    m = spec["migration"]
    rng = np.random.default_rng([spec["seed"], m["seed_offset"]])
    shutil.copyfile(release1, path)
    con = duckdb.connect(str(path))
    try:
        con.execute("SET threads = 2")
        prices = _lognormal_prices(con, rng, m["g2_price_factor"])
        con.register("new_prices", prices)
        con.execute("ALTER TABLE items_g2 ADD COLUMN prc_cur DECIMAL(10,2)")
        con.execute("UPDATE items_g2 SET prc_cur = new_prices.p FROM new_prices "
                    "WHERE items_g2.itm_id = new_prices.itm_id")

        con.register("audit", _reaudit(con, rng, m))
        con.execute("ALTER TABLE fdbk_g1 ADD COLUMN vrf_st VARCHAR")
        con.execute("UPDATE fdbk_g1 SET vrf_st = audit.st FROM audit WHERE fdbk_g1.rv_id = audit.rv_id")

        con.execute("ALTER TABLE fdbk_g3 ADD COLUMN yr SMALLINT")
        con.execute("ALTER TABLE fdbk_g3 ADD COLUMN mo TINYINT")
        con.execute("UPDATE fdbk_g3 SET yr = year(CAST(ts AS TIMESTAMP)), mo = month(CAST(ts AS TIMESTAMP))")
        ids = con.execute("SELECT rv_id FROM fdbk_g3 ORDER BY rv_id").fetchnumpy()["rv_id"]
        con.register("nulled", pd.DataFrame({"rv_id": ids[rng.random(len(ids)) < m["g3_ts_nulled"]]}))
        con.execute("UPDATE fdbk_g3 SET ts = NULL WHERE rv_id IN (SELECT rv_id FROM nulled)")

        attrs = con.execute("SELECT itm_id, k, v FROM attr_g3 ORDER BY itm_id, k").df()
        con.execute("CREATE TABLE itm_attr_g3 AS SELECT itm_id, k AS attr_nm, v AS attr_val "
                    "FROM attr_g3 ORDER BY itm_id, attr_nm")
        con.execute("COMMENT ON TABLE itm_attr_g3 IS 'item attributes - musical instruments'")
        con.register("kept", attrs[rng.random(len(attrs)) >= m["g3_attr_legacy_dropped"]])
        con.execute("DROP TABLE attr_g3")
        con.execute("CREATE TABLE attr_g3_legacy AS SELECT itm_id::INTEGER AS itm_id, k::VARCHAR AS k, "
                    "v::VARCHAR AS v FROM kept ORDER BY itm_id, k")
        con.execute("COMMENT ON TABLE attr_g3_legacy IS 'item attributes - musical instruments (legacy)'")
        for name in ("new_prices", "audit", "nulled", "kept"):
            con.unregister(name)
        con.execute("CHECKPOINT")
    finally:
        con.close()


def migrated_map(spec: dict, release1_maps: dict[str, dict]) -> dict[str, dict]:
    """Ground truth: the group maps of release 2, from those of release 1 and the steps above."""
    maps = {name: dict(m) for name, m in release1_maps.items()}
    office, electronics, instruments = (maps[spec["groups"][g]["name"]] for g in ("g1", "g2", "g3"))
    electronics["price"] = "i.prc_cur"
    office["verified"] = f"COALESCE(f.vrf_st = 'verified', {office['verified']})"
    instruments["year"], instruments["month"] = "f.yr", "f.mo"
    instruments["attributes"] = {"table": "itm_attr_g3", "item": "itm_id", "key": "attr_nm", "value": "attr_val"}
    return maps
