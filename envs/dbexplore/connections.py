"""Hardened read-only connections shared per database file within a process.

DuckDB keeps one database instance per file and process, and `sqlguard.connect_readonly`
locks that instance's configuration, so a second `connect_readonly` on the same file fails.
Every env therefore gets its own connection as a cursor of one shared hardened base
connection per file (same locked configuration), reference-counted and closed with the last.
"""
from __future__ import annotations

import threading

import duckdb

from clbench.sqlguard import connect_readonly

_LOCK = threading.Lock()
_BASES: dict[str, list] = {}  # path -> [base connection, open cursors]


def open_connection(path: str) -> duckdb.DuckDBPyConnection:
    """A new hardened read-only connection to `path`; give it back with `close_connection`."""
    path = str(path)
    with _LOCK:
        entry = _BASES.get(path)
        if entry is None:
            entry = _BASES[path] = [connect_readonly(path), 0]
        entry[1] += 1
        return entry[0].cursor()


def close_connection(path: str, con: duckdb.DuckDBPyConnection) -> None:
    path = str(path)
    with _LOCK:
        con.close()
        entry = _BASES.get(path)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            entry[0].close()
            del _BASES[path]
