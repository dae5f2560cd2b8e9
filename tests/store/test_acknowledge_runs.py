"""All-or-nothing acknowledgements issued in one turn: each still takes effect whole or
not at all, on both stores; on PostgreSQL a run of them costs one statement, not one
round trip each (a consumer acknowledging each message alone sends one per message)."""

from __future__ import annotations

import psycopg
import pytest_twisted
from twisted.internet.defer import Deferred, DeferredList, gatherResults

from bridge.store import QueueRecord
from tests.store.conftest import message


def ids(recovered, queue: str) -> list[int]:
    return [stored.message.id for stored in recovered.messages.get(queue, ())]


async def _outcomes(writes: list[Deferred[None]]) -> list[str | None]:
    results = await DeferredList(writes, consumeErrors=True)
    return [None if ok else type(result.value).__name__ for ok, result in results]


@pytest_twisted.ensureDeferred
async def test_acknowledgements_of_one_turn_each_take_effect_whole_or_not_at_all(stores):
    store, _ = await stores.open()
    for name in ("a", "b"):
        await store.create_queue(QueueRecord(name, "events", "multicast"))
    await gatherResults([store.add(message(i, "events"), ["a", "b"]) for i in range(1, 9)])
    await store.acknowledge_many("a", [8])
    operations = store.committed_operations
    writes = [
        store.acknowledge_many("a", [1, 2]),
        store.acknowledge_many("b", [1, 2, 3]),
        store.acknowledge_many("a", [4, 8]),  # 8 is gone: 4 stays
        store.acknowledge_many("a", [5]),
        store.acknowledge_many("b", [9]),  # never stored
    ]
    assert await _outcomes(writes) == [None, None, "InvalidOperation", None, "InvalidOperation"]
    assert store.committed_operations == operations + 5
    assert stores.rows("messages") == 6  # 1 and 2 went from both queues
    store, recovered = await stores.reopen(store)
    assert ids(recovered, "a") == [3, 4, 6, 7]
    assert ids(recovered, "b") == [4, 5, 6, 7, 8]


@pytest_twisted.ensureDeferred
async def test_acknowledgements_naming_one_message_between_them_see_each_other(stores):
    store, _ = await stores.open()
    await store.create_queue(QueueRecord("a", "events", "anycast"))
    await gatherResults([store.add(message(i, "events"), ["a"]) for i in range(1, 5)])
    writes = [
        store.acknowledge_many("a", [1, 2]),
        store.acknowledge_many("a", [2, 3]),  # 2 went just before: 3 stays
        store.acknowledge_many("a", [3]),
    ]
    assert await _outcomes(writes) == [None, "InvalidOperation", None]
    store, recovered = await stores.reopen(store)
    assert ids(recovered, "a") == [4]


@pytest_twisted.ensureDeferred
async def test_a_run_of_acknowledgements_is_one_statement_on_postgresql(
    postgresql_stores, monkeypatch
):
    store, _ = await postgresql_stores.open()
    await store.create_queue(QueueRecord("a", "events", "anycast"))
    await gatherResults([store.add(message(i, "events"), ["a"]) for i in range(1, 41)])
    statements: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(cursor, query, *args, **kwargs):  # type: ignore[no-untyped-def]
        statements.append(str(query))
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    writes = [store.acknowledge_many("a", [i]) for i in range(1, 41)]
    assert await _outcomes(writes) == [None] * 40
    assert len([each for each in statements if "message_refs" in each]) == 1
    store, recovered = await postgresql_stores.reopen(store)
    assert ids(recovered, "a") == []
