"""SEND_MANY and DELIVER_MANY on the core head: a batch of sends is each send in turn, and
a consumer's deliveries of one turn leave in one frame, in order with everything else."""

from __future__ import annotations

import pytest_twisted

from bridge.protocol import encode_packet
from bridge.protocol import packets as p
from tests.heads.conftest import message


def bodies(deliveries) -> list[bytes]:  # type: ignore[no-untyped-def]
    return [d.message.body for d in deliveries]


async def queued(node, count: int, body: bytes = b"") -> None:  # type: ignore[no-untyped-def]
    """``count`` messages on queue "orders" (bodies "0", "1", ... after ``body``), sent
    in one SEND_MANY and confirmed."""
    producer = await node.peer()
    batch = tuple(message("orders", body + b"%d" % n) for n in range(count))
    producer.send(p.SendMany(1, None, batch))
    await producer.confirmed(count)


async def consuming(node, consumer_id: int, deliveries: int):  # type: ignore[no-untyped-def]
    """A peer consuming "orders" without a credit limit, once it got ``deliveries``."""
    consumer = await node.peer()
    consumer.send(p.CreateConsumer(1, consumer_id, "orders", None, False, -1))
    await consumer.next(p.Deliver, deliveries)
    return consumer


@pytest_twisted.ensureDeferred
async def test_a_send_many_is_each_send_in_turn_refusals_included(node):
    producer = await node.peer()
    producer.send(
        p.SendMany(
            1,
            None,
            (message("orders", b"a"), message("$own", b"b"), message("orders", b"c", False)),
        )
    )
    await producer.confirmed(3)
    [failed] = producer.of(p.SendFailed)
    assert (failed.sequence, failed.code) == (2, p.ErrorCode.NOT_FOUND)
    assert [e.message.body for e in node.broker.queue("orders").browse()] == [b"a", b"c"]
    producer.send(p.Send(4, None, message("orders", b"d")))
    await producer.confirmed(4)


@pytest_twisted.ensureDeferred
async def test_a_send_many_in_a_transaction_takes_effect_at_commit(node):
    producer = await node.peer()
    producer.send(p.TxBegin(1, 5), p.SendMany(1, 5, (message("jobs", b"1"), message("jobs", b"2"))))
    await producer.confirmed(2)
    assert node.broker.queue("jobs").depth == 0
    producer.send(p.TxCommit(2, 5))
    assert await producer.reply(2) == p.Ok(2)
    assert [e.message.body for e in node.broker.queue("jobs").browse()] == [b"1", b"2"]


@pytest_twisted.ensureDeferred
async def test_a_send_many_whose_sequences_do_not_follow_ends_the_connection(node):
    producer = await node.peer()
    producer.send(p.Send(5, None, message("orders", b"a")))
    await producer.confirmed(5)
    producer.send(p.SendMany(5, None, (message("orders", b"b"),)))
    reason = await producer.lost
    assert "send sequence 5 does not follow 5" in str(reason)
    other = await node.peer()
    other.send(p.Send(1, None, message("orders", b"c")))
    await other.confirmed(1)  # the node serves everyone else


@pytest_twisted.ensureDeferred
async def test_a_consumers_deliveries_of_one_turn_leave_in_one_frame(node):
    await queued(node, 20)
    consumer = await consuming(node, 3, 20)
    [batch] = [packet for packet in consumer.packets if isinstance(packet, p.DeliverMany)]
    assert (batch.consumer_id, batch.first_delivery_id, batch.delivery_count) == (3, 1, 1)
    assert [m.body for m in batch.messages] == [b"%d" % n for n in range(20)]
    assert [d.delivery_id for d in consumer.of(p.Deliver)] == list(range(1, 21))


@pytest_twisted.ensureDeferred
async def test_a_batch_never_passes_the_packets_emitted_after_its_deliveries(node):
    """The node flushes gathered deliveries before any other packet: the OK of a consumer
    close comes after every delivery made to that consumer."""
    await queued(node, 5)
    consumer = await node.peer()
    consumer.send(p.CreateConsumer(1, 1, "orders", None, False, -1), p.CloseConsumer(2, 1))
    assert await consumer.reply(2) == p.Ok(2)
    assert consumer.packets[-1] == p.Ok(2)  # no delivery to the consumer follows its close
    assert bodies(consumer.of(p.Deliver)) == [b"%d" % n for n in range(5)]


@pytest_twisted.ensureDeferred
async def test_redeliveries_come_in_a_batch_of_their_own_count(node):
    await queued(node, 4)
    consumer = await consuming(node, 1, 4)
    consumer.send(p.Nack(1, 2, True), p.Nack(1, 3, True))  # back, to come again counted 2
    await consumer.next(p.Deliver, 6)
    again = consumer.of(p.Deliver)[4:]
    assert [(d.message.body, d.delivery_count) for d in again] == [(b"1", 2), (b"2", 2)]
    assert all(d.delivery_id > 4 for d in again)
    counted = [pk for pk in consumer.packets if isinstance(pk, p.Deliver | p.DeliverMany)]
    assert [pk.delivery_count for pk in counted][-1] == 2
    assert all(pk.delivery_count == 1 for pk in counted[:-1])


@pytest_twisted.ensureDeferred
async def test_batches_stay_within_the_clients_max_frame_size(node):
    await queued(node, 30, b"x" * 500)
    consumer = await node.peer(connect_as=None)
    consumer.send(p.Connect(p.PROTOCOL_VERSION, "small", None, None, 1 << 20, 4096))
    connected = await consumer.next(p.Connected)
    assert connected.max_frame_size == 4 * 1024 * 1024  # the node's own
    consumer.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    await consumer.next(p.Deliver, 30)
    batches = [packet for packet in consumer.packets if isinstance(packet, p.DeliverMany)]
    assert len(batches) >= 4
    for batch in batches:
        assert len(encode_packet(batch)[1]) <= 4096
