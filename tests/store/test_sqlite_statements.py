"""The SQLite store's statements: what they bind, and the connection's settings."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from bridge.store.operations import AddMessage, CreateQueue, StoreDuplicateId
from bridge.store.records import QueueRecord
from bridge.store.schema import connect
from bridge.store.sqlite_operations import (
    MAX_STATEMENT_ROWS,
    _delete,
    _insert,
    _parts,
    apply_all,
    load_state,
)


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

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        rows = list(rows)
        self.bound.extend(list(row) for row in rows)
        return self._cursor.executemany(sql, rows)


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


@pytest.mark.parametrize("count", [1, 7, 64])
def test_a_run_of_adds_binds_no_parameter_the_module_adapts(tmp_path: Path, count):
    """A run of adds with their duplicate ids binds integers, text and bytearrays only:
    the sqlite3 module binds those as they are, and adapts anything else (``bytes``,
    None) by a lookup that raises and clears an error, about 2,500 instructions each.
    What is read back is the bytes written."""
    connection = connect(tmp_path / "messages.sqlite", busy_timeout=1.0)
    try:
        cursor = _Recording(connection.cursor())
        state = load_state(connection.cursor())
        connection.execute("BEGIN IMMEDIATE")
        apply_all(connection.cursor(), state, [CreateQueue(QueueRecord("q", "q", "anycast"))])
        adds = [
            AddMessage(n, ("q",), b"m%d" % n, duplicate=StoreDuplicateId("q", b"d%d" % n, 16))
            for n in range(1, count + 1)
        ]
        assert apply_all(cursor, state, adds) == [None] * count  # type: ignore[arg-type]
        connection.execute("COMMIT")
        bound = [value for part in cursor.bound for value in part]
        assert {type(value) for value in bound} <= {int, str, bytearray}
        assert connection.execute("SELECT data FROM messages ORDER BY id").fetchall() == [
            (b"m%d" % n,) for n in range(1, count + 1)
        ]
        assert connection.execute(
            "SELECT duplicate_id FROM duplicate_ids ORDER BY seq"
        ).fetchall() == [(b"d%d" % n,) for n in range(max(1, count - 15), count + 1)]
    finally:
        connection.close()
