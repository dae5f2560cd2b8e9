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


async def holding(stores, seconds: float = LONG, queues: str = "a"):
    """An open store with queue ``a``, whose adds on ``queues`` are held for ``seconds``,
    and the batches its writer runs from now on."""
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(seconds, lambda queue, message_id: queue in queues)
    return store, watch(store)


async def held(store, message_id: int = 1) -> Deferred[None]:
    """An early add on queue ``a``, once it is held: its outcome, still to come."""
    holds: list[int] = []
    added = held_add(store, message_id, holds)
    await until(lambda: holds == [message_id])
    return added


@pytest_twisted.ensureDeferred
async def test_adds_their_bridges_confirm_while_held_are_never_written(stores):
    store, written = await holding(stores)
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
    store, written = await holding(stores, 0.05)
    holds: list[int] = []
    await held_add(store, 1, holds)
    assert holds == [1]
    assert written == [[("AddMessage", 1, ("a",))]]
    await store.acknowledge("a", 1)  # written, so its acknowledgement is written too
    assert written[-1] == ["Acknowledge"]


@pytest_twisted.ensureDeferred
async def test_only_adds_whose_queues_are_forwarding_are_held(stores):
    store, written = await holding(stores)
    await store.create_queue(anycast("b"))
    first = await held(store)
    holds: list[int] = []
    await held_add(store, 2, holds, queue="b")  # written at once, 1 still held
    assert holds == []
    assert written[-1:] == [[("AddMessage", 2, ("b",))]]
    assert not first.called
    await store.acknowledge("a", 1)
    assert first.called
    assert written[-1:] == [[("AddMessage", 2, ("b",))]]


@pytest_twisted.ensureDeferred
async def test_later_batches_are_written_while_an_add_is_held(stores):
    store, written = await holding(stores)
    first = await held(store)
    await store.create_queue(anycast("b"))
    assert written == [["CreateQueue"]]
    assert not first.called
    await store.acknowledge("a", 1)
    assert first.called


@pytest_twisted.ensureDeferred
async def test_nothing_is_held_with_a_hold_of_zero(stores):
    store, written = await holding(stores, 0)
    holds: list[int] = []
    await held_add(store, 1, holds)
    assert holds == []
    assert written == [[("AddMessage", 1, ("a",))]]


@pytest_twisted.ensureDeferred
async def test_what_refers_to_a_held_add_has_it_written_first(stores):
    """A new delivery count (a bridge gave the message back) needs the add written first:
    it goes to the next batch at once, ahead of the count."""
    store, written = await holding(stores)
    added = await held(store)
    await store.update_delivery_count("a", 1, 2)
    assert added.called
    assert written == [[("AddMessage", 1, ("a",)), "UpdateDeliveryCount"]]

    store, recovered = await stores.reopen(store)
    assert [(s.message.id, s.delivery_count) for s in recovered.messages["a"]] == [(1, 2)]


@pytest_twisted.ensureDeferred
async def test_a_queue_deleted_has_the_held_adds_written_before_it_goes(stores):
    store, written = await holding(stores)
    added = await held(store)
    await store.delete_queue("a")
    assert added.called
    assert written == [[("AddMessage", 1, ("a",)), "DeleteQueue"]]


@pytest_twisted.ensureDeferred
async def test_closing_the_store_writes_what_it_holds(stores):
    store, _ = await holding(stores)
    added = await held(store)
    store, recovered = await stores.reopen(store)
    assert added.called
    assert [s.message.id for s in recovered.messages["a"]] == [1]


@pytest_twisted.ensureDeferred
async def test_an_on_hold_that_fails_is_logged_and_the_add_is_held_all_the_same(stores):
    store, written = await holding(stores)

    def failing() -> None:
        raise RuntimeError("on_hold failed (injected)")

    added = settled(store.add_early, message(1), ["a"], on_hold=failing)
    await until(lambda: bool(store._held))
    await store.acknowledge("a", 1)
    await added
    assert written == []
