"""The fencing token on a shared SQLite store: the writer checks, inside each write
transaction, that the store still records this node's holder and epoch; a write under a
stale epoch fails, writes nothing and tells the node; a stale node's close leaves the new
live node's run marked as running."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor

from bridge.ha.lock import Holder, LeaseToken
from bridge.store import Fenced, SQLiteMessageStore
from bridge.store.file_lock import FileLock
from tests.store.conftest import anycast, message


def _query(directory: Path, statement: str) -> list[tuple[object, ...]]:
    connection = sqlite3.connect(directory / "messages.sqlite")
    try:
        return connection.execute(statement).fetchall()
    finally:
        connection.close()


@pytest_twisted.ensureDeferred
async def test_a_write_under_a_stale_epoch_fails_and_writes_nothing(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    a, b = FileLock(shared, 0.5), FileLock(shared, 0.5)
    me, other = Holder("a"), Holder("b")
    try:
        taken = a.acquire(me, 5)
        assert taken is not None
        told: list[str] = []
        store = SQLiteMessageStore(
            shared,
            reactor,
            token=LeaseToken(str(me), taken.epoch),
            fenced=lambda: told.append("fenced"),
        )
        await store.open()
        await store.create_queue(anycast("orders"))
        await store.add(message(1, "orders"), ["orders"])
        assert _query(shared, "SELECT id FROM messages") == [(1,)]

        a.close()  # the lock is lost (on a shared filesystem, say); a's store still runs
        assert b.acquire(other, 5) is not None  # b is live, epoch 2
        with pytest.raises(Fenced, match=f"no longer carries epoch {taken.epoch} of a/"):
            await store.add(message(2, "orders"), ["orders"])
        assert told == ["fenced"]
        assert _query(shared, "SELECT id FROM messages") == [(1,)]

        # b's run is under way (clean_stop 0); a's close must not mark it cleanly stopped
        fresh = SQLiteMessageStore(shared, reactor, token=LeaseToken(str(other), 2))
        await fresh.open()
        await store.close()  # closed, the mark left alone
        assert _query(shared, "SELECT value FROM store_state WHERE key = 'clean_stop'") == [(0,)]
        await fresh.close()
        assert _query(shared, "SELECT value FROM store_state WHERE key = 'clean_stop'") == [(1,)]
    finally:
        a.close()
        b.close()


@pytest_twisted.ensureDeferred
async def test_a_store_opened_under_a_stale_epoch_refuses_to_load(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    lock = FileLock(shared, 0.5)
    me = Holder("a")
    try:
        taken = lock.acquire(me, 5)
        assert taken is not None
        store = SQLiteMessageStore(shared, reactor, token=LeaseToken(str(me), taken.epoch + 1))
        with pytest.raises(Fenced):
            await store.open()
        # nothing was written: the pages and the run's mark are as they were
        assert _query(shared, "SELECT value FROM store_state WHERE key = 'clean_stop'") == [(1,)]
    finally:
        lock.close()
