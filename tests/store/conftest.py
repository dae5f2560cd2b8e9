"""Stores on real SQLite files in a test's tmp dir, each closed (writer thread stopped)
when the test ends, whatever happened."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor

from bridge.message import Message
from bridge.store import QueueRecord, Recovered, SQLiteMessageStore


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


def anycast(name: str) -> QueueRecord:
    return QueueRecord(name=name, address=name, routing="anycast")


class Stores:
    """Opens stores on one data directory and remembers them to close them."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.made: list[SQLiteMessageStore] = []

    def new(self, **options: float) -> SQLiteMessageStore:
        store = SQLiteMessageStore(self.data_dir, reactor, **options)  # type: ignore[arg-type]
        self.made.append(store)
        return store

    async def open(self, **options: float) -> tuple[SQLiteMessageStore, Recovered]:
        store = self.new(**options)
        return store, await store.open()

    async def reopen(self, store: SQLiteMessageStore) -> tuple[SQLiteMessageStore, Recovered]:
        """Close ``store`` and open its file again: what a restart recovers."""
        await store.close()
        return await self.open()


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    made = Stores(tmp_path / "data")
    yield made
    for store in made.made:
        pytest_twisted.blockon(store.close())
