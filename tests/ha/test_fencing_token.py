"""The fencing token: the PostgreSQL store checks, first in each of its transactions, that
the lease still carries the node's epoch; a write under a stale epoch fails, writes
nothing, and tells the node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor

from bridge.ha.lease import LeaseTable
from bridge.ha.lock import Holder, LeaseToken
from bridge.store import Fenced
from bridge.store.postgresql import PostgreSQLMessageStore
from tests.postgresql import execute
from tests.store.conftest import anycast, message

Tables = Callable[[], LeaseTable]


def _rows(schema: str, table: str) -> int:
    ((count,),) = execute(schema, f"SELECT count(*) FROM {table}")
    assert isinstance(count, int)
    return count


@pytest_twisted.ensureDeferred
async def test_a_write_under_a_stale_epoch_fails_and_writes_nothing(
    tables: Tables, lease_url: str, pg_schema: str, tmp_path: Path
) -> None:
    a, b = tables(), tables()
    me, other = Holder("a"), Holder("b")
    taken = a.acquire(me, 30)
    assert taken is not None
    told: list[str] = []
    store = PostgreSQLMessageStore(
        lease_url,
        tmp_path,
        reactor,
        token=LeaseToken(str(me), taken.epoch),
        fenced=lambda: told.append("fenced"),
    )
    await store.open()
    try:
        await store.create_queue(anycast("orders"))
        await store.add(message(1, "orders"), ["orders"])
        assert _rows(pg_schema, "messages") == 1

        assert a.release(me, taken.epoch) is not None
        assert b.acquire(other, 30) is not None  # node b is live, epoch 2
        with pytest.raises(Fenced, match=f"no longer carries epoch {taken.epoch} of a/"):
            await store.add(message(2, "orders"), ["orders"])
        assert told == ["fenced"]
        assert _rows(pg_schema, "messages") == 1
        # b's run is under way: a's close must not mark it cleanly stopped
        execute(pg_schema, "UPDATE store_state SET value = 0 WHERE key = 'clean_stop'")
        await store.close()
        clean = "SELECT value FROM store_state WHERE key = 'clean_stop'"
        assert execute(pg_schema, clean) == [(0,)]
    finally:
        await store.close()


@pytest_twisted.ensureDeferred
async def test_a_store_opened_under_a_stale_epoch_refuses_to_load(
    tables: Tables, lease_url: str, tmp_path: Path
) -> None:
    a = tables()
    me = Holder("a")
    taken = a.acquire(me, 30)
    assert taken is not None
    store = PostgreSQLMessageStore(
        lease_url, tmp_path, reactor, token=LeaseToken(str(me), taken.epoch + 1)
    )
    with pytest.raises(Fenced):
        await store.open()


@pytest_twisted.ensureDeferred
async def test_without_a_token_the_store_checks_nothing(lease_url: str, tmp_path: Path) -> None:
    store = PostgreSQLMessageStore(lease_url, tmp_path, reactor)
    await store.open()
    try:
        await store.create_queue(anycast("orders"))
        await store.add(message(1, "orders"), ["orders"])
    finally:
        await store.close()
