"""A queue and its consumers: dispatch, credits, acks, nacks and redelivery, by example."""

from __future__ import annotations

import pytest

from bridge.message import Message
from bridge.node.queue import UNLIMITED, Claim, Delivery, Queue, QueueError


def message(n: int, body: bytes = b"x" * 100, **headers: str | int) -> Message:
    return Message(id=n, address="orders", durable=True, headers=headers, body=body)


class Sink:
    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []

    def __call__(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)

    @property
    def ids(self) -> list[int]:
        return [d.message.id for d in self.deliveries]


def test_messages_wait_until_a_consumer_comes_then_go_in_order():
    queue = Queue("orders", "orders")
    for n in range(1, 4):
        queue.add(message(n))
    assert (queue.waiting, queue.depth) == (3, 3)
    sink = Sink()
    queue.add_consumer(1, sink)
    assert sink.ids == [1, 2, 3]
    assert [d.delivery_id for d in sink.deliveries] == [1, 2, 3]
    assert [d.delivery_count for d in sink.deliveries] == [1, 1, 1]
    assert (queue.waiting, queue.in_flight, queue.depth) == (0, 3, 3)


def test_consumers_take_turns():
    queue = Queue("orders", "orders")
    first, second = Sink(), Sink()
    queue.add_consumer(1, first)
    queue.add_consumer(2, second)
    for n in range(1, 7):
        queue.add(message(n))
    assert first.ids == [1, 3, 5]
    assert second.ids == [2, 4, 6]


def test_delivery_goes_on_while_credits_are_above_zero_so_it_overshoots_by_one_at_most():
    queue = Queue("orders", "orders")
    sink = Sink()
    size = message(1).size
    queue.add_consumer(1, sink, credits=size * 2)
    for n in range(1, 6):
        queue.add(message(n))
    assert sink.ids == [1, 2]  # credits now 0
    queue.add_credits(1, size - 1)
    assert sink.ids == [1, 2, 3]  # credits were positive: one more, now -1
    queue.add_credits(1, 1)
    assert sink.ids == [1, 2, 3]  # credits 0
    queue.add_credits(1, 1)
    assert sink.ids == [1, 2, 3, 4]


def test_a_zero_window_delivers_nothing_until_credited():
    queue = Queue("orders", "orders")
    sink = Sink()
    queue.add_consumer(1, sink, credits=0)
    queue.add(message(1))
    assert sink.ids == []
    queue.add_credits(1, 1)
    assert sink.ids == [1]


def test_a_consumer_that_is_not_ready_gets_nothing_until_it_is():
    queue = Queue("orders", "orders")
    sink = Sink()
    queue.add_consumer(1, sink)
    queue.set_ready(1, False)
    queue.add(message(1))
    assert sink.ids == []
    queue.set_ready(1, True)
    assert sink.ids == [1]


def test_individual_and_cumulative_acks():
    queue = Queue("orders", "orders")
    sink = Sink()
    queue.add_consumer(1, sink)
    for n in range(1, 6):
        queue.add(message(n))
    assert [e.message.id for e in queue.acknowledge(1, 2)] == [2]
    assert [e.message.id for e in queue.acknowledge(1, 4, cumulative=True)] == [1, 3, 4]
    assert queue.depth == 1
    with pytest.raises(QueueError, match="has no delivery 4 in flight"):
        queue.acknowledge(1, 4)


def test_closing_a_consumer_returns_its_messages_in_order_for_redelivery():
    queue = Queue("orders", "orders")
    first = Sink()
    queue.add_consumer(1, first, credits=message(1).size * 2)
    for n in range(1, 5):
        queue.add(message(n))
    assert first.ids == [1, 2]
    queue.acknowledge(1, 1)
    returned = queue.remove_consumer(1)
    assert [e.message.id for e in returned] == [2]
    assert [e.message.id for e in queue.browse()] == [2, 3, 4]
    second = Sink()
    queue.add_consumer(2, second)
    assert second.ids == [2, 3, 4]
    assert [d.delivery_count for d in second.deliveries] == [2, 1, 1]


def test_nack_requeues_at_its_place_or_drops():
    queue = Queue("orders", "orders")
    sink = Sink()
    queue.add_consumer(1, sink, credits=message(1).size)
    for n in range(1, 4):
        queue.add(message(n))
    assert sink.ids == [1]
    queue.nack(1, 1, requeue=True)
    assert sink.ids == [1]  # no credits left
    queue.add_credits(1, message(1).size)
    assert sink.ids == [1, 1]
    assert sink.deliveries[-1].delivery_count == 2
    dropped = queue.nack(1, 2, requeue=False)
    assert dropped.message.id == 1
    assert [e.message.id for e in queue.browse()] == [2, 3]


def test_filters_skip_messages_others_take_and_order_holds():
    queue = Queue("orders", "orders")
    eu, anyone = Sink(), Sink()
    queue.add_consumer(1, eu, filter=lambda headers: headers.get("region") == "eu")
    for n, region in enumerate(["us", "eu", "us", "eu"], start=1):
        queue.add(message(n, region=region))
    assert eu.ids == [2, 4]
    assert [e.message.id for e in queue.browse()] == [1, 3]
    queue.add_consumer(2, anyone)
    assert anyone.ids == [1, 3]


def test_a_sink_may_ack_or_close_from_inside_a_delivery():
    queue = Queue("orders", "orders")
    seen: list[int] = []

    def acking(delivery: Delivery) -> None:
        seen.append(delivery.message.id)
        queue.acknowledge(delivery.consumer_id, delivery.delivery_id)
        if delivery.message.id == 2:
            queue.remove_consumer(delivery.consumer_id)

    queue.add_consumer(1, acking)
    for n in range(1, 4):
        queue.add(message(n))
    assert seen == [1, 2]
    assert [e.message.id for e in queue.browse()] == [3]


def test_bad_calls_name_what_is_missing():
    queue = Queue("orders", "orders")
    with pytest.raises(QueueError, match="queue 'orders' has no consumer 9"):
        queue.add_credits(9, 10)
    queue.add_consumer(1, Sink())
    with pytest.raises(QueueError, match="already has consumer 1"):
        queue.add_consumer(1, Sink())
    with pytest.raises(ValueError, match="credits must be -1"):
        queue.add_consumer(2, Sink(), credits=-5)
    with pytest.raises(QueueError, match="has no delivery 3"):
        queue.nack(1, 3, requeue=True)
    assert UNLIMITED == -1


def test_a_claim_takes_waiting_messages_in_flight_without_counting_a_delivery():
    queue = Queue("orders", "orders")
    for n in range(1, 5):
        queue.add(message(n))
    queue.add_consumer(1, Sink())
    queue.remove_consumer(1)  # its client dropped: 1-4 wait again, delivered once
    sink = Sink()
    size = message(1).size
    queue.add_consumer(2, sink, credits=2 * size + 1, held=True)
    assert sink.ids == []  # held: it claims first
    claim = queue.claim(2, [3, 1, 3, 42])
    assert claim == Claim(((3, 1), (1, 2)), (42,))
    assert (queue.waiting, queue.in_flight) == (2, 2)
    queue.hold(2, False)
    assert sink.ids == [2]  # one byte of credit left after the two claimed
    assert [(d.delivery_id, d.delivery_count) for d in sink.deliveries] == [(3, 2)]
    assert [e.message.id for e in queue.acknowledge(2, 2, cumulative=True)] == [3, 1]
    assert queue.depth == 2


def test_a_claim_leaves_what_the_consumer_filter_refuses_and_what_is_in_flight():
    queue = Queue("orders", "orders")
    queue.add(message(1, colour="red"))
    queue.add(message(2, colour="blue"))
    other = Sink()
    queue.add_consumer(1, other, filter=lambda headers: headers.get("colour") == "blue")
    assert other.ids == [2]
    queue.add_consumer(2, Sink(), filter=lambda headers: headers.get("colour") == "blue", held=True)
    assert queue.claim(2, [1, 2]) == Claim((), (1, 2))
    assert (queue.waiting, queue.in_flight) == (1, 1)
    with pytest.raises(QueueError):
        queue.claim(3, [1])


def test_consumed_when_delivered_only_while_every_consumer_acknowledges_on_delivery():
    queue = Queue("orders", "orders")
    assert not queue.consumed_when_delivered  # no consumer: a message waits
    queue.add_consumer(1, lambda delivery: None, auto_ack=True)
    queue.add_consumer(2, lambda delivery: None, auto_ack=True)
    assert queue.consumed_when_delivered
    queue.add_consumer(3, lambda delivery: None)
    assert not queue.consumed_when_delivered
    queue.remove_consumer(1)
    assert not queue.consumed_when_delivered
    queue.remove_consumer(3)
    assert queue.consumed_when_delivered
    queue.remove_consumer(2)
    assert not queue.consumed_when_delivered


def test_a_message_is_forwarded_while_bridges_alone_consume_and_it_does_not_wait():
    queue = Queue("orders", "orders")
    assert not queue.forwards(1)  # no consumer
    queue.add_consumer(1, lambda delivery: None, forwards=True)
    queue.add(Message(1, "orders", True, {}, b"x"))
    assert queue.forwards(1)  # in flight to the bridge
    queue.add_consumer(2, lambda delivery: None, auto_ack=True)
    assert not queue.forwards(1)  # not only bridges
    queue.remove_consumer(2)
    queue.set_ready(1, False)
    queue.add(Message(2, "orders", True, {}, b"x"))
    queue.add(Message(3, "orders", True, {}, b"x"))
    assert queue.forwards(1)  # still in flight
    assert not queue.forwards(2)
    assert not queue.forwards(3)  # 2 and 3 wait
    queue.remove_consumer(1)  # 1 is given back: it waits at the front
    assert not queue.forwards(1)
