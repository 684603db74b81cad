"""Seeded generator of release 1 of the product-review database (a DuckDB file).

Every number comes from tasks/dbexplore/default.yaml; every name and convention from the world
(envs/dbexplore/world.py), passed in as `spec["world"]`. Three product groups each have an
items table and a reviews table, some also a category tree and a key/value attributes table,
one lookup table says what every status code means, and every group reports its review intake per
fiscal quarter (the one place its fiscal calendar shows). Table comments name the table's role
and product group; how each group stores prices, times and flags is not written anywhere.

Every items and reviews table has a coded status column; which code marks a row as
soft-deleted differs per table and shows only in the lookup. Reviews of a deleted item are
deleted too. Prices are lognormal around a per-category median, ratings J-shaped with a per-item
quality tilt, review counts power-law, helpful votes mostly zero with a long tail, review dates
growing over the years.
"""
from __future__ import annotations

import math
from datetime import date, datetime, timezone

import duckdb
import numpy as np

# pandas is imported inside the build functions: a cached load (the group maps) must not pay its import

from clbench.envs.dbexplore.world import GROUPS, table

#: review headlines by star rating (1..5)
HEADLINES = {
    1: ["Broke after a week", "Waste of money", "Do not buy", "Stopped working", "Very disappointed"],
    2: ["Not great", "Cheaply made", "Expected better", "Works, barely", "Poor quality"],
    3: ["It's okay", "Average", "Does the job", "Mixed feelings", "Decent for the price"],
    4: ["Good value", "Pretty good", "Works well", "Solid product", "Happy with it"],
    5: ["Excellent!", "Love it", "Five stars", "Highly recommend", "Perfect"],
}

_B36 = np.array(list("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
_DAY = 86_400


def _epoch(d: str | date) -> int:
    d = date.fromisoformat(d) if isinstance(d, str) else d
    return int(datetime(d.year, d.month, d.day, tzinfo=timezone.utc).timestamp())


def _codes(rng: np.random.Generator, n: int, width: int, prefix: str) -> np.ndarray:
    """n random base-36 codes like Amazon reviewer ids ('A1B2...')."""
    digits = _B36[rng.integers(0, 36, size=(n, width))]
    return np.char.add(prefix, np.ascontiguousarray(digits).view(f"<U{width}").ravel())


def _zipf_choice(rng: np.random.Generator, n_options: int, size: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n_options + 1) ** exponent
    return rng.choice(n_options, size=size, p=weights / weights.sum())


def _taxonomy(cfg: dict, rng: np.random.Generator):
    """(tops, leaves) with random three-digit ids; leaves are (id, parent id, name, top, median price)."""
    names = list(cfg["taxonomy"])
    n_leaves = sum(len(v) for v in cfg["taxonomy"].values())
    ids = rng.choice(np.arange(100, 1000), size=len(names) + n_leaves, replace=False)
    tops, leaves, k = [], [], len(names)
    for i, top in enumerate(names):
        tops.append((int(ids[i]), top))
        for leaf, median in cfg["taxonomy"][top].items():
            leaves.append((int(ids[k]), int(ids[i]), leaf, top, float(median)))
            k += 1
    return tops, leaves


def _items(spec: dict, cfg: dict, n: int, rng: np.random.Generator, leaves: list) -> pd.DataFrame:
    import pandas as pd
    ids = 1_000_000 + np.cumsum(rng.integers(1, 40, size=n))
    shares = rng.dirichlet(np.full(len(leaves), cfg["leaf_weight_concentration"]))
    leaf = rng.choice(len(leaves), size=n, p=shares)
    medians = np.array([lf[4] for lf in leaves])[leaf]
    raw = np.exp(np.log(medians) + rng.normal(0.0, cfg["price_sigma"], size=n))
    price = np.maximum(np.ceil(raw) - 0.01, 0.99).round(2)
    brands = np.array(cfg["brands"], dtype=object)
    brand = brands[_zipf_choice(rng, len(brands), n, spec["brand_zipf"])]
    brand[rng.random(n) < spec["missing_brand"]] = None
    adj = np.array(cfg["adjectives"], dtype=object)[rng.integers(0, len(cfg["adjectives"]), size=n)]
    model = np.char.add(np.char.add(_codes(rng, n, 2, ""), "-"), rng.integers(100, 1000, size=n).astype(str))
    leaf_names = np.array([lf[2] for lf in leaves], dtype=object)[leaf]
    title = [f"{b or 'Generic'} {a} {ln} {m}" for b, a, ln, m in zip(brand, adj, leaf_names, model)]
    return pd.DataFrame({"itm_id": ids, "ttl": title, "brnd": brand, "leaf": leaf, "prc": price})


def _launch_times(spec: dict, n: int, rng: np.random.Generator) -> np.ndarray:
    """Launch instants growing ~exp(growth * t) over the review window (inverse-CDF draw)."""
    y0, y1 = spec["years"]
    start, end = _epoch(f"{y0}-01-01"), _epoch(f"{y1}-12-31")
    g = spec["launch_growth"] / (365.25 * _DAY)
    span = end - start - 30 * _DAY
    u = rng.random(n)
    return start + np.log1p(u * np.expm1(g * span)) / g


def _review_instants(spec: dict, n_items: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(item index, epoch seconds) of every review: power-law counts, dated after the item's launch."""
    rv = spec["reviews_per_item"]
    counts = np.minimum(np.floor(rng.pareto(rv["shape"], size=n_items) * rv["scale"]), rv["max"]).astype(int)
    item_idx = np.repeat(np.arange(n_items), counts)
    end = _epoch(f"{spec['years'][1]}-12-31")
    launch = _launch_times(spec, n_items, rng)[item_idx]
    t = launch + rng.exponential(spec["review_delay_years"] * 365.25 * _DAY, size=len(item_idx))
    kept = t < end  # reviews after the data cut-off were never written
    item_idx, t = item_idx[kept], t[kept]
    lo_h, hi_h = spec["review_hours_utc"]
    secs = (t // _DAY).astype(np.int64) * _DAY + rng.integers(lo_h * 3600, hi_h * 3600, size=len(t))
    return item_idx, secs


def _ratings(spec: dict, cfg: dict, item_idx: np.ndarray, n_items: int, rng: np.random.Generator) -> np.ndarray:
    """J-shaped 1..5 stars, tilted up or down by a latent per-item quality."""
    quality = rng.normal(0.0, spec["quality_sd"], size=n_items)[item_idx]
    logits = np.log(np.array(cfg["rating_probs"]))[None, :] + spec["quality_tilt"] * quality[:, None] * (
        np.arange(1, 6)[None, :] - 3)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    cdf = np.cumsum(probs / probs.sum(axis=1, keepdims=True), axis=1)
    return np.minimum(1 + (rng.random(len(item_idx))[:, None] > cdf).sum(axis=1), 5).astype(np.int8)


def _reviews(spec: dict, cfg: dict, items: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    import pandas as pd
    item_idx, secs = _review_instants(spec, len(items), rng)
    n = len(item_idx)
    rating = _ratings(spec, cfg, item_idx, len(items), rng)
    verified = rng.random(n) < cfg["verified_rate"] - cfg["verified_5star_penalty"] * (rating == 5)
    hp = spec["helpful"]
    helpful = np.where(rng.random(n) < hp["p_any"], 1 + np.floor(rng.pareto(hp["shape"], size=n) * hp["scale"]), 0)
    pool = max(10, int(n * spec["users_per_review"]))
    users = _codes(rng, pool, 13, "A")
    heads = np.array([h for r in range(1, 6) for h in HEADLINES[r]], dtype=object)
    df = pd.DataFrame({
        "itm_id": items["itm_id"].to_numpy()[item_idx],
        "usr": users[(rng.random(n) ** 2 * pool).astype(int)],  # a few reviewers write many reviews
        "rtg": rating, "hlp_ct": np.minimum(helpful, hp["max"]).astype(np.int32), "verified": verified,
        "secs": secs, "hdl": heads[(rating.astype(int) - 1) * 5 + rng.integers(0, 5, size=n)],
    }).iloc[np.argsort(secs, kind="stable")].reset_index(drop=True)
    df.insert(0, "rv_id", 10_000_000 + np.arange(n) * 3 + rng.integers(0, 3, size=n))
    return df


def _stale_stats(spec: dict, items: pd.DataFrame, reviews: pd.DataFrame, rng: np.random.Generator):
    """n_rv / avg_rtg from an old snapshot, kept for only part of the items (a distractor)."""
    import pandas as pd
    old = reviews[reviews["secs"] < _epoch(spec["stale_snapshot"])]
    agg = old.groupby("itm_id")["rtg"].agg(["count", "mean"])
    stats = items[["itm_id"]].join(agg, on="itm_id")
    keep = rng.random(len(items)) < spec["stale_populated"]
    n_rv = pd.array(np.where(keep, stats["count"].fillna(0).to_numpy(), np.nan), dtype="Int32")
    avg = np.where(keep, stats["mean"].round(2).to_numpy(), np.nan)
    return n_rv, avg


def _statuses(spec: dict, g: str, items: pd.DataFrame, reviews: pd.DataFrame, rng: np.random.Generator):
    """Status codes of items and reviews: shares from the world; a deleted item's reviews are deleted."""
    st = spec["world"]["status"]
    item_codes, review_codes = st[f"items.{g}"]["codes"], st[f"reviews.{g}"]["codes"]

    def shares(codes):
        p = np.array([c[2] for c in codes], dtype=float)
        return p / p.sum()

    item_idx = rng.choice(len(item_codes), size=len(items), p=shares(item_codes))
    review_idx = rng.choice(len(review_codes), size=len(reviews), p=shares(review_codes))
    deleted_items = items["itm_id"].to_numpy()[[item_codes[k][1] == "deleted" for k in item_idx]]
    cascade = np.isin(reviews["itm_id"].to_numpy(), deleted_items)
    review_deleted = next(k for k, c in enumerate(review_codes) if c[1] == "deleted")
    review_idx[cascade] = review_deleted
    return ([str(item_codes[k][0]) for k in item_idx], [str(review_codes[k][0]) for k in review_idx])


def _write_codes(con, spec: dict) -> None:
    import pandas as pd
    world = spec["world"]
    rows = [(table(world, kind, g), c["column"], str(code), descr) for key, c in world["status"].items()
            for kind, g in [key.split(".")] for code, _, _, descr in c["codes"]]
    _create_table(con, world["lookup"], pd.DataFrame(rows, columns=["tbl", "col", "cd", "descr"]),
                  "tbl::VARCHAR AS tbl, col::VARCHAR AS col, cd::VARCHAR AS cd, descr::VARCHAR AS descr",
                  "tbl, col, cd", "code lookup - meaning of status codes")


def _status_col(spec: dict, key: str) -> str:
    c = spec["world"]["status"][key]
    return f"CAST(st AS {c['type']}) AS {c['column']}"


def _create_table(con, table: str, frame: pd.DataFrame, select: str, order: str, comment: str) -> None:
    con.register("frame", frame)
    con.execute(f"CREATE TABLE {table} AS SELECT {select} FROM frame ORDER BY {order}")
    con.unregister("frame")
    con.execute(f"COMMENT ON TABLE {table} IS '{comment}'")


def _write_taxonomy(con, spec: dict, g: str, cfg: dict, tops: list, leaves: list) -> None:
    import pandas as pd
    tax = pd.DataFrame([(i, None, name) for i, name in tops] + [(i, p, name) for i, p, name, _, _ in leaves],
                       columns=["cat_id", "par_id", "cat_nm"])
    _create_table(con, table(spec["world"], "taxonomy", g), tax, "cat_id::SMALLINT AS cat_id, "
                  "par_id::SMALLINT AS par_id, cat_nm::VARCHAR AS cat_nm", "cat_id", f"category tree - {cfg['name']}")


def price_sql(price: dict) -> str:
    """The stored price column from the dollar price `prc` of the frame: its unit and type."""
    rate = float(price["rate"])
    if price["type"] in ("BIGINT", "INTEGER") or price["type"].endswith(",0)"):  # whole units
        return f"CAST(round(prc * {rate:g}) AS {price['type']}) AS prc"
    return f"round(prc * {rate:g}, 2)::DOUBLE AS prc"


def _write_items(con, spec: dict, g: str, cfg: dict, items: pd.DataFrame, leaves: list) -> None:
    conv = spec["world"]["groups"][g]
    if conv["taxonomy"]:
        items = items.assign(cat_id=np.array([lf[0] for lf in leaves])[items["leaf"]])
        cat_col = "cat_id::SMALLINT AS cat_id"
    else:
        items = items.assign(cat_txt=np.array([f"{lf[3]} > {lf[2]}" for lf in leaves], dtype=object)[items["leaf"]])
        cat_col = "cat_txt::VARCHAR AS cat_txt"
    _create_table(con, table(spec["world"], "items", g), items, f"itm_id::INTEGER AS itm_id, ttl::VARCHAR AS ttl, "
                  f"brnd::VARCHAR AS brnd, {cat_col}, {price_sql(conv['price'])}, n_rv::INTEGER AS n_rv, "
                  f"avg_rtg::DOUBLE AS avg_rtg, {_status_col(spec, f'items.{g}')}", "itm_id",
                  f"catalog items - {cfg['name']}")


def _literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


TS_SQL = {"epoch_ms": "secs * 1000 AS ts", "epoch_s": "secs AS ts",
          "iso_text": "strftime(epoch_ms(secs * 1000), '%Y-%m-%dT%H:%M:%S') AS ts"}


def _write_reviews(con, spec: dict, g: str, cfg: dict, reviews: pd.DataFrame) -> None:
    conv = spec["world"]["groups"][g]
    kind, yes, no = conv["vrf"]
    vrf = f"(CASE WHEN verified THEN {_literal(yes)} ELSE {_literal(no)} END)::{kind} AS vrf"
    _create_table(con, table(spec["world"], "reviews", g), reviews, f"rv_id::BIGINT AS rv_id, itm_id::INTEGER AS itm_id, "
                  f"usr::VARCHAR AS usr, rtg::TINYINT AS rtg, hlp_ct::INTEGER AS hlp_ct, {vrf}, {TS_SQL[conv['ts']]}, "
                  f"hdl::VARCHAR AS hdl, {_status_col(spec, f'reviews.{g}')}", "rv_id",
                  f"customer reviews - {cfg['name']}")


def write_intake(con, spec: dict, g: str, start: int) -> None:
    """(Re)write group g's intake report: reviews written (every row, whatever its status) per fiscal
    quarter of the fiscal years `intake_fiscal_years`, under the fiscal calendar starting in month
    `start`. Its rows line up with the review dates only under the true calendar."""
    world = spec["world"]
    ts = TIME_EXPR[world["groups"][g]["ts"]]
    year, month = f"year({ts})", f"month({ts})"
    fy = f"({year} + CASE WHEN {start} > 1 AND {month} >= {start} THEN 1 ELSE 0 END)"
    fq = f"((({month}) - {start} + 12) % 12) // 3 + 1"
    lo, hi = spec["intake_fiscal_years"]
    name = table(world, "intake", g)
    con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT fy::SMALLINT AS fy, fq::TINYINT AS fq, "
                f"count(*)::INTEGER AS rv_ct FROM (SELECT {fy} AS fy, {fq} AS fq FROM {table(world, 'reviews', g)} f) "
                f"WHERE fy BETWEEN {int(lo)} AND {int(hi)} GROUP BY ALL ORDER BY fy, fq")
    con.execute(f"COMMENT ON TABLE {name} IS 'review intake by fiscal quarter - {spec['groups'][g]['name']}'")


def _write_group(con, spec: dict, g: str, rng: np.random.Generator) -> None:
    cfg = spec["groups"][g]
    conv = spec["world"]["groups"][g]
    n = max(20, int(round(spec["products_per_group"] * spec["scale"])))
    tops, leaves = _taxonomy(cfg, rng)
    items = _items(spec, cfg, n, rng, leaves)
    reviews = _reviews(spec, cfg, items, rng)
    items["n_rv"], items["avg_rtg"] = _stale_stats(spec, items, reviews, rng)
    items["st"], reviews["st"] = _statuses(spec, g, items, reviews, rng)
    if conv["taxonomy"]:
        _write_taxonomy(con, spec, g, cfg, tops, leaves)
    _write_items(con, spec, g, cfg, items, leaves)
    _write_reviews(con, spec, g, cfg, reviews)
    write_intake(con, spec, g, int(conv["fiscal_start"]))
    if conv["attributes"]:
        _create_table(con, table(spec["world"], "attributes", g), _attributes(cfg, items, leaves, rng),
                      "itm_id::INTEGER AS itm_id, k::VARCHAR AS k, v::VARCHAR AS v", "itm_id, k",
                      f"item attributes - {cfg['name']}")


def _attributes(cfg: dict, items: pd.DataFrame, leaves: list, rng: np.random.Generator) -> pd.DataFrame:
    import pandas as pd
    top = np.array([lf[3] for lf in leaves], dtype=object)[items["leaf"]]
    frames = []
    for key, a in cfg["attributes"].items():
        has = rng.random(len(items)) < a["p"]
        if "only_top" in a:
            has &= top == a["only_top"]
        vals = np.array(a["values"], dtype=object)[rng.integers(0, len(a["values"]), size=int(has.sum()))]
        frames.append(pd.DataFrame({"itm_id": items["itm_id"].to_numpy()[has], "k": key, "v": vals}))
    return pd.concat(frames, ignore_index=True)


def build_release1(spec: dict, scale: float, path: str) -> None:
    """Write release 1 of the database to `path` (which must not exist)."""
    if not (0 < scale <= 10 and math.isfinite(scale)):
        raise ValueError(f"scale must be in (0, 10], got {scale}")
    spec = dict(spec, scale=scale)
    con = duckdb.connect(str(path))
    try:
        con.execute("SET threads = 2")
        for g in GROUPS:
            _write_group(con, spec, g, np.random.default_rng([spec["seed"], GROUPS.index(g)]))
        _write_codes(con, spec)
        con.execute("CHECKPOINT")
    finally:
        con.close()


TIME_EXPR = {"epoch_ms": "epoch_ms(f.ts)", "epoch_s": "epoch_ms(f.ts * 1000)", "iso_text": "CAST(f.ts AS TIMESTAMP)"}


def price_expr(column: str, rate: float) -> str:
    """Dollars from a stored price column (alias i) in units of `rate` per dollar."""
    return f"i.{column}" if float(rate) == 1 else f"(i.{column} / {float(rate):g})"


def schema_map(spec: dict, world: dict) -> dict[str, dict]:
    """Ground truth: the group map (see logical.py) of every group in release 1, by group name."""
    maps = {}
    for g in GROUPS:
        conv = world["groups"][g]
        ts = TIME_EXPR[conv["ts"]]
        tax = table(world, "taxonomy", g)
        category = ({"kind": "taxonomy", "table": tax, "fk": "cat_id", "id": "cat_id", "parent": "par_id",
                     "name": "cat_nm"} if conv["taxonomy"] else {"kind": "path", "column": "cat_txt", "sep": " > "})
        attributes = ({"table": table(world, "attributes", g), "item": "itm_id", "key": "k", "value": "v"}
                      if conv["attributes"] else None)
        live = {}
        for alias, kind in (("i", "items"), ("f", "reviews")):
            c = world["status"][f"{kind}.{g}"]
            dead = [code for code, k, _, _ in c["codes"] if k == "deleted"]
            live[alias] = f"{alias}.{c['column']} NOT IN ({', '.join(_sql_lit(c['type'], d) for d in dead)})"
        kind, yes, _ = conv["vrf"]
        maps[spec["groups"][g]["name"]] = {
            "items": table(world, "items", g), "item_id": "itm_id", "brand": "brnd",
            "price": price_expr("prc", conv["price"]["rate"]), "category": category,
            "reviews": table(world, "reviews", g), "review_item": "itm_id", "rating": "rtg", "helpful": "hlp_ct",
            "verified": "f.vrf" if kind == "BOOLEAN" else f"f.vrf = {_literal(yes)}",
            "year": f"year({ts})", "month": f"month({ts})", "fiscal_start": int(conv["fiscal_start"]),
            "attributes": attributes, "item_live": live["i"], "review_live": live["f"],
            "intake": table(world, "intake", g),
        }
    return maps


def _sql_lit(sql_type: str, code) -> str:
    return str(int(code)) if sql_type.upper() in ("INTEGER", "SMALLINT", "TINYINT", "BIGINT") else f"'{code}'"
