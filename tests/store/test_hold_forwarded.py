"""``hold_forwarded``: a batch's early adds that are all with core bridges wait for the
bridges' targets to confirm them (their queues acknowledge them), so that a message
confirmed in time is never written. Each is done once its queues acknowledged it, and
is written when its time is up, when something refers to it, or when the store closes;
the rest of its batch, and the batches after it, go on meanwhile."""

from __future__ import annotations

import time

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from tests.store.conftest import anycast, message, settled
from tests.store.test_early_adds import watch

LONG = 30.0
"""A hold no test waits out: each ends on an event."""


def held_add(store, message_id: int, holds: list[int], queue: str = "a") -> Deferred[None]:
    """An early add of ``message_id`` on ``queue``; ``holds`` hears when it is held."""
    return settled(
        store.add_early, message(message_id), [queue], on_hold=lambda: holds.append(message_id)
    )


async def turns(count: int) -> None:
    """Let ``count`` reactor turns pass."""
    for _ in range(count):
        turn: Deferred[None] = Deferred()
        reactor.callLater(0, turn.callback, None)
        await turn


async def until(condition) -> None:
    """Wait, turn by turn, until ``condition()`` (at most 10 s)."""
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await turns(1)


@pytest_twisted.ensureDeferred
async def test_adds_their_bridges_confirm_while_held_are_never_written(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(LONG, lambda queue, message_id: queue == "a")
    written = watch(store)
    holds: list[int] = []
    first, second = held_add(store, 1, holds), held_add(store, 2, holds)
    await until(lambda: holds == [1, 2])
    await store.acknowledge("a", 1)
    assert first.called  # done once its queue acknowledged it
    await turns(3)
    assert not second.called
    await store.acknowledge("a", 2)
    assert second.called
    assert written == []

    store, recovered = await stores.reopen(store)
    assert recovered.messages.get("a", []) == []


@pytest_twisted.ensureDeferred
async def test_an_add_not_confirmed_in_time_is_written_when_its_time_is_up(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(0.05, lambda queue, message_id: True)
    written = watch(store)
    holds: list[int] = []
    await held_add(store, 1, holds)
    assert holds == [1]
    assert written == [[("AddMessage", 1, ("a",))]]
    await store.acknowledge("a", 1)  # written, so its acknowledgement is written too
    assert written[-1] == ["Acknowledge"]


@pytest_twisted.ensureDeferred
async def test_only_adds_whose_queues_are_forwarding_are_held(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    await store.create_queue(anycast("b"))
    store.hold_forwarded(LONG, lambda queue, message_id: queue == "a")
    written = watch(store)
    holds: list[int] = []
    first = held_add(store, 1, holds)
    await held_add(store, 2, holds, queue="b")  # written at once, 1 still held
    assert holds == [1]
    assert written == [[("AddMessage", 2, ("b",))]]
    assert not first.called
    await store.acknowledge("a", 1)
    assert first.called
    assert written == [[("AddMessage", 2, ("b",))]]


@pytest_twisted.ensureDeferred
async def test_later_batches_are_written_while_an_add_is_held(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(LONG, lambda queue, message_id: True)
    written = watch(store)
    holds: list[int] = []
    first = held_add(store, 1, holds)
    await until(lambda: holds == [1])
    await store.create_queue(anycast("b"))
    assert written == [["CreateQueue"]]
    assert not first.called
    await store.acknowledge("a", 1)
    assert first.called


@pytest_twisted.ensureDeferred
async def test_nothing_is_held_with_a_hold_of_zero(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(0, lambda queue, message_id: True)
    written = watch(store)
    holds: list[int] = []
    await held_add(store, 1, holds)
    assert holds == []
    assert written == [[("AddMessage", 1, ("a",))]]


@pytest_twisted.ensureDeferred
async def test_what_refers_to_a_held_add_has_it_written_first(stores):
    """A new delivery count (a bridge gave the message back) needs the add written first:
    it goes to the next batch at once, ahead of the count."""
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(LONG, lambda queue, message_id: True)
    written = watch(store)
    holds: list[int] = []
    added = held_add(store, 1, holds)
    await until(lambda: holds == [1])
    await store.update_delivery_count("a", 1, 2)
    assert added.called
    assert written == [[("AddMessage", 1, ("a",)), "UpdateDeliveryCount"]]

    store, recovered = await stores.reopen(store)
    assert [(s.message.id, s.delivery_count) for s in recovered.messages["a"]] == [(1, 2)]


@pytest_twisted.ensureDeferred
async def test_a_queue_deleted_has_the_held_adds_written_before_it_goes(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(LONG, lambda queue, message_id: True)
    written = watch(store)
    holds: list[int] = []
    added = held_add(store, 1, holds)
    await until(lambda: holds == [1])
    await store.delete_queue("a")
    assert added.called
    assert written == [[("AddMessage", 1, ("a",)), "DeleteQueue"]]


@pytest_twisted.ensureDeferred
async def test_closing_the_store_writes_what_it_holds(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(LONG, lambda queue, message_id: True)
    holds: list[int] = []
    added = held_add(store, 1, holds)
    await until(lambda: holds == [1])
    store, recovered = await stores.reopen(store)
    assert added.called
    assert [s.message.id for s in recovered.messages["a"]] == [1]


@pytest_twisted.ensureDeferred
async def test_an_on_hold_that_fails_is_logged_and_the_add_is_held_all_the_same(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(LONG, lambda queue, message_id: True)
    written = watch(store)

    def failing() -> None:
        raise RuntimeError("on_hold failed (injected)")

    added = settled(store.add_early, message(1), ["a"], on_hold=failing)
    await until(lambda: bool(store._held))
    await store.acknowledge("a", 1)
    await added
    assert written == []
