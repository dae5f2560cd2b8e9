"""The SQLite store's statements: what they bind, and the connection's settings."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from bridge.store.schema import connect
from bridge.store.sqlite_operations import MAX_STATEMENT_ROWS, _delete, _insert, _parts


class _Recording:
    """A cursor that runs each statement and keeps what it bound."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor
        self.bound: list[list[Any]] = []
        self.rowcount = 0

    def execute(self, sql: str, parameters: Any = ()) -> sqlite3.Cursor:
        self.bound.append(list(parameters))
        result = self._cursor.execute(sql, parameters)
        self.rowcount = self._cursor.rowcount
        return result


@pytest.fixture
def table() -> sqlite3.Connection:
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE t (name TEXT NOT NULL, id INTEGER PRIMARY KEY, data BLOB)")
    return connection


@pytest.mark.parametrize("count", [1, 3, 5, 37, MAX_STATEMENT_ROWS + 3])
def test_an_insert_pads_with_integers_and_writes_only_its_rows(table, count):
    """Padding rows bind integers, never NULL (whose adaptation costs the sqlite3 module
    an exception raised and cleared per value), and none of them is written."""
    rows = [(f"q{i % 2}", i, b"x" * i) for i in range(1, count + 1)]
    cursor = _Recording(table.cursor())
    _insert(cursor, "t (name, id, data)", rows)
    assert table.execute("SELECT name, id, data FROM t ORDER BY id").fetchall() == rows
    parts = list(_parts(count))
    assert len(cursor.bound) == len(parts)
    for (start, end, shape), bound in zip(parts, cursor.bound, strict=True):
        own = [value for row in rows[start:end] for value in row]
        assert bound[: len(own)] == own
        padding, kept = bound[len(own) : -1], bound[-1]
        assert len(padding) == 3 * (shape - (end - start))
        assert all(type(value) is int for value in padding)
        assert kept == end - start


@pytest.mark.parametrize("count", [1, 3, 5, 37, MAX_STATEMENT_ROWS + 3])
def test_a_delete_pads_with_an_id_again_and_deletes_only_its_ids(table, count):
    table.executemany("INSERT INTO t VALUES ('q', ?, NULL)", [(i,) for i in range(1, 2 * count)])
    doomed = list(range(1, 2 * count, 2))
    cursor = _Recording(table.cursor())
    deleted = _delete(cursor, "t WHERE name = ? AND id", "q", doomed)
    assert deleted == len(doomed)
    kept = [i for (i,) in table.execute("SELECT id FROM t ORDER BY id")]
    assert kept == list(range(2, 2 * count, 2))
    assert all(None not in part for part in cursor.bound)


def test_a_store_file_does_not_zero_what_it_deletes(tmp_path: Path):
    """``secure_delete`` off whatever the SQLite build's default (Debian's is on)."""
    connection = connect(tmp_path / "messages.sqlite", busy_timeout=1.0)
    try:
        assert connection.execute("PRAGMA secure_delete").fetchone() == (0,)
    finally:
        connection.close()
