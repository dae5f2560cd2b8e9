"""REATTACH_CONSUMER over the core head: a consumer created again after a reconnection
claims the messages its client still holds, before anything else is delivered to it;
what is not waiting is reported unclaimed, and a claim out of bounds ends only its
connection."""

from __future__ import annotations

from typing import Any

import pytest_twisted

from bridge.protocol import packets as p
from tests.heads.conftest import eventually
from tests.heads.test_core_consume import fill


async def held(node: Any, count: int) -> tuple[Any, list[p.Deliver]]:
    """A consumer that was delivered ``count`` messages of three, then its connection
    dropped (the node gave them back)."""
    producer = await node.peer()
    await fill(producer, "orders", b"one", b"two", b"three")
    first = await node.peer()
    first.send(p.CreateConsumer(1, 1, "orders", None, False, 1))
    deliveries = [await first.next(p.Deliver)]
    if count > 1:
        first.send(p.ConsumerCredits(1, deliveries[0].message.size))  # credit back to 1
        deliveries.append(await first.next(p.Deliver, 2))
    await first.close()
    queue = node.broker.queue("orders")
    await eventually(lambda: queue.in_flight == 0)
    return queue, deliveries


@pytest_twisted.ensureDeferred
async def test_claimed_messages_are_in_flight_under_new_ids_counted_once(node):
    queue, deliveries = await held(node, 2)
    ids = [d.message.id for d in deliveries]
    again = await node.peer()
    again.send(p.ReattachConsumer(1, 5, "orders", None, False, 1, (ids[1], ids[0], 999)))
    await again.until(lambda: bool(again.of(p.Reattached)))
    [answer] = again.of(p.Reattached)
    assert answer == p.Reattached(
        1, (p.ClaimedDelivery(ids[1], 1), p.ClaimedDelivery(ids[0], 2)), (999,)
    )
    assert (queue.in_flight, queue.waiting) == (2, 1)
    assert again.of(p.Deliver) == []  # the claim spent the window
    again.send(p.ConsumerCredits(5, 1000))
    third = await again.next(p.Deliver)
    assert (third.message.body, third.delivery_id, third.delivery_count) == (b"three", 3, 1)
    again.send(p.Ack(5, 2, False, None, 2), p.Ack(5, 1, False, None, 3))
    assert await again.reply(2) == p.Ok(2)
    assert await again.reply(3) == p.Ok(3)
    assert (queue.depth, queue.acknowledged_total) == (1, 2)
    await again.close()
    await eventually(lambda: queue.in_flight == 0)
    other = await node.peer()
    other.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    last = await other.next(p.Deliver)
    assert (last.message.body, last.delivery_count) == (b"three", 2)


@pytest_twisted.ensureDeferred
async def test_a_message_delivered_to_another_consumer_is_not_claimed(node):
    queue, [delivery] = await held(node, 1)
    thief = await node.peer()
    thief.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    await thief.next(p.Deliver, 3)
    again = await node.peer()
    again.send(p.ReattachConsumer(1, 1, "orders", None, False, -1, (delivery.message.id,) * 3))
    await again.until(lambda: bool(again.of(p.Reattached)))
    assert again.of(p.Reattached) == [p.Reattached(1, (), (delivery.message.id,))]
    assert queue.in_flight == 3


@pytest_twisted.ensureDeferred
async def test_a_claim_over_the_limit_or_on_an_old_version_ends_only_its_connection(node):
    await held(node, 1)
    greedy = await node.peer()
    greedy.send(
        p.ReattachConsumer(1, 1, "orders", None, False, -1, tuple(range(p.CLAIM_LIMIT + 1)))
    )
    reason = await greedy.lost
    assert f"claims {p.CLAIM_LIMIT + 1} messages, at most {p.CLAIM_LIMIT}" in str(reason)
    old = await node.peer(connect_as=None)
    old.send(p.Connect(4, "old", None, None, 1 << 20))
    await old.next(p.Connected)
    old.send(p.ReattachConsumer(1, 1, "orders", None, False, -1, ()))
    reason = await old.lost
    assert "REATTACH_CONSUMER on protocol 4: it needs 5" in str(reason)
    browser = await node.peer()
    browser.send(p.ReattachConsumer(1, 1, "orders", None, True, -1, ()))
    assert "browse-only" in str(await browser.lost)
    fine = await node.peer()
    fine.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    assert await fine.reply(1) == p.Ok(1)
    await fine.next(p.Deliver, 3)
