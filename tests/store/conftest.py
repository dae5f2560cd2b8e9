"""Stores on each backend, each closed (writer thread stopped) when the test ends,
whatever happened: ``stores`` runs a test once on a real SQLite file in the test's tmp dir
and once in a fresh schema of the machine's PostgreSQL server (dropped afterwards);
``sqlite_stores`` is for what only SQLite has (its file, its locks, its migrations)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from bridge.message import Message
from bridge.store import MessageStore, QueueRecord, Recovered, SQLiteMessageStore
from bridge.store.postgresql import PostgreSQLMessageStore
from tests.postgresql import execute, schema_url
from tests.told import told


def message(message_id: int, address: str = "orders", **changes: object) -> Message:
    fields: dict[str, object] = {
        "id": message_id,
        "address": address,
        "durable": True,
        "headers": {"n": message_id, "kind": "test"},
        "body": b"body %d" % message_id,
        "duplicate_id": None,
        "timestamp_ns": 1_000 + message_id,
    }
    fields.update(changes)
    return Message(**fields)  # type: ignore[arg-type]


def settled(add: Callable[..., None], *args: object, **options: object) -> Deferred[None]:
    """A store method that tells a ``then`` callable (``add_then``, ``add_early``),
    called with ``args`` and ``options``, as a Deferred for the test to wait on."""
    then, done = told()
    add(*args, then, **options)
    return done


def anycast(name: str) -> QueueRecord:
    return QueueRecord(name=name, address=name, routing="anycast")


class Stores:
    """Opens stores on one data directory and one database (a SQLite file in it, or a
    PostgreSQL schema) and remembers them to close them."""

    def __init__(self, data_dir: Path, pg_schema: str | None = None) -> None:
        self.data_dir = data_dir
        self.pg_schema = pg_schema
        self.backend = "sqlite" if pg_schema is None else "postgresql"
        self.made: list[MessageStore] = []

    def new(self, **options: float) -> MessageStore:
        store: MessageStore
        if self.pg_schema is None:
            store = SQLiteMessageStore(self.data_dir, reactor, **options)  # type: ignore[arg-type]
        else:
            url = schema_url(self.pg_schema)
            store = PostgreSQLMessageStore(url, self.data_dir, reactor)  # type: ignore[arg-type]
        self.made.append(store)
        return store

    async def open(self, **options: float) -> tuple[MessageStore, Recovered]:
        store = self.new(**options)
        return store, await store.open()

    async def reopen(self, store: MessageStore) -> tuple[MessageStore, Recovered]:
        """Close ``store`` and open its database again: what a restart recovers."""
        await store.close()
        return await self.open()

    def execute(self, statement: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        """Run one SQL statement on the store's database, outside the store (``?``
        placeholders are written ``%s`` for PostgreSQL)."""
        if self.pg_schema is not None:
            return execute(self.pg_schema, statement.replace("?", "%s"), params)
        with sqlite3.connect(self.data_dir / "messages.sqlite", isolation_level=None) as db:
            return db.execute(statement, params).fetchall()

    def rows(self, table: str) -> int:
        """How many rows ``table`` holds."""
        ((count,),) = self.execute(f"SELECT count(*) FROM {table}")
        assert isinstance(count, int)
        return count


def _stores(data_dir: Path, pg_schema: str | None) -> Iterator[Stores]:
    made = Stores(data_dir, pg_schema)
    yield made
    for store in made.made:
        pytest_twisted.blockon(store.close())


@pytest.fixture(params=["sqlite", "postgresql"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    """The test runs on each backend."""
    schema = request.getfixturevalue("pg_schema") if request.param == "postgresql" else None
    yield from _stores(tmp_path / "data", schema)


@pytest.fixture
def sqlite_stores(tmp_path: Path) -> Iterator[Stores]:
    """For what only SQLite has."""
    yield from _stores(tmp_path / "data", None)


@pytest.fixture
def postgresql_stores(tmp_path: Path, pg_schema: str) -> Iterator[Stores]:
    """For what only PostgreSQL has."""
    yield from _stores(tmp_path / "data", pg_schema)


def deletion_threads(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads on which ``store``'s writer deletes (or keeps) body files
    from now on, in order."""
    threads: list[str] = []
    writer = store._writer
    delete = writer.delete_body

    def recording(path: str, reusable: bool) -> None:
        threads.append(threading.current_thread().name)
        delete(path, reusable)

    monkeypatch.setattr(writer, "delete_body", recording)
    return threads
