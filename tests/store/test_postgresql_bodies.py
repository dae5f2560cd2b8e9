"""Large bodies on PostgreSQL live in the database: another node's store (its own data
directory) reads every body that was confirmed, a stale or missing cache file is written
again from the rows, the rows go with their message, and a version 1 store (bodies only
as files) is migrated and still read."""

from __future__ import annotations

from pathlib import Path

import pytest_twisted

from bridge.message import LargeBody, Message
from bridge.store.pg_bodies import CHUNK
from tests.store.conftest import Stores, anycast, message


def large_message(message_id: int, body: bytes, path: str) -> Message:
    """A large message whose body was written to ``path``, as the node does."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(body)
    return message(message_id, body=b"", large=LargeBody(path, len(body)))


def read_all(store: object, body: LargeBody) -> bytes:
    reading = store.open_body(body)  # type: ignore[attr-defined]
    try:
        return reading.read()  # type: ignore[no-any-return]
    finally:
        store.close_body(reading)  # type: ignore[attr-defined]


def body_of(size: int) -> bytes:
    return bytes(range(256)) * (size // 256) + b"e" * (size % 256)


@pytest_twisted.ensureDeferred
async def test_a_backup_with_its_own_data_directory_reads_every_confirmed_body(
    postgresql_stores: Stores, tmp_path: Path
) -> None:
    live, _ = await postgresql_stores.open()
    await live.create_queue(anycast("orders"))
    body = body_of(3 * CHUNK + 17)
    await live.add(large_message(1, body, live.large_body_path(1)), ["orders"])
    assert postgresql_stores.rows("large_bodies") == 4  # in chunks, never one whole row
    await live.add(message(2), ["orders"])
    other = body_of(CHUNK - 1)
    await live.add(large_message(3, other, live.large_body_path(3)), ["orders"])
    await live.close()
    backup = Stores(tmp_path / "backup-data", postgresql_stores.pg_schema)
    try:
        store, recovered = await backup.open()
        first, second, third = recovered.messages["orders"]
        assert second.message == message(2)
        for stored, expected in ((first, body), (third, other)):
            large = stored.message.large
            assert large is not None and large.path.startswith(str(tmp_path / "backup-data"))
            assert read_all(store, large) == expected
        await store.acknowledge_many("orders", [1, 2, 3])
        assert postgresql_stores.rows("large_bodies") == 0  # gone with their messages
    finally:
        for made in backup.made:
            await made.close()


@pytest_twisted.ensureDeferred
async def test_a_stale_cache_file_is_written_again_from_the_rows(
    postgresql_stores: Stores,
) -> None:
    store, _ = await postgresql_stores.open()
    await store.create_queue(anycast("orders"))
    body = body_of(CHUNK + 5)
    path = store.large_body_path(2)
    await store.add(large_message(2, body, path), ["orders"])
    await store.close()
    Path(path).write_bytes(b"?" * len(body))  # another run's body under a reused id
    store = postgresql_stores.new()
    recovered = await store.open(load_limit=0)
    (stub,) = recovered.messages["orders"]
    assert stub.paged_size is not None
    found = await store.read([2])
    large = found[2].large
    assert large is not None and read_all(store, large) == body


@pytest_twisted.ensureDeferred
async def test_bodies_follow_their_messages_through_transactions_and_deleted_queues(
    postgresql_stores: Stores,
) -> None:
    store, _ = await postgresql_stores.open()
    await store.create_queue(anycast("orders"))
    await store.create_queue(anycast("audit"))
    tx = store.begin()
    added = store.add(large_message(3, b"t" * 1000, store.large_body_path(3)), ["orders"], tx)
    store.rollback(tx)
    await added.addErrback(lambda _: None)
    assert postgresql_stores.rows("large_bodies") == 0
    tx = store.begin()
    added = store.add(
        large_message(4, b"u" * 1000, store.large_body_path(4)), ["orders", "audit"], tx
    )
    await store.commit(tx)
    await added
    assert postgresql_stores.rows("large_bodies") == 1
    await store.acknowledge("orders", 4)
    assert postgresql_stores.rows("large_bodies") == 1  # audit still holds it
    await store.delete_queue("audit")
    assert postgresql_stores.rows("large_bodies") == 0


@pytest_twisted.ensureDeferred
async def test_a_version_1_store_is_migrated_and_its_file_bodies_still_read(
    postgresql_stores: Stores,
) -> None:
    store, _ = await postgresql_stores.open()
    await store.create_queue(anycast("orders"))
    body = b"v" * 5000
    await store.add(large_message(5, body, store.large_body_path(5)), ["orders"])
    await store.close()
    # What version 1 was: no large_bodies table, the body only in its file.
    postgresql_stores.execute("DROP TABLE large_bodies")
    postgresql_stores.execute("UPDATE schema_version SET version = 1")
    store, recovered = await postgresql_stores.open()
    assert postgresql_stores.execute("SELECT version FROM schema_version") == [(2,)]
    (stored,) = recovered.messages["orders"]
    assert stored.message.large is not None and read_all(store, stored.message.large) == body
