"""``hold_forwarded``: a batch whose early adds are all with core bridges waits for the
bridges' targets to confirm them (their queues acknowledge them), so that a message
confirmed in time is never written; the wait ends on the acknowledgements, or when its
time is up, or when the store closes."""

from __future__ import annotations

import time

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from tests.store.conftest import anycast, message, settled
from tests.store.test_early_adds import watch

LONG = 30.0
"""A hold no test waits out: each ends on an event."""


def held_add(store, message_id: int, holds: list[int]) -> Deferred[None]:
    """An early add of ``message_id`` on queue ``a``; ``holds`` hears when it is held."""
    return settled(
        store.add_early, message(message_id), ["a"], on_hold=lambda: holds.append(message_id)
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
        turn: Deferred[None] = Deferred()
        reactor.callLater(0.001, turn.callback, None)
        await turn


@pytest_twisted.ensureDeferred
async def test_adds_their_bridges_confirm_while_held_are_never_written(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(LONG, lambda queue: queue == "a")
    written = watch(store)
    holds: list[int] = []
    first, second = held_add(store, 1, holds), held_add(store, 2, holds)
    await until(lambda: holds == [1, 2])
    await store.acknowledge("a", 1)
    await turns(5)
    assert not first.called  # the batch still waits for 2
    started = time.monotonic()
    await store.acknowledge("a", 2)
    await first
    await second
    assert time.monotonic() - started < LONG / 2  # released by the acknowledgement
    assert written == []

    store, recovered = await stores.reopen(store)
    assert recovered.messages.get("a", []) == []


@pytest_twisted.ensureDeferred
async def test_an_add_not_confirmed_in_time_is_written_when_the_hold_ends(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(0.05, lambda queue: True)
    written = watch(store)
    holds: list[int] = []
    await held_add(store, 1, holds)
    assert holds == [1]
    assert written == [[("AddMessage", 1, ("a",))]]
    await store.acknowledge("a", 1)  # written, so its acknowledgement is written too
    assert written[-1] == ["Acknowledge"]


@pytest_twisted.ensureDeferred
async def test_a_batch_with_an_add_no_bridge_has_is_not_held(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    await store.create_queue(anycast("b"))
    store.hold_forwarded(LONG, lambda queue: queue == "a")
    written = watch(store)
    holds: list[int] = []
    started = time.monotonic()
    first = held_add(store, 1, holds)
    await settled(store.add_early, message(2), ["b"], on_hold=lambda: holds.append(2))
    await first
    assert time.monotonic() - started < LONG / 2
    assert holds == []
    assert written == [[("AddMessage", 1, ("a",)), ("AddMessage", 2, ("b",))]]


@pytest_twisted.ensureDeferred
async def test_no_batch_waits_with_a_hold_of_zero(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(0, lambda queue: True)
    written = watch(store)
    holds: list[int] = []
    await held_add(store, 1, holds)
    assert holds == []
    assert written == [[("AddMessage", 1, ("a",))]]


@pytest_twisted.ensureDeferred
async def test_what_refers_to_a_held_add_ends_the_wait_for_it_and_comes_after_it(stores):
    """A new delivery count (a bridge gave the message back) needs the add written first:
    the batch stops waiting for it, and the count is written after it."""
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(LONG, lambda queue: True)
    written = watch(store)
    holds: list[int] = []
    added = held_add(store, 1, holds)
    await until(lambda: holds == [1])
    started = time.monotonic()
    await store.update_delivery_count("a", 1, 2)
    await added
    assert time.monotonic() - started < LONG / 2
    assert written == [[("AddMessage", 1, ("a",))], ["UpdateDeliveryCount"]]

    store, recovered = await stores.reopen(store)
    assert [(s.message.id, s.delivery_count) for s in recovered.messages["a"]] == [(1, 2)]


@pytest_twisted.ensureDeferred
async def test_closing_the_store_writes_a_held_batch_at_once(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(LONG, lambda queue: True)
    holds: list[int] = []
    added = held_add(store, 1, holds)
    await until(lambda: holds == [1])
    started = time.monotonic()
    store, recovered = await stores.reopen(store)
    assert time.monotonic() - started < LONG / 2
    assert added.called
    assert [s.message.id for s in recovered.messages["a"]] == [1]


@pytest_twisted.ensureDeferred
async def test_an_on_hold_that_fails_is_logged_and_the_batch_goes_on(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    store.hold_forwarded(LONG, lambda queue: True)
    written = watch(store)

    def failing() -> None:
        raise RuntimeError("on_hold failed (injected)")

    added = settled(store.add_early, message(1), ["a"], on_hold=failing)
    await until(lambda: store._hold is not None)
    await store.acknowledge("a", 1)
    await added
    assert written == []
