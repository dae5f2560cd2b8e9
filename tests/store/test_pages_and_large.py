"""Paging and large messages in the store: pages are read back and released and do not
outlive the store; large bodies are written and read in chunks through the store, synced
with their message, and bodies no message owns are gone when the store opens; a version 1
SQLite store is migrated."""

from __future__ import annotations

import io
import sqlite3
import threading
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet.defer import DeferredList
from twisted.logger import globalLogPublisher

from bridge.message import LargeBody, Message
from bridge.store import StoreError
from bridge.store.errors import InvalidOperation
from bridge.store.schema import SCHEMA_VERSION
from tests.store.conftest import Stores, anycast, deletion_threads, message


@pytest_twisted.ensureDeferred
async def test_pages_are_read_back_with_stored_messages_and_released(stores: Stores) -> None:
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    await store.add(message(1), ["orders"])
    await store.page(message(2, durable=False), ["a", "b"])
    found = await store.read([1], [2])
    assert found == {1: message(1), 2: message(2, durable=False)}
    await store.unpage([2])
    assert (await store.read([], [2])) == {2: message(2, durable=False)}  # b still has it
    await store.unpage([2])
    with pytest.raises(StoreError, match=r"paged messages \[2\] are not stored"):
        await store.read([], [2])


@pytest_twisted.ensureDeferred
async def test_pages_do_not_outlive_the_store(stores: Stores) -> None:
    store, _ = await stores.open()
    await store.page(message(5, durable=False), ["a"])
    store, recovered = await stores.reopen(store)
    assert recovered.messages == {} and recovered.highest_message_id == 0
    with pytest.raises(StoreError):
        await store.read([], [5])


@pytest_twisted.ensureDeferred
async def test_a_page_twice_and_an_empty_unpage_are_refused(stores: Stores) -> None:
    store, _ = await stores.open()
    await store.page(message(5, durable=False), ["a"])
    with pytest.raises(InvalidOperation, match="page message 5: it is paged already"):
        await store.page(message(5, durable=False), ["a"])
    with pytest.raises(InvalidOperation, match="no message given"):
        await store.unpage([])


@pytest_twisted.ensureDeferred
async def test_pages_of_one_turn_are_kept_each_and_a_repeat_refused(stores: Stores) -> None:
    """As an address paging under load issues them: one at a time, many in a batch."""
    store, _ = await stores.open()
    await store.page(message(3, durable=False), ["a"])
    writes = [
        store.page(message(message_id, durable=False), ["a"]) for message_id in (1, 2, 3, 2, 4)
    ]
    outcomes = await DeferredList(writes, consumeErrors=True)
    refused = [str(result.value) for ok, result in outcomes if not ok]
    assert [ok for ok, _ in outcomes] == [True, True, False, False, True]
    assert refused == [
        "page message 3: it is paged already",
        "page message 2: it is paged already",
    ]
    found = await store.read([], [1, 2, 3, 4])
    assert sorted(found) == [1, 2, 3, 4]


def large_message(message_id: int, body: bytes, path: str) -> Message:
    """A large message whose body was written to ``path``, as the node does."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(body)
    return message(message_id, body=b"", large=LargeBody(path, len(body)))


@pytest_twisted.ensureDeferred
async def test_a_body_is_written_and_read_in_chunks_through_the_store(stores: Stores) -> None:
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    chunks = [bytes([n]) * 100_000 for n in range(5)]
    writing = store.new_body(1)
    for chunk in chunks:
        writing.write(chunk)
    body = writing.finish()
    assert body.size == 500_000
    await store.add(message(1, body=b"", large=body), ["orders"])
    cut_off = store.new_body(2)
    cut_off.write(b"half a body")
    cut_off.abort()
    never_added = store.new_body(3)
    never_added.write(b"a send whose node stopped before it was added")
    never_added.finish()

    store, recovered = await stores.reopen(store)
    (stored,) = recovered.messages["orders"]
    large = stored.message.large
    assert large is not None and large.size == 500_000
    reading = store.open_body(large)
    try:
        assert [reading.read(100_000) for _ in chunks] == chunks
        assert reading.read(1) == b""
    finally:
        await store.close_body(reading)
    await store.acknowledge("orders", 1)
    await store.discard_body(large.path)
    for gone in (
        large,
        LargeBody(store.large_body_path(2), 11),
        LargeBody(store.large_body_path(3), 1),
    ):
        with pytest.raises(OSError):
            store.open_body(gone)


@pytest_twisted.ensureDeferred
async def test_a_large_body_is_recovered_with_its_message_and_orphans_are_removed(
    stores: Stores,
) -> None:
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    kept = large_message(1, b"k" * 5000, store.large_body_path(1))
    await store.add(kept, ["orders"])
    orphan = Path(store.large_body_path(2))
    orphan.write_bytes(b"a send cut off mid-message")
    store, recovered = await stores.reopen(store)
    [stored] = recovered.messages["orders"]
    assert stored.message.large == LargeBody(store.large_body_path(1), 5000)
    assert Path(store.large_body_path(1)).read_bytes() == b"k" * 5000
    assert not orphan.exists()
    await store.acknowledge("orders", 1)
    store, recovered = await stores.reopen(store)
    assert not Path(store.large_body_path(1)).exists()  # no message owns it any more


@pytest_twisted.ensureDeferred
async def test_a_large_message_whose_file_is_gone_is_refused(stores: Stores) -> None:
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    missing = message(3, body=b"", large=LargeBody(store.large_body_path(3), 10))
    with pytest.raises(InvalidOperation, match="cannot be opened"):
        await store.add(missing, ["orders"])
    assert stores.rows("messages") == 0


@pytest_twisted.ensureDeferred
async def test_a_sqlite_store_whose_body_file_is_gone_does_not_open(
    sqlite_stores: Stores,
) -> None:
    store, _ = await sqlite_stores.open()
    await store.create_queue(anycast("orders"))
    kept = large_message(4, b"x" * 10, store.large_body_path(4))
    await store.add(kept, ["orders"])
    await store.close()
    Path(store.large_body_path(4)).unlink()
    with pytest.raises(StoreError, match="large message 4 has no body"):
        await sqlite_stores.open()


V1_SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE store_state (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE queues (name TEXT NOT NULL UNIQUE, address TEXT NOT NULL,
    routing TEXT NOT NULL, filter TEXT);
CREATE TABLE messages (id INTEGER PRIMARY KEY, refs INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE message_refs (queue TEXT NOT NULL, message_id INTEGER NOT NULL,
    delivery_count INTEGER NOT NULL, PRIMARY KEY (queue, message_id)) WITHOUT ROWID;
CREATE TABLE duplicate_ids (seq INTEGER PRIMARY KEY AUTOINCREMENT, address TEXT NOT NULL,
    duplicate_id BLOB NOT NULL, UNIQUE (address, duplicate_id));
INSERT INTO store_state (key, value) VALUES ('highest_message_id', 0);
INSERT INTO schema_version (version) VALUES (1);
INSERT INTO queues (name, address, routing) VALUES ('orders', 'orders', 'anycast');
"""


@pytest_twisted.ensureDeferred
async def test_a_version_1_store_is_migrated_to_the_current_version(sqlite_stores: Stores) -> None:
    stores = sqlite_stores
    stores.data_dir.mkdir(parents=True)
    connection = sqlite3.connect(stores.data_dir / "messages.sqlite")
    connection.executescript(V1_SCHEMA)
    connection.close()
    store, recovered = await stores.open()
    assert [q.name for q in recovered.queues] == ["orders"]
    await store.page(message(1, durable=False), ["orders"])
    migrated = sqlite3.connect(stores.data_dir / "messages.sqlite")
    assert migrated.execute("SELECT version FROM schema_version").fetchone() == (SCHEMA_VERSION,)
    assert migrated.execute("SELECT * FROM live_lock").fetchall() == [("live", "", 0)]
    migrated.close()


@pytest_twisted.ensureDeferred
async def test_a_discarded_body_goes_on_the_writer_thread(stores: Stores, monkeypatch) -> None:
    store, _ = await stores.open()
    path = store.large_body_path(7)
    large_message(7, b"d" * 100_000, path)
    threads = deletion_threads(store, monkeypatch)
    await store.discard_body(path)
    assert not Path(path).exists()
    assert threads and threads[0] != threading.main_thread().name


class _RecordedClose(io.FileIO):
    """A body's file that notes the thread closing it."""

    closed_on: str | None = None

    def close(self) -> None:
        if not self.closed:
            self.closed_on = threading.current_thread().name
        super().close()


@pytest_twisted.ensureDeferred
async def test_a_body_discarded_while_it_is_read_goes_once_its_last_reader_closed_it(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Then on the writer thread, as every discard: so no reader's close frees the file
    (milliseconds for a large body) on the reactor, and no new body is written over it
    while it is read."""
    store, _ = await stores.open()
    path = store.large_body_path(10)
    large = LargeBody(path, 100_000)
    large_message(10, b"r" * 100_000, path)
    threads = deletion_threads(store, monkeypatch)
    first, second = store.open_body(large), store.open_body(large)
    discarded = store.discard_body(path)
    await store.close_body(first)
    await store.close_body(first)  # twice: still one reader's close
    assert not discarded.called and Path(path).exists()
    assert second.read() == b"r" * 100_000
    await store.close_body(second)
    await discarded
    assert not Path(path).exists()
    assert threads and threads[0] != threading.main_thread().name


@pytest_twisted.ensureDeferred
async def test_a_discard_waiting_for_its_readers_goes_when_the_store_closes(
    stores: Stores,
) -> None:
    store, _ = await stores.open()
    path = store.large_body_path(12)
    large_message(12, b"q" * 1000, path)
    reading = store.open_body(LargeBody(path, 1000))
    discarded = store.discard_body(path)
    await store.close()
    await discarded
    assert not Path(path).exists()
    assert reading.read() == b"q" * 1000  # its reader still has it
    await store.close_body(reading)


@pytest_twisted.ensureDeferred
async def test_a_body_still_stored_is_closed_at_once(stores: Stores) -> None:
    store, _ = await stores.open()
    path = store.large_body_path(11)
    large_message(11, b"s" * 1000, path)
    reading = _RecordedClose(path, "r")
    done = store.close_body(reading)
    assert done.called and reading.closed
    assert reading.closed_on == threading.main_thread().name
    assert Path(path).exists()


@pytest_twisted.ensureDeferred
async def test_a_body_discarded_by_a_closed_store_goes_at_once(stores: Stores) -> None:
    store, _ = await stores.open()
    path = store.large_body_path(8)
    large_message(8, b"c" * 1000, path)
    await store.close()
    done = store.discard_body(path)
    assert done.called and not Path(path).exists()


@pytest_twisted.ensureDeferred
async def test_a_body_that_cannot_be_deleted_is_logged_not_raised(
    stores: Stores,
) -> None:
    store, _ = await stores.open()
    path = Path(store.large_body_path(9))
    (path / "inside").mkdir(parents=True)  # a folder in its place: unlink fails
    logged: list[dict[str, object]] = []
    globalLogPublisher.addObserver(logged.append)
    try:
        await store.discard_body(str(path))
    finally:
        globalLogPublisher.removeObserver(logged.append)
    assert path.exists()
    assert any(
        "could not be deleted" in str(event.get("log_format")) and event.get("path") == str(path)
        for event in logged
    )
