"""A connection's consumer on the node (``bridge.node.consumer``), as both heads drive it:
it takes messages while the connection is writable and it has room (a window of bytes, or
a prefetch of unacknowledged messages), streams large bodies a chunk at a time under the
same conditions, settles what the client acknowledges, and batches ``ack:auto``
acknowledgements per turn. Plain calls and a ``Clock``; the broker is the real one over
SQLite, but non-durable messages never wait for it."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import pytest_twisted
from twisted.internet.task import Clock
from zope.interface import implementer

from bridge.message import Message
from bridge.node.bodies import CHUNK_SIZE
from bridge.node.broker import Broker
from bridge.node.consumer import AutoAcks, Consumer, IStreamListener
from bridge.node.queue import UNLIMITED
from tests.node.test_bodies import sink_of
from tests.node.test_broker import Brokers, brokers

__all__ = ["brokers"]

SIZE = Message(0, "orders", False, {}, b"%04d" % 0).size


@implementer(IStreamListener)
@attrs.define
class _Head:
    """Records what a head would encode."""

    delivered: list[tuple[int, bytes]] = attrs.Factory(list)
    chunks: list[tuple[int, int, bool]] = attrs.Factory(list)
    writable: bool = True
    stop_after_chunks: int | None = None
    failed: list[int] = attrs.Factory(list)
    chunk_size: int = CHUNK_SIZE

    def deliver(
        self, consumer: Consumer[Any], delivery_id: int, count: int, message: Message
    ) -> None:
        self.delivered.append((delivery_id, message.body))

    def begin_large(
        self, consumer: Consumer[Any], delivery_id: int, count: int, header: Message, size: int
    ) -> None:
        self.delivered.append((delivery_id, header.body))

    def chunk(self, consumer: Consumer[Any], delivery_id: int, data: bytes, last: bool) -> None:
        self.chunks.append((delivery_id, len(data), last))
        if self.stop_after_chunks is not None and len(self.chunks) >= self.stop_after_chunks:
            self.writable = False

    def stream_failed(self, consumer: Consumer[Any], delivery_id: int) -> None:
        self.failed.append(delivery_id)


def send(broker: Broker, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        broker.publish(Message(0, "orders", False, {}, b"%04d" % n))


def bodies(head: _Head) -> list[bytes]:
    return [body for _, body in head.delivered]


@pytest_twisted.ensureDeferred
async def test_a_window_of_bytes_is_spent_and_granted_again(brokers: Brokers) -> None:
    broker = await brokers()
    head = _Head()
    consumer = Consumer(broker, "orders", head, "c", window=2 * SIZE)
    send(broker, 5)
    consumer.start()
    assert bodies(head) == [b"0000", b"0001"]
    consumer.add_credits(SIZE)
    assert bodies(head)[2:] == [b"0002"]
    consumer.add_credits(10 * SIZE)
    assert len(head.delivered) == 5


@pytest_twisted.ensureDeferred
async def test_nothing_is_taken_while_the_connection_is_not_writable(brokers: Brokers) -> None:
    broker = await brokers()
    head = _Head()
    consumer = Consumer(broker, "orders", head, "c", writable=False)
    consumer.start()
    send(broker, 3)
    assert head.delivered == []
    consumer.writability_changed(True)
    assert bodies(head) == [b"0000", b"0001", b"0002"]
    consumer.writability_changed(False)
    send(broker, 1, start=3)
    assert len(head.delivered) == 3
    assert broker.queue("orders").waiting == 1


@pytest.mark.parametrize(("prefetch", "acks"), [(1, [1, 1, 1]), (3, [1, 2, 3]), (5, [3, 3, 3, 3])])
@pytest_twisted.ensureDeferred
async def test_a_prefetch_bounds_what_awaits_acknowledgement(
    brokers: Brokers, prefetch: int, acks: list[int]
) -> None:
    """However the client settles (a few at a time, oldest first), what awaits
    acknowledgement never exceeds the prefetch, and each settled one makes room for the
    next message."""
    broker = await brokers()
    head = _Head()
    consumer = Consumer(broker, "orders", head, "c", prefetch=prefetch, counts_unacked=True)
    consumer.start()
    send(broker, 12)
    assert consumer.unacked is not None
    assert len(consumer.unacked) == prefetch
    settled = 0
    for count in acks:
        ids = list(consumer.unacked)[:count]
        consumer.acknowledge(ids[-1], cumulative=True)
        consumer.settled(ids)
        settled += len(ids)
        assert len(consumer.unacked) == min(prefetch, 12 - settled)
    assert len(head.delivered) == min(12, settled + prefetch)


@pytest_twisted.ensureDeferred
async def test_auto_acknowledgements_go_once_per_consumer_at_the_end_of_the_turn(
    brokers: Brokers,
) -> None:
    broker = await brokers()
    clock = Clock()
    auto = AutoAcks(clock)
    head = _Head()
    consumer = Consumer(broker, "orders", head, "c", auto_acks=auto)
    consumer.start()
    send(broker, 4)
    queue = broker.queue("orders")
    assert queue.in_flight == 4
    clock.advance(0)
    assert queue.in_flight == 0
    send(broker, 2, start=4)
    auto.close()  # the connection goes: what was sent is acknowledged, nothing is left
    assert queue.in_flight == 0
    assert clock.getDelayedCalls() == []


@pytest_twisted.ensureDeferred
async def test_closing_gives_unacknowledged_messages_back(brokers: Brokers) -> None:
    broker = await brokers()
    consumer = Consumer(broker, "orders", _Head(), "c", counts_unacked=True)
    consumer.start()
    send(broker, 2)
    await consumer.close()
    assert consumer.closed
    assert broker.queue("orders").waiting == 2
    assert broker.queue("orders").consumer_ids == ()


@pytest_twisted.ensureDeferred
async def test_a_browser_walks_a_snapshot_in_its_window_and_takes_nothing(
    brokers: Brokers,
) -> None:
    broker = await brokers()
    send(broker, 4)
    head = _Head()
    consumer = Consumer(broker, "orders", head, "c", window=2 * SIZE)
    consumer.browse(broker.queue("orders").browse())
    assert [delivery_id for delivery_id, _ in head.delivered] == [1, 2]
    consumer.add_credits(UNLIMITED + 1 + 10 * SIZE)
    assert bodies(head) == [b"0000", b"0001", b"0002", b"0003"]
    assert broker.queue("orders").waiting == 4
    await consumer.close()


@pytest_twisted.ensureDeferred
async def test_a_large_body_is_streamed_while_writable_and_nothing_else_meanwhile(
    brokers: Brokers,
) -> None:
    broker = await brokers()
    data = b"z" * (3 * CHUNK_SIZE)
    sink = sink_of(broker, data, CHUNK_SIZE)
    body = sink.finish()
    broker.publish(Message(sink.message_id, "orders", False, {}, b"", large=body))
    send(broker, 1)
    head = _Head(stop_after_chunks=1)
    consumer = Consumer(
        broker, "orders", head, "c", streamer=head, is_writable=lambda: head.writable
    )
    consumer.start()
    assert head.chunks == [(1, CHUNK_SIZE, False)]
    assert len(head.delivered) == 1  # the small message behind it waits
    assert consumer.streaming
    head.writable, head.stop_after_chunks = True, None
    consumer.writability_changed(True)
    assert head.chunks[1:] == [(1, CHUNK_SIZE, False), (1, CHUNK_SIZE, True)]
    assert not consumer.streaming
    assert bodies(head) == [b"", b"0000"]
    await consumer.close()


@pytest_twisted.ensureDeferred
async def test_refused_deliveries_go_back_unless_settled_since(brokers: Brokers) -> None:
    broker = await brokers()
    head = _Head()
    consumer = Consumer(broker, "orders", head, "c", prefetch=3, counts_unacked=True)
    consumer.start()
    send(broker, 3)
    assert consumer.unacked is not None
    first, second, third = list(consumer.unacked)
    consumer.settled([first])  # acknowledged meanwhile: not refused again
    assert consumer.refuse([first, second, third], requeue=True) == [second, third]
    consumer.settled([second, third])
    # Back in the queue, the refused two come again as the prefetch frees.
    assert bodies(head) == [b"0000", b"0001", b"0002", b"0001", b"0002"]


@pytest_twisted.ensureDeferred
async def test_a_large_body_is_streamed_in_chunks_the_head_asks_for(brokers: Brokers) -> None:
    broker = await brokers()
    sink = sink_of(broker, b"z" * 2500, 1000)
    broker.publish(Message(sink.message_id, "orders", False, {}, b"", large=sink.finish()))
    head = _Head(chunk_size=1000)
    consumer = Consumer(broker, "orders", head, "c", streamer=head, is_writable=lambda: True)
    consumer.start()
    assert head.chunks == [(1, 1000, False), (1, 1000, False), (1, 500, True)]
    await consumer.close()
