"""Consumers over the core head: credits, acknowledgements, redelivery counts when a
consumer closes or its connection dies, filters, browsing, subscriptions."""

from __future__ import annotations

import pytest_twisted

from bridge.protocol import encode_packet
from bridge.protocol import packets as p
from tests.heads.conftest import message


async def fill(peer, address: str, *bodies: bytes, **headers) -> None:  # type: ignore[no-untyped-def]
    start = len(peer.of(p.SendConfirmed)) * 1000 + 1
    for n, body in enumerate(bodies, start):
        peer.send(p.Send(n, None, message(address, body, **headers)))
    await peer.confirmed(start + len(bodies) - 1)


def bodies(deliveries) -> list[bytes]:  # type: ignore[no-untyped-def]
    return [d.message.body for d in deliveries]


@pytest_twisted.ensureDeferred
async def test_deliveries_follow_credits_and_acks_remove_them(node):
    producer = await node.peer()
    await fill(producer, "orders", b"a" * 100, b"b" * 100, b"c" * 100)
    consumer = await node.peer()
    consumer.send(p.CreateConsumer(1, 7, "orders", None, False, 1))
    assert await consumer.reply(1) == p.Ok(1)
    first = await consumer.next(p.Deliver)
    assert (first.consumer_id, first.delivery_id, first.delivery_count) == (7, 1, 1)
    assert first.message.id > 0
    assert len(consumer.of(p.Deliver)) == 1  # its one byte of credit is spent
    consumer.send(p.ConsumerCredits(7, 1000))
    await consumer.next(p.Deliver, 3)
    assert bodies(consumer.of(p.Deliver)) == [b"a" * 100, b"b" * 100, b"c" * 100]
    consumer.send(p.Ack(7, 2, True, None, 2))
    assert await consumer.reply(2) == p.Ok(2)
    assert node.broker.queue("orders").depth == 1
    await node.restart()
    assert [e.message.body for e in node.broker.queue("orders").browse()] == [b"c" * 100]


@pytest_twisted.ensureDeferred
async def test_unsettled_deliveries_come_back_counted_after_a_close_or_a_lost_connection(node):
    producer = await node.peer()
    await fill(producer, "orders", b"one", b"two")
    consumer = await node.peer()
    consumer.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    await consumer.next(p.Deliver, 2)
    consumer.send(p.Ack(1, 1, False, None, None), p.CloseConsumer(2, 1))
    assert await consumer.reply(2) == p.Ok(2)
    consumer.send(p.CreateConsumer(3, 2, "orders", None, False, -1))
    again = await consumer.next(p.Deliver, 3)
    assert (again.message.body, again.delivery_count, again.consumer_id) == (b"two", 2, 2)
    await consumer.close()
    await node.head.close_connections("test")
    other = await node.peer()
    other.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    third = await other.next(p.Deliver)
    assert (third.message.body, third.delivery_count) == (b"two", 3)
    await node.restart()
    [entry] = node.broker.queue("orders").browse()
    assert entry.delivery_count == 3


@pytest_twisted.ensureDeferred
async def test_nack_requeues_or_drops(node):
    producer = await node.peer()
    await fill(producer, "orders", b"retry", b"drop")
    consumer = await node.peer()
    consumer.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    await consumer.next(p.Deliver, 2)
    consumer.send(p.Nack(1, 2, False), p.Nack(1, 1, True))
    redelivered = await consumer.next(p.Deliver, 3)
    assert (redelivered.message.body, redelivered.delivery_count) == (b"retry", 2)
    assert node.broker.queue("orders").depth == 1


@pytest_twisted.ensureDeferred
async def test_settling_what_was_never_delivered_is_a_protocol_error(node):
    consumer = await node.peer()
    consumer.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    await consumer.reply(1)
    consumer.send(p.Ack(1, 42, False, None, None))
    reason = await consumer.lost
    assert "ACK of delivery 42 of consumer 1, which is not unsettled" in str(reason)
    other = await node.peer()
    other.send(p.Nack(9, 1, True))
    reason = await other.lost
    assert "NACK for consumer 9, which is not open" in str(reason)


@pytest_twisted.ensureDeferred
async def test_consumer_refusals(node):
    peer = await node.peer()
    peer.send(
        p.CreateConsumer(1, 1, "private.q", None, False, -1),
        p.CreateConsumer(2, 2, "orders", "colour = ", False, -1),
        p.CreateConsumer(3, 3, "orders", None, False, -1),
        p.CreateConsumer(4, 3, "orders", None, False, -1),
        p.CloseConsumer(5, 99),
    )
    missing, bad_filter, ok, in_use, not_open = [await peer.reply(n) for n in range(1, 6)]
    assert isinstance(missing, p.Failed) and missing.code is p.ErrorCode.NOT_FOUND
    assert isinstance(bad_filter, p.Failed) and bad_filter.code is p.ErrorCode.INVALID
    assert "bad filter 'colour = '" in bad_filter.message
    assert ok == p.Ok(3)
    assert isinstance(in_use, p.Failed) and in_use.code is p.ErrorCode.ALREADY_EXISTS
    assert isinstance(not_open, p.Failed) and not_open.code is p.ErrorCode.NOT_FOUND


@pytest_twisted.ensureDeferred
async def test_a_filter_picks_the_messages_a_consumer_gets(node):
    producer = await node.peer()
    await fill(producer, "orders", b"red", colour="red")
    await fill(producer, "orders", b"blue", colour="blue")
    consumer = await node.peer()
    consumer.send(p.CreateConsumer(1, 1, "orders", "colour = 'blue'", False, -1))
    delivered = await consumer.next(p.Deliver)
    assert delivered.message.body == b"blue"
    assert [e.message.body for e in node.broker.queue("orders").browse()] == [b"red"]


@pytest_twisted.ensureDeferred
async def test_browsing_reads_without_taking(node):
    producer = await node.peer()
    await fill(producer, "orders", b"1", b"2", b"3")
    browser = await node.peer()
    browser.send(p.CreateConsumer(1, 1, "orders", None, True, 1))
    await browser.next(p.Deliver)
    assert len(browser.of(p.Deliver)) == 1
    browser.send(p.ConsumerCredits(1, 10_000))
    await browser.next(p.Deliver, 3)
    assert bodies(browser.of(p.Deliver)) == [b"1", b"2", b"3"]
    assert node.broker.queue("orders").depth == 3
    browser.send(p.Ack(1, 1, False, None, None))
    reason = await browser.lost
    assert "ACK for browse-only consumer 1" in str(reason)


@pytest_twisted.ensureDeferred
async def test_subscriptions_durable_and_not(node):
    peer = await node.peer()
    peer.send(
        p.CreateQueue(1, "news-durable", "news", p.Routing.MULTICAST, True, None),
        p.CreateQueue(2, "news-temp", "news", p.Routing.MULTICAST, False, None),
    )
    assert await peer.reply(1) == p.Ok(1)
    assert await peer.reply(2) == p.Ok(2)
    await fill(peer, "news", b"headline")
    assert node.broker.queue("news-durable").depth == 1
    assert node.broker.queue("news-temp").depth == 1
    await peer.close()
    await node.head.close_connections("test")
    assert "news-temp" not in node.broker.queues  # it lived as long as its connection
    await node.restart()
    assert [e.message.body for e in node.broker.queue("news-durable").browse()] == [b"headline"]
    peer = await node.peer()
    peer.send(p.DeleteQueue(1, "news-durable"), p.DeleteQueue(2, "news-durable"))
    assert await peer.reply(1) == p.Ok(1)
    gone = await peer.reply(2)
    assert isinstance(gone, p.Failed) and gone.code is p.ErrorCode.NOT_FOUND


@pytest_twisted.ensureDeferred
async def test_consuming_from_a_new_anycast_name_creates_its_queue(node):
    consumer = await node.peer()
    consumer.send(p.CreateConsumer(1, 1, "invoices", None, False, -1))
    assert await consumer.reply(1) == p.Ok(1)
    producer = await node.peer()
    await fill(producer, "invoices", b"bill")
    delivered = await consumer.next(p.Deliver)
    assert delivered.message.body == b"bill"


@pytest_twisted.ensureDeferred
async def test_a_large_message_is_delivered_in_chunks_that_fit_the_clients_frames(node):
    producer = await node.peer()
    body = b"L" * 300_000
    await fill(producer, "orders", body)
    consumer = await node.peer(max_frame_size=100_000)
    consumer.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    begin = await consumer.next(p.DeliverLargeBegin)
    assert (begin.total_size, begin.message.body) == (300_000, b"")
    await consumer.until(lambda: any(c.last for c in consumer.of(p.DeliverLargeChunk)))
    chunks = consumer.of(p.DeliverLargeChunk)
    assert [len(c.data) for c in chunks] == [100_000 - p.LARGE_CHUNK_OVERHEAD] * 3 + [51]
    assert all(len(encode_packet(c)[1]) <= 100_000 for c in chunks)
    assert b"".join(c.data for c in chunks) == body
