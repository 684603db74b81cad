"""Hardened, read-only DuckDB access for agents (DBExplore, CohortStudies).

The agent's connection is opened read-only with external access disabled (no file or network
reads: `read_csv('/etc/passwd')`, COPY ... TO, ATTACH, INSTALL/LOAD all fail), extension
autoloading off, memory and threads capped and then the configuration locked, so a query
cannot SET its way back. Only single SELECT-type statements (SELECT, WITH, DESCRIBE, SHOW,
SUMMARIZE, FROM ...) are accepted. Each query runs under a wall-clock limit enforced with
`connection.interrupt()`; results are capped in rows and characters with a note.
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

import duckdb

HARDENED_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "threads": 1,
    "memory_limit": "1GB",
    "max_temp_directory_size": "0KiB",
}


class QueryRejected(ValueError):
    """The statement is not a single read-only query."""


@dataclass
class QueryResult:
    ok: bool
    text: str
    columns: list[str]
    rows: list[tuple]
    row_count: int
    elapsed: float
    error: str | None = None


_SHARED: dict[str, duckdb.DuckDBPyConnection] = {}
_SHARED_LOCK = threading.Lock()


def connect_readonly(path: str, memory_limit: str = "1GB") -> duckdb.DuckDBPyConnection:
    """A hardened read-only cursor on `path`, configuration locked.

    DuckDB keeps one database instance per file and process, and a locked instance cannot be
    configured again, so every caller gets its own cursor on one shared hardened connection.
    """
    key = str(path)
    with _SHARED_LOCK:
        con = _SHARED.get(key)
        if con is None:
            config = dict(HARDENED_CONFIG, memory_limit=memory_limit)
            con = duckdb.connect(key, read_only=True, config=config)
            con.execute("SET TimeZone = 'UTC'")  # answers must not depend on the host's zone
            con.execute("SET lock_configuration = true")
            _SHARED[key] = con
        return con.cursor()


@contextlib.contextmanager
def time_limit(con: duckdb.DuckDBPyConnection, timeout: float):
    """Interrupt `con`'s running query once `timeout` seconds have passed (DuckDB then raises
    InterruptException inside the with-block)."""
    timer = threading.Timer(timeout, con.interrupt)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def check_readonly(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise QueryRejected unless `sql` is exactly one SELECT-type statement."""
    if not sql.strip():
        raise QueryRejected("empty query")
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryRejected(f"{type(exc).__name__}: {exc}") from None
    if len(statements) != 1:
        raise QueryRejected(f"send exactly one statement per query (got {len(statements)})")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise QueryRejected(f"only read-only SELECT queries are allowed (got a {kind.name} statement)")


def format_rows(columns: list[str], rows: list[tuple], total: int, max_rows: int, max_chars: int,
                more: bool = False) -> str:
    """Rows as a pipe-separated table with a truncation note when capped."""
    lines = [" | ".join(columns)]
    for row in rows[:max_rows]:
        lines.append(" | ".join("NULL" if v is None else str(v) for v in row))
    text = "\n".join(lines)
    notes = []
    if total > max_rows:
        notes.append(f"showing {max_rows} of {'more than ' if more else ''}{total} rows")
    if len(text) > max_chars:
        text = text[:max_chars]
        notes.append(f"output cut at {max_chars} characters")
    if notes:
        text += "\n[" + "; ".join(notes) + "]"
    return text


def run_query(con: duckdb.DuckDBPyConnection, sql: str, timeout: float = 10.0,
              max_rows: int = 50, max_chars: int = 4000) -> QueryResult:
    """Run one read-only query with a time limit; errors come back verbatim, never raised."""
    start = time.perf_counter()
    try:
        check_readonly(con, sql)
    except QueryRejected as exc:
        return QueryResult(False, f"Rejected: {exc}", [], [], 0, 0.0, error=str(exc))
    try:
        with time_limit(con, timeout):
            cur = con.execute(sql)
            columns = [d[0] for d in cur.description] if cur.description else []
            rows = cur.fetchmany(max_rows + 1)
            total = len(rows)
            more = False
            if total > max_rows:
                # count the rest up to a cap without materialising it all in Python
                extra = len(cur.fetchmany(100_000))
                total = max_rows + 1 + extra
                more = extra == 100_000
    except duckdb.InterruptException:
        elapsed = time.perf_counter() - start
        msg = f"query interrupted after the {timeout:g} s time limit"
        return QueryResult(False, f"Error: {msg}", [], [], 0, elapsed, error=msg)
    except duckdb.Error as exc:
        elapsed = time.perf_counter() - start
        msg = f"{type(exc).__name__}: {exc}"
        return QueryResult(False, f"Error: {msg}", [], [], 0, elapsed, error=msg)
    elapsed = time.perf_counter() - start
    text = format_rows(columns, rows, total, max_rows, max_chars, more)
    return QueryResult(True, text, columns, rows[:max_rows], total, elapsed)
