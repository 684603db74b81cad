"""The question language of DBExplore and its compilation to SQL, for scripted agents.

`parse_question` turns a question's English into a `LogicalQuery` (what is asked: a count, an
average, a top brand, ... with filters). It knows English, not the database. `compile_sql`
turns a `LogicalQuery` into SQL given a *group map*: where a product group keeps what in the
database. The oracle gets its group maps from the env's ground truth; the reference agent
builds them from its own catalog queries. Group map (a JSON-serialisable dict; expressions
use the aliases `i` for the items table and `f` for the reviews table):

    items, item_id, brand, price             table, columns; price is a dollar expression
    category: {"kind": "taxonomy", "table", "fk", "id", "parent", "name"}
            | {"kind": "path", "column", "sep"}
    reviews, review_item, rating, helpful   table and columns
    verified, year, month                   boolean / integer expressions over `f`
    fiscal_start                            month (1-12) the group's fiscal year starts in, or an
                                            SQL expression giving it; fiscal year Y ends in
                                            calendar year Y (1: calendar years)
    intake                                  the group's review-intake-per-fiscal-quarter table
    attributes: {"table", "item", "key", "value"} or None
    item_live, review_live                  boolean expressions over `i` / `f`: the row is not
                                            soft-deleted (reviews of deleted items are deleted too)
"""
from __future__ import annotations

import re
from dataclasses import dataclass

GROUP_NAMES = ("office products", "electronics", "musical instruments")
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december")

_GROUP = re.compile(r"\b(office(?: products)?|electronics|musical instruments)\b", re.I)
_MEASURES = [  # (pattern, measure, entity); the first match wins
    (r"\bfraction of (?:the )?reviews\b", "share_verified", "reviews"),
    (r"\btotal number of helpful votes\b", "sum_helpful", "reviews"),
    (r"\baverage star rating\b", "avg_rating", "reviews"),
    (r"\baverage (?:current )?price\b", "avg_price", "products"),
    (r"\bhighest (?:current )?price\b", "max_price", "products"),
    (r"^which brand\b.*\bmost reviews\b", "top_brand_by_reviews", "reviews"),
    (r"^which top-level category\b.*\bmost products\b", "top_category_by_products", "products"),
    (r"^how many\b.*\breviews\b", "count", "reviews"),
    (r"^how many\b", "count", "products"),
]


class QuestionNotUnderstood(ValueError):
    """The question is outside the language `parse_question` knows."""


@dataclass(frozen=True)
class LogicalQuery:
    group: str
    measure: str
    entity: str  # products | reviews
    brand: str | None = None
    category: str | None = None
    attribute: tuple[str, str] | None = None
    price_gt: float | None = None
    price_lt: float | None = None
    year: int | None = None
    month: int | None = None
    verified: bool = False
    rating: int | None = None
    fiscal: bool = False

    @property
    def needs_items(self) -> bool:
        return self.entity == "products" or self.measure in ("top_brand_by_reviews",) or any(
            x is not None for x in (self.brand, self.category, self.attribute, self.price_gt, self.price_lt))

    @property
    def needs_category(self) -> bool:
        return self.category is not None or self.measure == "top_category_by_products"

    @property
    def needs_price(self) -> bool:
        return self.measure in ("avg_price", "max_price") or self.price_gt is not None or self.price_lt is not None

    @property
    def needs_verified(self) -> bool:
        return self.verified or self.measure == "share_verified"

    @property
    def needs_dates(self) -> bool:
        return self.year is not None


def parse_question(text: str) -> LogicalQuery:
    """Read a DBExplore question; raise QuestionNotUnderstood if it is not in the language."""
    q = " ".join(text.split())
    low = q.lower()
    g = _GROUP.search(low)
    if not g:
        raise QuestionNotUnderstood(f"no product group in {q!r}")
    group = "office products" if g.group(1).startswith("office") else g.group(1)
    for pattern, measure, entity in _MEASURES:
        if re.search(pattern, low):
            break
    else:
        raise QuestionNotUnderstood(f"no known measure in {q!r}")
    fields: dict = {}
    if m := re.search(r"\bbrand '([^']+)'", q):
        fields["brand"] = m.group(1)
    if m := re.search(r"\bin the '([^']+)' category", q):
        fields["category"] = m.group(1)
    if m := re.search(r"\battribute '([^']+)' set to '([^']+)'", q):
        fields["attribute"] = (m.group(1), m.group(2))
    if m := re.search(r"\bcosts? more than \$([\d.]+)", low):
        fields["price_gt"] = float(m.group(1))
    if m := re.search(r"\bcosts? less than \$([\d.]+)", low):
        fields["price_lt"] = float(m.group(1))
    if m := re.search(r"\bwritten in fiscal year (\d{4})\b", low):
        fields["year"], fields["fiscal"] = int(m.group(1)), True
    elif m := re.search(rf"\bwritten in (?:({'|'.join(MONTHS)}) )?(\d{{4}})\b", low):
        fields["year"] = int(m.group(2))
        fields["month"] = MONTHS.index(m.group(1)) + 1 if m.group(1) else None
    if m := re.search(r"\b([1-5])-star\b", low):
        fields["rating"] = int(m.group(1))
    fields["verified"] = measure != "share_verified" and "verified" in low
    return LogicalQuery(group=group, measure=measure, entity=entity, **fields)


def _lit(value) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _category_exprs(m: dict) -> tuple[str, str, str]:
    """(extra FROM clause, leaf-name expression, top-level-name expression)."""
    c = m["category"]
    if c["kind"] == "taxonomy":
        join = (f" JOIN {c['table']} l ON i.{c['fk']} = l.{c['id']}"
                f" LEFT JOIN {c['table']} t ON l.{c['parent']} = t.{c['id']}")
        return join, f"l.{c['name']}", f"COALESCE(t.{c['name']}, l.{c['name']})"
    sep = _lit(c["sep"])
    return "", f"split_part(i.{c['column']}, {sep}, 2)", f"split_part(i.{c['column']}, {sep}, 1)"


def fiscal_year(m: dict, start: int | str | None = None) -> str:
    """The fiscal-year expression of group map `m` (fiscal year Y ends in calendar year Y); the start
    month is a number or an SQL expression (a scalar subquery that finds it in the data)."""
    s = m.get("fiscal_start", 1) if start is None else start
    if isinstance(s, str):
        return f"({m['year']} + CASE WHEN {s} > 1 AND {m['month']} >= {s} THEN 1 ELSE 0 END)"
    s = int(s)
    return m["year"] if s == 1 else f"({m['year']} + CASE WHEN {m['month']} >= {s} THEN 1 ELSE 0 END)"


_SELECT = {
    "count": "count(*)",
    "avg_price": "avg({price})",
    "max_price": "max({price})",
    "avg_rating": "avg(f.{rating})",
    "sum_helpful": "sum(f.{helpful})",
    "share_verified": "avg(CASE WHEN {verified} THEN 1.0 ELSE 0.0 END)",
}


def compile_sql(q: LogicalQuery, m: dict) -> str:
    """One SQL query answering `q` on the group described by group map `m`."""
    if q.entity == "reviews":
        frm = f"{m['reviews']} f"
        if q.needs_items:
            frm += f" JOIN {m['items']} i ON f.{m['review_item']} = i.{m['item_id']}"
    else:
        frm = f"{m['items']} i"
    # soft-deleted rows are in no answer (a deleted item's reviews are deleted too)
    where = [m["review_live"] if q.entity == "reviews" else m["item_live"]]
    top = None
    if q.needs_category:
        join, leaf, top = _category_exprs(m)
        frm += join
        if q.category is not None:
            where.append(f"({leaf} = {_lit(q.category)} OR {top} = {_lit(q.category)})")
    if q.brand is not None:
        where.append(f"i.{m['brand']} = {_lit(q.brand)}")
    if q.attribute is not None:
        a = m["attributes"]
        where.append(f"i.{m['item_id']} IN (SELECT {a['item']} FROM {a['table']} WHERE {a['key']} = "
                     f"{_lit(q.attribute[0])} AND {a['value']} = {_lit(q.attribute[1])})")
    if q.price_gt is not None:
        where.append(f"{m['price']} > {q.price_gt!r}")
    if q.price_lt is not None:
        where.append(f"{m['price']} < {q.price_lt!r}")
    if q.year is not None:
        where.append(f"{fiscal_year(m) if q.fiscal else m['year']} = {q.year}")
    if q.month is not None:
        where.append(f"{m['month']} = {q.month}")
    if q.verified:
        where.append(m["verified"])
    if q.rating is not None:
        where.append(f"f.{m['rating']} = {q.rating}")
    if q.measure == "top_brand_by_reviews":
        where.append(f"i.{m['brand']} IS NOT NULL")
        sel, tail = f"i.{m['brand']} AS brand", " GROUP BY brand ORDER BY count(*) DESC, brand LIMIT 1"
    elif q.measure == "top_category_by_products":
        sel, tail = f"{top} AS category", " GROUP BY category ORDER BY count(*) DESC, category LIMIT 1"
    else:
        sel, tail = _SELECT[q.measure].format(**m), ""
    cond = " WHERE " + " AND ".join(where) if where else ""
    return f"SELECT {sel} FROM {frm}{cond}{tail}"
