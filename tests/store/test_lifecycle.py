"""Opening, closing and the schema version: clear errors, and no thread left running."""

from __future__ import annotations

import re
import sqlite3
import threading

import pytest
import pytest_twisted
from twisted.internet.defer import gatherResults

from bridge.store import SchemaTooNew, StoreError, StoreNotOpen, TransactionRolledBack, schema
from tests.store.conftest import Stores, anycast, message


def writer_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if "txbridge-store-writer" in t.name]


@pytest_twisted.ensureDeferred
async def test_the_writer_thread_lives_from_open_to_close(stores):
    store = stores.new()
    assert writer_threads() == []
    await store.open()
    assert len(writer_threads()) == 1
    await store.close()
    assert writer_threads() == []


@pytest_twisted.ensureDeferred
async def test_close_writes_everything_issued_before_it(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    issued = [store.add(message(i), ["orders"]) for i in range(1, 51)]
    closed = store.close()
    await closed
    assert all(deferred.called for deferred in issued)
    await gatherResults(issued)

    _, recovered = await stores.open()
    assert len(recovered.messages["orders"]) == 50


@pytest_twisted.ensureDeferred
async def test_close_rolls_back_open_transactions(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    tx = store.begin()
    pending = store.add(message(1), ["orders"], tx=tx)
    await store.close()
    with pytest.raises(TransactionRolledBack, match="rolled back: the store closed"):
        await pending

    _, recovered = await stores.open()
    assert recovered.messages == {}


@pytest_twisted.ensureDeferred
async def test_operations_are_refused_before_open_and_after_close(stores):
    store = stores.new()
    with pytest.raises(StoreNotOpen, match=re.escape(f"{store.name} is new, not open")):
        await store.create_queue(anycast("orders"))
    with pytest.raises(StoreNotOpen, match="is new, not open"):
        store.begin()
    await store.open()
    await store.close()
    with pytest.raises(StoreNotOpen, match="is closed, not open"):
        await store.add(message(1), ["orders"])
    with pytest.raises(StoreNotOpen, match="open\\(\\) can be called once"):
        await store.open()


@pytest_twisted.ensureDeferred
async def test_close_while_opening_and_closing_twice(stores):
    store = stores.new()
    opening = store.open()
    first, second = store.close(), store.close()
    await opening
    await gatherResults([first, second])
    assert writer_threads() == []
    await store.close()


@pytest_twisted.ensureDeferred
async def test_a_newer_schema_is_refused_clearly(stores):
    store, _ = await stores.open()
    await store.close()
    stores.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(SchemaTooNew, match="schema version 99, written by a newer txbridge"):
        await stores.open()
    assert writer_threads() == []


@pytest_twisted.ensureDeferred
async def test_another_sqlite_database_is_not_taken_for_a_store(sqlite_stores):
    stores = sqlite_stores
    stores.data_dir.mkdir()
    connection = sqlite3.connect(stores.data_dir / "messages.sqlite")
    connection.execute("CREATE TABLE something (x)")
    connection.close()
    with pytest.raises(StoreError, match="is an SQLite database but not a txbridge message store"):
        await stores.open()


@pytest_twisted.ensureDeferred
async def test_delivery_counts_rise_by_one_only_after_a_stop_that_was_not_clean(stores):
    """A closed store says it stopped cleanly: its counts come back as stored. A store
    whose last run never closed it (tests/store/test_crash.py kills one) counts one more
    delivery for every message, which may have been delivered unacknowledged."""
    store, recovered = await stores.open()
    assert not recovered.after_crash  # a new store
    await store.create_queue(anycast("orders"))
    await store.add(message(1), ["orders"])
    await store.add(message(2), ["orders"])
    await store.update_delivery_count("orders", 2, 3)
    store, recovered = await stores.reopen(store)
    assert not recovered.after_crash
    assert [e.delivery_count for e in recovered.messages["orders"]] == [0, 3]

    await store.close()
    stores.execute("DELETE FROM store_state WHERE key = 'clean_stop'")  # as from before it
    store, recovered = await stores.open()
    assert recovered.after_crash
    assert [e.delivery_count for e in recovered.messages["orders"]] == [1, 4]
    store, recovered = await stores.reopen(store)
    assert not recovered.after_crash
    assert [e.delivery_count for e in recovered.messages["orders"]] == [1, 4]


def page_size(stores: Stores) -> object:
    ((size,),) = stores.execute("PRAGMA page_size")
    return size


@pytest_twisted.ensureDeferred
async def test_a_new_store_has_pages_of_page_size(sqlite_stores):
    store, _ = await sqlite_stores.open()
    await store.close()
    assert page_size(sqlite_stores) == schema.PAGE_SIZE != 4096


@pytest_twisted.ensureDeferred
async def test_a_store_keeps_the_page_size_it_was_created_with(sqlite_stores, monkeypatch):
    """A store created with SQLite's default 4 KiB pages (as every store was before
    ``PAGE_SIZE``) opens, keeps them, and is written and read as before."""
    with monkeypatch.context() as patched:
        patched.setattr(schema, "PAGE_SIZE", 4096)
        store, _ = await sqlite_stores.open()
        await store.create_queue(anycast("orders"))
        await store.add(message(1), ["orders"])
        await store.close()
    assert page_size(sqlite_stores) == 4096

    store, recovered = await sqlite_stores.open()
    assert [e.message for e in recovered.messages["orders"]] == [message(1)]
    await store.add(message(2), ["orders"])
    store, recovered = await sqlite_stores.reopen(store)
    assert [e.message for e in recovered.messages["orders"]] == [message(1), message(2)]
    await store.close()
    assert page_size(sqlite_stores) == 4096
