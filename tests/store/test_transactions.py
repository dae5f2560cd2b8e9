"""Transactions: all of a commit is written or none; nothing rolled back is ever written."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet.defer import gatherResults

from bridge.store import InvalidOperation, TransactionRolledBack, UnknownTransaction
from tests.store.conftest import anycast, message


def ids(recovered, queue: str) -> list[int]:
    return [stored.message.id for stored in recovered.messages.get(queue, ())]


def outcome(deferred):
    """The error a Deferred fails with, or None once it succeeds."""
    return deferred.addCallbacks(lambda _: None, lambda failure: failure.value)


@pytest_twisted.ensureDeferred
async def test_a_committed_transaction_is_written_whole(stores):
    store, _ = await stores.open()
    await gatherResults([store.create_queue(anycast("orders")), store.add(message(1), ["orders"])])
    tx = store.begin()
    operations = [
        store.create_queue(anycast("replies"), tx=tx),
        store.add(message(2), ["orders", "replies"], tx=tx),
        store.acknowledge("orders", 1, tx=tx),
        store.update_delivery_count("replies", 2, 4, tx=tx),
        store.store_duplicate_id("orders", b"d2", keep=10, tx=tx),
    ]
    assert not any(operation.called for operation in operations)
    await store.commit(tx)
    assert await gatherResults(operations) == [None] * 5

    _, recovered = await stores.reopen(store)
    assert [queue.name for queue in recovered.queues] == ["orders", "replies"]
    assert ids(recovered, "orders") == [2]
    assert [(m.message.id, m.delivery_count) for m in recovered.messages["replies"]] == [(2, 4)]
    assert recovered.duplicate_ids == {"orders": [b"d2"]}
    assert recovered.highest_message_id == 2


@pytest_twisted.ensureDeferred
async def test_a_rolled_back_transaction_never_appears(stores):
    store, _ = await stores.open()
    await gatherResults([store.create_queue(anycast("orders")), store.add(message(1), ["orders"])])
    tx = store.begin()
    operations = [
        outcome(store.add(message(2), ["orders"], tx=tx)),
        outcome(store.acknowledge("orders", 1, tx=tx)),
        outcome(store.create_queue(anycast("other"), tx=tx)),
        outcome(store.store_duplicate_id("orders", b"d", keep=5, tx=tx)),
    ]
    # Work outside the transaction goes on and commits while it is open.
    await store.add(message(3), ["orders"])
    store.rollback(tx)
    errors = await gatherResults(operations)
    assert all(isinstance(error, TransactionRolledBack) for error in errors)
    assert str(errors[0]) == f"transaction {tx} was rolled back"

    _, recovered = await stores.reopen(store)
    assert [queue.name for queue in recovered.queues] == ["orders"]
    assert ids(recovered, "orders") == [1, 3]
    assert recovered.duplicate_ids == {}
    assert recovered.highest_message_id == 3


@pytest_twisted.ensureDeferred
async def test_an_invalid_operation_undoes_its_whole_transaction_only(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    tx = store.begin()
    operations = [
        outcome(store.create_queue(anycast("replies"), tx=tx)),
        outcome(store.add(message(5), ["orders", "replies"], tx=tx)),
        outcome(store.acknowledge("orders", 77, tx=tx)),
    ]
    outside = store.add(message(6), ["orders"])
    with pytest.raises(InvalidOperation, match="acknowledge message 77 on queue 'orders'"):
        await store.commit(tx)
    await outside
    assert all(isinstance(error, InvalidOperation) for error in await gatherResults(operations))

    # The queue the undone transaction created is unknown again, in memory as on disk.
    with pytest.raises(InvalidOperation, match="no durable queue 'replies'"):
        await store.add(message(7), ["replies"])
    store, recovered = await stores.reopen(store)
    assert [queue.name for queue in recovered.queues] == ["orders"]
    assert ids(recovered, "orders") == [6]
    assert recovered.highest_message_id == 6


@pytest_twisted.ensureDeferred
async def test_transactions_commit_in_the_order_of_their_commits(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    first, second = store.begin(), store.begin()
    assert first != second
    store.add(message(1), ["orders"], tx=first)
    store.add(message(2), ["orders"], tx=second)
    store.acknowledge("orders", 2, tx=first)
    # "first" acknowledges what "second" adds: committing second first makes it valid.
    await gatherResults([store.commit(second), store.commit(first)])

    _, recovered = await stores.reopen(store)
    assert ids(recovered, "orders") == [1]


@pytest_twisted.ensureDeferred
async def test_an_empty_transaction_commits(stores):
    store, _ = await stores.open()
    await store.commit(store.begin())


@pytest_twisted.ensureDeferred
async def test_unknown_and_finished_transactions_are_refused(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    tx = store.begin()
    await store.commit(tx)
    with pytest.raises(UnknownTransaction, match=f"commit: no open transaction {tx}"):
        await store.commit(tx)
    with pytest.raises(UnknownTransaction, match=f"rollback: no open transaction {tx}"):
        store.rollback(tx)
    with pytest.raises(UnknownTransaction, match=f"no open transaction {tx}"):
        await store.add(message(1), ["orders"], tx=tx)
