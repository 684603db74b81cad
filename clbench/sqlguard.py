"""Hardened, read-only DuckDB access for agents (DBExplore, CohortStudies).

The agent's connection is opened read-only with external access disabled (no file or network
reads: `read_csv('/etc/passwd')`, COPY ... TO, ATTACH, INSTALL/LOAD all fail), extension
autoloading off, memory and threads capped and then the configuration locked, so a query
cannot SET its way back. Only single SELECT-type statements (SELECT, WITH, DESCRIBE, SHOW,
SUMMARIZE, FROM ...) are accepted. Each query runs under a wall-clock limit enforced with
`connection.interrupt()`; results are capped in rows and characters with a note.
"""
from __future__ import annotations

import atexit
import contextlib
import itertools
import math
import threading
import time
from collections import OrderedDict
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


class _Armed:
    __slots__ = ("deadline", "con", "fired")

    def __init__(self, deadline: float, con):
        self.deadline, self.con, self.fired = deadline, con, False


class _Watchdog:
    """One daemon thread interrupting every query that outlives its deadline.

    A Timer thread per query cost 14% of a CohortStudies rollout; arming here is a dict insert
    under a lock, and the thread is only woken when a new deadline is earlier than its next one.
    """

    def __init__(self):
        self._cond = threading.Condition()
        self._armed: dict[int, _Armed] = {}
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None
        self._wake_at = float("inf")
        self._stopping = False
        self._at_exit = False

    def arm(self, con, timeout: float) -> tuple[int, _Armed]:
        entry = _Armed(time.monotonic() + timeout, con)
        with self._cond:
            token = next(self._tokens)
            self._armed[token] = entry
            if self._thread is None or not self._thread.is_alive():
                self._stopping = False
                self._thread = threading.Thread(target=self._loop, name="clbench-query-watchdog", daemon=True)
                self._thread.start()
                if not self._at_exit:  # a thread still parked at exit keeps DuckDB from finalizing cleanly
                    atexit.register(self.stop)
                    self._at_exit = True
            if entry.deadline < self._wake_at:
                self._cond.notify()
        return token, entry

    def disarm(self, token: int) -> None:
        """After this returns the query can no longer be interrupted by the watchdog."""
        with self._cond:
            self._armed.pop(token, None)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=1)

    def _loop(self) -> None:
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                for token in [t for t, e in self._armed.items() if e.deadline <= now]:
                    entry = self._armed.pop(token)
                    entry.fired = True
                    try:
                        entry.con.interrupt()
                    except duckdb.Error:  # closed meanwhile
                        pass
                    entry.con = entry = None  # hold no connection while idle (nor at interpreter exit)
                self._wake_at = min((e.deadline for e in self._armed.values()), default=float("inf"))
                self._cond.wait(None if self._wake_at == float("inf") else self._wake_at - now)


_WATCHDOG = _Watchdog()


@contextlib.contextmanager
def time_limit(con: duckdb.DuckDBPyConnection, timeout: float):
    """Interrupt `con`'s running query once `timeout` seconds have passed (DuckDB then raises
    InterruptException inside the with-block).

    DuckDB turns a SIGINT during a query into the same InterruptException; one the watchdog did
    not cause is re-raised as KeyboardInterrupt, so Ctrl-C stops the run instead of reading to the
    agent as a slow query (and silently changing the instance's reward).
    """
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"query time limit must be a finite number of seconds > 0, got {timeout!r}")
    token, entry = _WATCHDOG.arm(con, timeout)
    try:
        yield
    except (duckdb.InterruptException, RuntimeError) as exc:
        _WATCHDOG.disarm(token)
        # DuckDB 2 reports a SIGINT as RuntimeError("Query interrupted"), older ones as InterruptException
        by_signal = isinstance(exc, duckdb.InterruptException) or "interrupted" in str(exc).lower()
        if by_signal and not entry.fired:
            raise KeyboardInterrupt("query interrupted by a signal") from None
        raise
    finally:
        _WATCHDOG.disarm(token)


def check_readonly(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise QueryRejected unless `sql` is exactly one SELECT-type statement."""
    readonly_statement(con, sql)


#: accepted query texts and their parsed statements, most recent last. A text always parses to the
#: same statement, whatever the connection, so its verdict holds for good; executing a statement
#: parsed before is also faster than executing the text (agents repeat catalog queries a lot)
_ACCEPTED: OrderedDict[str, duckdb.Statement] = OrderedDict()
_ACCEPTED_MAX = 1024
_ACCEPTED_LOCK = threading.Lock()


def readonly_statement(con: duckdb.DuckDBPyConnection, sql: str) -> duckdb.Statement:
    """The one parsed SELECT-type statement of `sql` (else QueryRejected), to execute as it is:
    what was checked is what runs, and the text is not parsed again by `execute`."""
    with _ACCEPTED_LOCK:
        statement = _ACCEPTED.get(sql)
        if statement is not None:
            _ACCEPTED.move_to_end(sql)
            return statement
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
    with _ACCEPTED_LOCK:
        _ACCEPTED[sql] = statements[0]
        if len(_ACCEPTED) > _ACCEPTED_MAX:
            _ACCEPTED.popitem(last=False)
    return statements[0]


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
        statement = readonly_statement(con, sql)
    except QueryRejected as exc:
        return QueryResult(False, f"Rejected: {exc}", [], [], 0, 0.0, error=str(exc))
    try:
        with time_limit(con, timeout):
            cur = con.execute(statement)
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
