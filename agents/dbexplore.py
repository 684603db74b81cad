"""Scripted agents for DBExplore-v1.

Both read a question with `logical.parse_question` (English -> what is asked) and answer with
the SQL `logical.compile_sql` builds from a *group map* (where a product group keeps what).

`DBExploreOracle` takes the group maps of both releases from the env's ground truth: one query
per question.

`DBExploreReference` learns the group maps from its own queries, the way a careful analyst
would: the catalog (tables, comments, row counts, columns and types in one query), then for
every table a question touches `SUMMARIZE` (types, ranges, NULL shares) and five sample rows,
the distinct values of verified-flag columns and, once, the code lookup table (which status
code marks a row as soft-deleted: its description says deleted, not "still listed"). From these it infers roles from abbreviated
names (prc -> price, rtg -> rating, ...), units (integer prices are cents), time encodings
(epoch seconds vs milliseconds by magnitude, ISO text), flag encodings, category layout (a
taxonomy table or a 'Top > Leaf' path) and, when two columns play one role, which overrides
which (a partly NULL column overrides the full one; a `*_cur` price supersedes the old one;
`*_legacy` tables are skipped). Stateful, it keeps what it learned; when the database release
changes (the migration notice), a query fails on a missing table or column, or the catalog no
longer matches, it re-reads the catalog and re-explores only the tables that changed.
Stateless (a fresh agent per question) it rediscovers everything every time.
`freeze_at=K` (for `clbench drift-check`): from position K on, every question starts from the
knowledge held at K; what it explores within a question is dropped when the question ends.

`DBExploreExplorer` is the careful memoryless analyst of issue 22: it remembers nothing between
questions and folds discovery into as few queries as it can: the catalog (it cannot know table
names before), then one probe that reads everything the question's tables need at once (the
lookup rows of their status columns, the range and NULL share of time columns, the distinct
values of flag columns, a sample category path), then the answer: three queries, so at most
0.8 ** 2 = 0.64 per question. tests/test_dbexplore.py measures its mean against 0.7 x r_max.
"""
from __future__ import annotations

import copy
import re
from typing import Generator

from clbench.agent import Agent
from clbench.envs.dbexplore.logical import LogicalQuery, QuestionNotUnderstood, compile_sql, parse_question

CATALOG_SQL = (
    "SELECT t.table_name, t.comment, t.estimated_size AS n_rows, "
    "string_agg(c.column_name || ' ' || c.data_type, ', ' ORDER BY c.column_index) AS columns "
    "FROM duckdb_tables() t JOIN duckdb_columns() c ON c.table_oid = t.table_oid "
    "GROUP BY ALL ORDER BY t.table_name"
)
_RELEASE = re.compile(r"^Database: release (\d+)", re.MULTILINE)
_QUESTION = re.compile(r"^Question \d+ of \d+: (.*)$", re.MULTILINE)
_FOOTER = re.compile(r"\n\[query \d+ of \d+ used; \d+ left\]\s*$")
_INT_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT")
_TRUTHY = {"y", "yes", "t", "true", "1", "verified", "v"}
_ROLE_OF_COMMENT = (("catalog items", "items"), ("reviews", "reviews"), ("category", "taxonomy"),
                    ("attributes", "attributes"))
_ROLE_OF_PREFIX = (("items", "items"), ("fdbk", "reviews"), ("tax", "taxonomy"), ("attr", "attributes"))
_STATUS = r"^(st|stat|status|stat_cd|status_cd)$"
_DELETED = re.compile(r"delet", re.IGNORECASE)
_STILL_THERE = re.compile(r"\bstill (listed|published|active|visible)\b", re.IGNORECASE)
_LOOKUP_COLS = {"tbl": r"^(tbl|table|table_name)$", "col": r"^(col|column|column_name)$", "cd": r"^(cd|code)$",
                "descr": r"^(descr|desc|description|label|lbl|meaning)$"}


# ---------------------------------------------------------------------- reading observations
def parse_table(observation: str) -> tuple[list[str], list[list[str]]] | None:
    """(columns, rows) of a query result observation, or None if the query failed."""
    text = _FOOTER.sub("", observation)
    if text.startswith(("Error:", "Rejected:")):
        return None
    lines = [ln for ln in text.split("\n") if ln and not ln.startswith("[")]
    if not lines:
        return None
    return lines[0].split(" | "), [ln.split(" | ") for ln in lines[1:]]


def first_value(observation: str) -> str | None:
    table = parse_table(observation)
    if table is None or not table[1] or table[1][0][0] == "NULL":
        return None
    return table[1][0][0]


def question_of(observation: str) -> tuple[int, str]:
    release = _RELEASE.search(observation)
    question = _QUESTION.search(observation)
    return (int(release.group(1)) if release else 1), (question.group(1) if question else "")


def _pick(columns, pattern: str) -> list[str]:
    return [c for c in columns if re.search(pattern, c, re.IGNORECASE)]


# ---------------------------------------------------------------------- inferring group maps
class SchemaInferenceError(LookupError):
    """What the agent knows does not say where something is."""


def _table_role(name: str, comment: str) -> str | None:
    for key, role in _ROLE_OF_COMMENT:
        if key in comment.lower():
            return role
    for prefix, role in _ROLE_OF_PREFIX:
        if name.lower().startswith(prefix):
            return role
    return None


def group_tables(catalog: dict, group: str) -> dict[str, str]:
    """{role: table} of one product group; legacy tables only where nothing else plays the role."""
    found: dict[str, list[str]] = {}
    for name, t in sorted(catalog.items()):
        if group in t["comment"].lower():
            role = _table_role(name, t["comment"])
            if role:
                found.setdefault(role, []).append(name)
    tables = {}
    for role, names in found.items():
        current = [n for n in names if "legacy" not in (n + catalog[n]["comment"]).lower()]
        tables[role] = (current or names)[0]
    return tables


def lookup_table(catalog: dict) -> str | None:
    """The table that says what status codes mean (its comment mentions codes), if any."""
    for name, t in sorted(catalog.items()):
        if re.search(r"\bcodes?\b", t["comment"], re.IGNORECASE) and all(_pick(t["columns"], p) for p in _LOOKUP_COLS.values()):
            return name
    return None


def read_codes(header: list[str], rows: list[list[str]]) -> dict:
    """{table: {column: {code: description}}} from the rows of a code lookup table."""
    pos = {}
    for key, pattern in _LOOKUP_COLS.items():
        found = [i for i, h in enumerate(header) if re.search(pattern, h, re.IGNORECASE)]
        if not found:
            raise SchemaInferenceError(f"no {key} column in the code lookup")
        pos[key] = found[0]
    codes: dict = {}
    for r in rows:
        if len(r) == len(header):
            codes.setdefault(r[pos["tbl"]], {}).setdefault(r[pos["col"]], {})[r[pos["cd"]]] = r[pos["descr"]]
    return codes


def _live_expr(k: dict, table: str, alias: str) -> str:
    """Boolean expression: the row of `table` (alias `alias`) is not soft-deleted."""
    cols = k["catalog"][table]["columns"]
    status = _pick(cols, _STATUS)
    if not status:
        return "TRUE"
    col = status[0]
    known = k["codes"].get(table, {}).get(col)
    if not known:
        raise SchemaInferenceError(f"what the codes of {table}.{col} mean is unknown")
    dead = [c for c, descr in sorted(known.items()) if _DELETED.search(descr) and not _STILL_THERE.search(descr)]
    if not dead:
        return "TRUE"
    lits = [c if _is_int(cols[col]) else "'" + c.replace("'", "''") + "'" for c in dead]
    return f"{alias}.{col} NOT IN ({', '.join(lits)})"


def _only(columns, pattern: str, what: str, table: str) -> str:
    found = _pick(columns, pattern)
    if not found:
        raise SchemaInferenceError(f"no {what} column in {table}")
    return found[0]


def _is_int(col_type: str) -> bool:
    return col_type.upper() in _INT_TYPES


def _price_expr(cols: dict, table: str) -> str:
    candidates = _pick(cols, r"^(prc|price)")
    current = [c for c in candidates if re.search(r"(cur|current|new|now|v\d)$", c, re.IGNORECASE)]
    if not candidates:
        raise SchemaInferenceError(f"no price column in {table}")
    col = (current or candidates)[0]
    return f"i.{col} / 100.0" if _is_int(cols[col]) else f"i.{col}"  # integer prices are cents


def _time_expr(col: str, col_type: str, profile: dict) -> str:
    if _is_int(col_type):
        top = float(profile[col]["max"])
        if top > 1e14:
            return f"make_timestamp(f.{col})"
        return f"epoch_ms(f.{col})" if top > 1e11 else f"epoch_ms(f.{col} * 1000)"
    if col_type.upper().startswith(("TIMESTAMP", "DATE")):
        return f"f.{col}"
    return f"CAST(f.{col} AS TIMESTAMP)"


def _flag_expr(col: str, col_type: str, values: list[str]) -> str:
    if col_type.upper() == "BOOLEAN":
        return f"f.{col}"
    truthy = [v for v in values if v.strip().lower() in _TRUTHY]
    if not truthy:
        raise SchemaInferenceError(f"no 'verified' value among {values[:6]} of {col}")
    lit = truthy[0] if _is_int(col_type) else "'" + truthy[0].replace("'", "''") + "'"
    return f"f.{col} = {lit}"


def _nulls(profile: dict, col: str) -> float:
    try:
        return float(profile[col]["null_percentage"])
    except (KeyError, ValueError):
        return 0.0


def infer_group_map(k: dict, group: str, q: LogicalQuery) -> dict:
    """The parts of `group`'s map that `q` needs, from catalog, profiles, samples and values."""
    cat = k["catalog"]
    tables = group_tables(cat, group)
    m: dict = {}
    if q.needs_items:
        items = tables.get("items") or _missing("items", group)
        cols = cat[items]["columns"]
        m.update(items=items, item_id=_only(cols, r"^(itm|item)_?id$", "item id", items),
                 brand=_only(cols, r"^(brnd|brand)", "brand", items))
        m["item_live"] = _live_expr(k, items, "i")
        if q.needs_price:
            m["price"] = _price_expr(cols, items)
        if q.needs_category:
            m["category"] = _category(k, tables, items, cols)
        if q.attribute is not None:
            attrs = tables.get("attributes") or _missing("attributes", group)
            acols = cat[attrs]["columns"]
            m["attributes"] = {"table": attrs, "item": _only(acols, r"(itm|item)_?id$", "item id", attrs),
                               "key": _only(acols, r"^(k|key|attr_nm|attr_name)$", "key", attrs),
                               "value": _only(acols, r"^(v|val|value|attr_val|attr_value)$", "value", attrs)}
    if q.entity == "reviews":
        rv = tables.get("reviews") or _missing("reviews", group)
        cols, prof = cat[rv]["columns"], k["profiles"].get(rv, {})
        m.update(reviews=rv, review_item=_only(cols, r"^(itm|item)_?id$", "item id", rv),
                 rating=_only(cols, r"^(rtg|rating|stars)$", "rating", rv),
                 helpful=_only(cols, r"^(hlp|helpful)", "helpful", rv), review_live=_live_expr(k, rv, "f"))
        if q.needs_verified:
            m["verified"] = _verified(k, rv, cols, prof)
        if q.needs_dates:
            m["year"], m["month"] = _dates(rv, cols, prof)
    return m


def _missing(role: str, group: str):
    raise SchemaInferenceError(f"no {role} table for {group}")


def _category(k: dict, tables: dict, items: str, cols: dict) -> dict:
    if _pick(cols, r"^cat_?id$"):
        tax = tables.get("taxonomy") or _missing("taxonomy", items)
        tcols = k["catalog"][tax]["columns"]
        return {"kind": "taxonomy", "table": tax, "fk": _pick(cols, r"^cat_?id$")[0],
                "id": _only(tcols, r"^(cat_?id|id)$", "id", tax), "parent": _only(tcols, r"^par", "parent", tax),
                "name": _only(tcols, r"(_nm|name)$", "name", tax)}
    col = _only(cols, r"^cat", "category", items)
    samples = [row.get(col, "") for row in k["samples"].get(items, [])]
    for sep in (" > ", " / ", " | ", ">", "/"):
        if samples and all(sep in s for s in samples if s and s != "NULL"):
            return {"kind": "path", "column": col, "sep": sep}
    raise SchemaInferenceError(f"cannot tell how {items}.{col} separates category levels")


def _verified(k: dict, rv: str, cols: dict, prof: dict) -> str:
    flags = _pick(cols, r"^(vrf|verified)")
    if not flags:
        raise SchemaInferenceError(f"no verified flag in {rv}")
    values = k["values"].get(rv, {})
    exprs = {c: _flag_expr(c, cols[c], values.get(c, [])) for c in flags}
    partial = [c for c in flags if _nulls(prof, c) > 0]
    full = [c for c in flags if c not in partial]
    if partial and full:  # a partly filled column overrides the complete one where it is set
        return f"COALESCE({exprs[partial[0]]}, {exprs[full[0]]})"
    return exprs[flags[0]]


def _dates(rv: str, cols: dict, prof: dict) -> tuple[str, str]:
    times = _pick(cols, r"^(ts|time|date|created)")
    ts = _time_expr(times[0], cols[times[0]], prof) if times else None
    yr, mo = _pick(cols, r"^(yr|year)$"), _pick(cols, r"^(mo|month)$")
    if yr and mo:
        if ts is None or _nulls(prof, yr[0]) == 0:
            return f"f.{yr[0]}", f"f.{mo[0]}"
        return f"COALESCE(f.{yr[0]}, year({ts}))", f"COALESCE(f.{mo[0]}, month({ts}))"
    if ts is None:
        raise SchemaInferenceError(f"no review time in {rv}")
    return f"year({ts})", f"month({ts})"


# ---------------------------------------------------------------------- agents
class _QuestionAgent(Agent):
    """Plays one question as a generator of actions fed with observations."""

    deterministic = True  # plays from its observations only: one stateless pass measures it
    def __init__(self, card, seed: int = 0, latent=None):
        super().__init__(card, seed=seed, latent=latent)
        self._plan: Generator[str, str, None] | None = None
        self._first = True

    def begin_instance(self, observation: str, info: dict) -> None:
        release, text = question_of(observation)
        self._plan = self.play(release, text)
        self._first = True

    def act(self, observation: str, info: dict) -> str:
        if self._plan is None:
            self.begin_instance(observation, info)
        try:
            action = next(self._plan) if self._first else self._plan.send(observation)
        except StopIteration:
            action = "ANSWER: unknown"
        self._first = False
        return action

    def play(self, release: int, text: str) -> Generator[str, str, None]:
        try:
            q = parse_question(text)
        except QuestionNotUnderstood:
            yield "ANSWER: unknown"
            return
        yield from self.solve(release, q)

    def solve(self, release: int, q: LogicalQuery) -> Generator[str, str, None]:
        raise NotImplementedError

    @staticmethod
    def answer(observation: str) -> str:
        value = first_value(observation)
        return f"ANSWER: {value if value is not None else 0}"


class DBExploreOracle(_QuestionAgent):
    """Knows every convention of both releases: one query per question."""

    name = "oracle"
    privileged = True

    def solve(self, release: int, q: LogicalQuery):
        obs = yield "QUERY: " + compile_sql(q, self.latent["releases"][str(release)][q.group])
        yield self.answer(obs)


class DBExploreReference(_QuestionAgent):
    """Discovers the schema from catalog queries and samples; stateful, it remembers (see module doc)."""

    name = "reference"
    #: rediscovery attempts per question after a query failed on a stale map
    max_refreshes = 2

    def __init__(self, card, seed: int = 0, latent=None, freeze_at: int | None = None):
        super().__init__(card, seed=seed)
        self.knowledge = {"release": None, "catalog": None, "profiles": {}, "samples": {}, "values": {}, "codes": {},
                          "lookup": None}
        self._catalog_stale = False
        self.freeze_at = freeze_at
        self._frozen: dict | None = None  # the state_dict held at freeze_at

    def begin_instance(self, observation: str, info: dict) -> None:
        if self.frozen(info) and self._frozen is None:
            self._frozen = self.state_dict()  # what it knew at freeze_at
        super().begin_instance(observation, info)

    def end_instance(self, reward: float, info: dict) -> None:
        if self._frozen is not None:
            self.load_state_dict(self._frozen)  # this question's discoveries are not kept

    # --- knowledge --------------------------------------------------------------------------
    def _learn_catalog(self, observation: str) -> bool:
        table = parse_table(observation)
        if table is None:
            return False
        old = self.knowledge["catalog"]
        catalog = {}
        for row in table[1]:
            if len(row) < 4:
                continue
            name, comment, n_rows, columns = row[0], row[1], row[2], " | ".join(row[3:])
            cols = dict(c.split(" ", 1) for c in columns.split(", ") if " " in c)
            catalog[name] = {"comment": "" if comment == "NULL" else comment, "rows": n_rows, "columns": cols}
        if old is not None:  # forget what we knew about tables that changed or went away
            for name in set(old) | set(catalog):
                if old.get(name) != catalog.get(name):
                    for part in ("profiles", "samples", "values"):
                        self.knowledge[part].pop(name, None)
                    if name == self.knowledge.get("lookup"):
                        self.knowledge["codes"], self.knowledge["lookup"] = {}, None
        self.knowledge["catalog"] = catalog
        self._catalog_stale = False
        return True

    def _learn(self, part: str, table: str, observation: str, digest) -> bool:
        """Store digest(header, rows) of a result under knowledge[part][table]; False if it failed."""
        parsed = parse_table(observation)
        if parsed is None:
            return False
        self.knowledge[part][table] = digest(*parsed)
        return True

    def _learn_profile(self, table: str, observation: str) -> bool:  # SUMMARIZE: one row per column
        return self._learn("profiles", table, observation,
                           lambda header, rows: {r[0]: dict(zip(header, r)) for r in rows if r})

    def _learn_sample(self, table: str, observation: str) -> bool:
        return self._learn("samples", table, observation,
                           lambda header, rows: [dict(zip(header, r)) for r in rows])

    def _learn_codes(self, lookup: str, observation: str) -> bool:
        parsed = parse_table(observation)
        if parsed is None:
            return False
        try:
            self.knowledge["codes"] = read_codes(*parsed)
        except SchemaInferenceError:
            return False
        self.knowledge["lookup"] = lookup
        return True

    def _learn_values(self, table: str, columns: list[str], observation: str) -> bool:
        def distinct(header, rows):
            seen = dict(self.knowledge["values"].get(table, {}), **{c: [] for c in columns})
            for row in rows:
                for c, v in zip(columns, row):
                    if v != "NULL" and v not in seen[c]:
                        seen[c].append(v)
            return seen

        return self._learn("values", table, observation, distinct)

    # --- one question -----------------------------------------------------------------------
    def _tables_needed(self, q: LogicalQuery) -> list[str]:
        cat = self.knowledge["catalog"]
        tables = group_tables(cat, q.group)
        need = []
        if q.entity == "reviews" and "reviews" in tables:
            need.append(tables["reviews"])
        if q.needs_items and "items" in tables:
            need.append(tables["items"])
            if q.needs_category and _pick(cat[tables["items"]]["columns"], r"^cat_?id$") and "taxonomy" in tables:
                need.append(tables["taxonomy"])
            if q.attribute is not None and "attributes" in tables:
                need.append(tables["attributes"])
        return need

    def _explore(self, q: LogicalQuery):
        """Queries (yielded) that fill the gaps in what `q` needs; returns False if one failed."""
        k = self.knowledge
        if k["catalog"] is None or self._catalog_stale:
            if not self._learn_catalog((yield "QUERY: " + CATALOG_SQL)):
                return False
        for table in self._tables_needed(q):  # column stats and sample rows of every table touched
            if table not in k["profiles"]:
                if not self._learn_profile(table, (yield f"QUERY: SUMMARIZE {table}")):
                    return False
            if table not in k["samples"]:
                if not self._learn_sample(table, (yield f"QUERY: SELECT * FROM {table} LIMIT 5")):
                    return False
        lookup = lookup_table(k["catalog"])
        coded = [t for t in self._tables_needed(q) if _pick(k["catalog"][t]["columns"], _STATUS)]
        if lookup and coded and k["lookup"] != lookup:  # the whole lookup at once: it is small
            if not self._learn_codes(lookup, (yield f"QUERY: SELECT * FROM {lookup}")):
                return False
        if q.needs_verified:
            rv = group_tables(k["catalog"], q.group).get("reviews")
            flags = _pick(k["catalog"][rv]["columns"], r"^(vrf|verified)") if rv else []
            if flags and any(f not in k["values"].get(rv, {}) for f in flags):
                sql = f"SELECT {', '.join(flags)}, count(*) AS n FROM {rv} GROUP BY ALL ORDER BY ALL"
                if not self._learn_values(rv, flags, (yield "QUERY: " + sql)):
                    return False
        return True

    def solve(self, release: int, q: LogicalQuery):
        k = self.knowledge
        if k["release"] is not None and k["release"] != release and k["catalog"] is not None:
            self._catalog_stale = True  # migration notice: re-read the catalog, keep what still holds
        k["release"] = release
        for _ in range(self.max_refreshes + 1):
            ok = yield from self._explore(q)
            if ok:
                try:
                    sql = compile_sql(q, infer_group_map(k, q.group, q))
                except (SchemaInferenceError, KeyError, ValueError):
                    sql = None
                if sql is not None:
                    obs = yield "QUERY: " + sql
                    if parse_table(obs) is not None:
                        yield self.answer(obs)
                        return
            self._catalog_stale = True  # something we relied on is gone: look again
        yield "ANSWER: 0"

    # --- persistence ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = {"knowledge": copy.deepcopy(self.knowledge), "catalog_stale": self._catalog_stale}
        if self._frozen is not None:
            state["frozen"] = self._frozen
        return state

    def load_state_dict(self, state: dict) -> None:
        self.knowledge = {"codes": {}, "lookup": None, **copy.deepcopy(state["knowledge"])}
        self._catalog_stale = bool(state.get("catalog_stale", False))
        self._frozen = state.get("frozen", self._frozen)


class DBExploreExplorer(DBExploreReference):
    """Careful and memoryless: catalog, one folded probe, answer (see module doc)."""

    name = "explorer"

    def begin_instance(self, observation: str, info: dict) -> None:
        self.load_state_dict({"knowledge": {"release": None, "catalog": None, "profiles": {}, "samples": {},
                                            "values": {}, "codes": {}, "lookup": None}})
        super().begin_instance(observation, info)

    def _probe_sql(self, q: LogicalQuery, lookup: str | None) -> str:
        """One query of (tbl, col, k, v) text rows: everything the question's tables need."""
        cat = self.knowledge["catalog"]
        parts = []
        for t in self._tables_needed(q):
            cols = cat[t]["columns"]
            for c in _pick(cols, r"^(ts|time|date|created|yr|year|mo|month)") + _pick(cols, r"^(vrf|verified)"):
                parts.append(f"SELECT '{t}', '{c}', 'max', max({c})::VARCHAR FROM {t}")
                parts.append(f"SELECT '{t}', '{c}', 'null_percentage', "
                             f"(100.0 * count(*) FILTER ({c} IS NULL) / count(*))::VARCHAR FROM {t}")
            for c in _pick(cols, r"^(vrf|verified)"):
                parts.append(f"SELECT '{t}', '{c}', 'values', string_agg(DISTINCT {c}::VARCHAR, '~') FROM {t}")
            for c in _pick(cols, r"^cat") if not _pick(cols, r"^cat_?id$") else []:
                parts.append(f"SELECT '{t}', '{c}', 'sample', string_agg(DISTINCT {c}, '~') FROM "
                             f"(SELECT {c} FROM {t} LIMIT 5)")
        if lookup:
            lk = cat[lookup]["columns"]
            tbl, col, cd, descr = (_pick(lk, _LOOKUP_COLS[key])[0] for key in ("tbl", "col", "cd", "descr"))
            tables = ", ".join(f"'{t}'" for t in self._tables_needed(q))
            parts.append(f"SELECT {tbl}, {col}, 'code', {cd} || '~' || {descr} FROM {lookup} WHERE {tbl} IN ({tables})")
        return " UNION ALL ".join(f"({p})" for p in parts) if parts else "SELECT 1"

    def _learn_probe(self, tables: list[str], observation: str, lookup: str | None) -> bool:
        parsed = parse_table(observation)
        if parsed is None:
            return False
        k = self.knowledge
        for t in tables:  # a column the probe did not list has no NULLs, values or sample to report
            k["profiles"].setdefault(t, {})
            k["samples"].setdefault(t, [{}])
            k["values"].setdefault(t, {})
        for row in parsed[1]:
            if len(row) != 4:
                continue
            t, c, key, v = row
            if key == "code":
                code, descr = v.split("~", 1)
                k["codes"].setdefault(t, {}).setdefault(c, {})[code] = descr
            elif key == "values":
                k["values"].setdefault(t, {})[c] = [] if v == "NULL" else v.split("~")
            elif key == "sample":
                k["samples"][t] = [{c: s} for s in v.split("~")]
            else:
                k["profiles"].setdefault(t, {}).setdefault(c, {})[key] = v
        k["lookup"] = lookup
        return True

    def _explore(self, q: LogicalQuery):
        k = self.knowledge
        if k["catalog"] is None or self._catalog_stale:
            if not self._learn_catalog((yield "QUERY: " + CATALOG_SQL)):
                return False
        lookup = lookup_table(k["catalog"])
        tables = self._tables_needed(q)
        if any(t not in k["profiles"] for t in tables):
            if not self._learn_probe(tables, (yield "QUERY: " + self._probe_sql(q, lookup)), lookup):
                return False
        return True
