"""``add_early``: the add of a message already on its queues, which an acknowledgement
arriving before its batch goes to the writer takes off instead of being written (a
message consumed before its write ran is never written, as RabbitMQ and ActiveMQ skip it)."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults

from bridge.store import InvalidOperation, StoreNotOpen
from tests.store.conftest import anycast, message, settled


def added_early(store, *args) -> Deferred[None]:
    return settled(store.add_early, *args)


def watch(store) -> list[list[object]]:
    """The batches the store's writer runs from now on, each operation by its kind (an
    add with its message id and queues)."""
    batches: list[list[object]] = []
    run = store._writer.run

    def recording(operations):
        batches.append(
            [
                (type(op).__name__, op.message_id, op.queues)
                if type(op).__name__ == "AddMessage"
                else type(op).__name__
                for op in operations
            ]
        )
        return run(operations)

    store._writer.run = recording
    return batches


@pytest_twisted.ensureDeferred
async def test_an_add_acknowledged_before_its_batch_ran_is_never_written(stores):
    store, _ = await stores.open()
    await gatherResults([store.create_queue(anycast(name)) for name in "ab"])
    written = watch(store)
    writes = [
        added_early(store, message(1), ["a"]),
        added_early(store, message(2), ["a", "b"]),
        added_early(store, message(3), ["a"]),
        store.acknowledge_many("a", [1, 2]),  # 1 gone; 2 stays on b
        store.acknowledge("b", 3),  # not on b: taken off nothing, written (and refused)
    ]
    outcomes = await gatherResults([d.addErrback(lambda f: f.value) for d in writes])
    assert [str(o) if o else None for o in outcomes[:4]] == [None] * 4
    assert isinstance(outcomes[4], InvalidOperation)
    assert written == [[("AddMessage", 2, ("b",)), ("AddMessage", 3, ("a",)), "Acknowledge"]]

    store, recovered = await stores.reopen(store)
    assert [stored.message.id for stored in recovered.messages.get("a", [])] == [3]
    assert [stored.message.id for stored in recovered.messages["b"]] == [2]


@pytest_twisted.ensureDeferred
async def test_a_batch_every_add_of_which_was_acknowledged_reaches_no_writer(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    written = watch(store)
    writes = [added_early(store, message(n), ["a"]) for n in (1, 2)]
    writes.append(store.acknowledge_many("a", [1, 2]))
    await gatherResults(writes)
    assert written == []

    store, recovered = await stores.reopen(store)
    assert recovered.messages.get("a", []) == []


@pytest_twisted.ensureDeferred
async def test_an_acknowledgement_at_the_end_of_the_adds_turn_takes_it_off(stores):
    """``ack:auto`` deliveries are acknowledged at the end of the turn that queued them,
    after the turn's batch was due: the batch waits one more turn for them, so a message
    consumed in the turn it was sent in is never written."""
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    written = watch(store)
    added = added_early(store, message(1), ["a"])
    acknowledged: Deferred[None] = Deferred()
    reactor.callLater(0, lambda: store.acknowledge("a", 1).chainDeferred(acknowledged))
    await gatherResults([added, acknowledged])
    assert written == []


@pytest_twisted.ensureDeferred
async def test_an_add_handed_to_the_writer_is_acknowledged_as_any_other(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    await added_early(store, message(1), ["a"])
    await store.acknowledge("a", 1)
    store, recovered = await stores.reopen(store)
    assert recovered.messages.get("a", []) == []


@pytest_twisted.ensureDeferred
async def test_what_refers_to_an_early_add_keeps_it_written_in_order(stores):
    """A new delivery count, or an acknowledgement in a transaction, comes after the add
    in the store's order: the add is written as it is, and so are they."""
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    first = added_early(store, message(1), ["a"])
    counted = store.update_delivery_count("a", 1, 2)
    second = added_early(store, message(2), ["a"])
    tx = store.begin()
    in_tx = store.acknowledge("a", 2, tx=tx)
    await gatherResults([first, counted, second])
    await store.commit(tx)
    await in_tx

    store, recovered = await stores.reopen(store)
    assert [(s.message.id, s.delivery_count) for s in recovered.messages["a"]] == [(1, 2)]


@pytest_twisted.ensureDeferred
async def test_an_early_add_is_refused_at_once_when_it_cannot_be_added(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    heard: list[object] = []
    with pytest.raises(InvalidOperation, match="not durable"):
        store.add_early(message(1, durable=False), ["a"], heard.append)
    with pytest.raises(InvalidOperation, match="no queue given"):
        store.add_early(message(1), [], heard.append)
    await store.close()
    with pytest.raises(StoreNotOpen):
        store.add_early(message(1), ["a"], heard.append)
    assert heard == []


@pytest_twisted.ensureDeferred
async def test_reserved_ids_are_never_given_again_whatever_was_added(stores):
    """The highest message id a reopened store gives is at least the last reservation,
    though no message above it was written (each was consumed before its write)."""
    store, recovered = await stores.open()
    assert recovered.highest_message_id == 0
    await store.create_queue(anycast("a"))
    await gatherResults([store.reserve_ids(10_000), added_early(store, message(7), ["a"])])
    await store.reserve_ids(5)  # never lower
    store, recovered = await stores.reopen(store)
    assert recovered.highest_message_id == 10_000
    await added_early(store, message(10_001), ["a"])
    store, recovered = await stores.reopen(store)
    assert recovered.highest_message_id == 10_001
