"""The queue as a state machine: whatever consumers do (claims of a reconnected client's
held messages included), no message is lost, duplicated or delivered past its consumer's
credits, and each consumer sees the queue's order."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from bridge.message import Message
from bridge.node.queue import UNLIMITED, Delivery, Queue


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.queue = Queue("q", "q")
        self.next_id = 1
        self.added: set[int] = set()
        self.gone: set[int] = set()  # acknowledged or dropped
        self.in_flight: dict[int, dict[int, int]] = {}  # consumer -> delivery id -> message id
        self.credits: dict[int, int | None] = {}  # consumer -> bytes it may still receive
        self.last_fresh: dict[int, int] = {}  # consumer -> last first-time message id seen
        self.next_consumer = 1
        self.sizes: dict[int, int] = {}
        self.acking: set[int] = set()  # consumers that acknowledge later (not auto_ack)

    def _sink(self, consumer_id: int):  # type: ignore[no-untyped-def]
        def sink(delivery: Delivery) -> None:
            message_id = delivery.message.id
            assert message_id in self.added and message_id not in self.gone
            for deliveries in self.in_flight.values():
                assert message_id not in deliveries.values(), "delivered twice at once"
            self.in_flight[consumer_id][delivery.delivery_id] = message_id
            credits = self.credits[consumer_id]
            if credits is not None:
                assert credits > 0, "delivered without credits"
                self.credits[consumer_id] = credits - delivery.message.size
            if delivery.delivery_count == 1:
                assert message_id > self.last_fresh.get(consumer_id, 0), "order broken"
                self.last_fresh[consumer_id] = message_id

        return sink

    @rule(body=st.binary(max_size=64))
    def add(self, body):
        message = Message(id=self.next_id, address="q", durable=False, headers={}, body=body)
        self.added.add(self.next_id)
        self.sizes[self.next_id] = message.size
        self.next_id += 1
        self.queue.add(message)

    @rule(window=st.sampled_from([UNLIMITED, 0, 60, 200]), auto_ack=st.booleans())
    def add_consumer(self, window, auto_ack):
        consumer_id = self.next_consumer
        self.next_consumer += 1
        self.in_flight[consumer_id] = {}
        self.credits[consumer_id] = None if window == UNLIMITED else window
        if not auto_ack:
            self.acking.add(consumer_id)
        self.queue.add_consumer(
            consumer_id, self._sink(consumer_id), credits=window, auto_ack=auto_ack
        )

    @rule(data=st.data(), window=st.sampled_from([UNLIMITED, 0, 60, 200]))
    def reattach(self, data, window):
        """A consumer created again claims ids (any: waiting, in flight, gone, unknown,
        repeated): exactly the waiting ones become its deliveries, each spending its size
        of the credit; the rest are answered unclaimed."""
        waiting = {e.message.id for e in self.queue.browse()}
        ids = list(dict.fromkeys(data.draw(st.lists(st.integers(1, self.next_id + 2)))))
        consumer_id = self.next_consumer
        self.next_consumer += 1
        self.in_flight[consumer_id] = {}
        self.credits[consumer_id] = None if window == UNLIMITED else window
        self.acking.add(consumer_id)  # (a core consumer: it acknowledges later)
        self.queue.add_consumer(consumer_id, self._sink(consumer_id), window, held=True)
        claim = self.queue.claim(consumer_id, ids)
        assert [m for m, _ in claim.claimed] == [i for i in ids if i in waiting]
        assert list(claim.unclaimed) == [i for i in ids if i not in waiting]
        for message_id, delivery_id in claim.claimed:
            self.in_flight[consumer_id][delivery_id] = message_id
            credits = self.credits[consumer_id]
            if credits is not None:
                self.credits[consumer_id] = credits - self.sizes[message_id]
        self.queue.hold(consumer_id, False)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data())
    def close_consumer(self, data):
        consumer_id = data.draw(st.sampled_from(sorted(self.in_flight)))
        had = sorted(self.in_flight.pop(consumer_id).values())  # before: others may get them
        del self.credits[consumer_id]
        self.acking.discard(consumer_id)
        returned = self.queue.remove_consumer(consumer_id)
        assert sorted(e.message.id for e in returned) == had

    @precondition(lambda self: any(self.in_flight.values()))
    @rule(data=st.data(), cumulative=st.booleans())
    def ack(self, data, cumulative):
        consumer_id = data.draw(st.sampled_from([c for c, d in self.in_flight.items() if d]))
        delivery_id = data.draw(st.sampled_from(sorted(self.in_flight[consumer_id])))
        acked = self.queue.acknowledge(consumer_id, delivery_id, cumulative)
        expected = (
            [d for d in self.in_flight[consumer_id] if d <= delivery_id]
            if cumulative
            else [delivery_id]
        )
        assert [e.message.id for e in acked] == [self.in_flight[consumer_id][d] for d in expected]
        for d in expected:
            self.gone.add(self.in_flight[consumer_id].pop(d))

    @precondition(lambda self: any(self.in_flight.values()))
    @rule(data=st.data(), requeue=st.booleans())
    def nack(self, data, requeue):
        consumer_id = data.draw(st.sampled_from([c for c, d in self.in_flight.items() if d]))
        delivery_id = data.draw(st.sampled_from(sorted(self.in_flight[consumer_id])))
        message_id = self.in_flight[consumer_id].pop(delivery_id)
        self.queue.nack(consumer_id, delivery_id, requeue)
        if not requeue:
            self.gone.add(message_id)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data(), credits=st.integers(0, 300))
    def grant(self, data, credits):
        consumer_id = data.draw(st.sampled_from(sorted(self.in_flight)))
        current = self.credits[consumer_id]
        if current is not None:
            self.credits[consumer_id] = current + credits
        self.queue.add_credits(consumer_id, credits)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data(), ready=st.booleans())
    def readiness(self, data, ready):
        consumer_id = data.draw(st.sampled_from(sorted(self.in_flight)))
        self.queue.set_ready(consumer_id, ready)

    @invariant()
    def every_message_is_in_exactly_one_place(self):
        waiting = [e.message.id for e in self.queue.browse()]
        flying = [m for deliveries in self.in_flight.values() for m in deliveries.values()]
        assert len(waiting) == len(set(waiting))
        assert sorted(waiting + flying) == sorted(self.added - self.gone)
        assert self.queue.depth == len(self.added - self.gone)

    @invariant()
    def consumed_when_delivered_while_every_consumer_acknowledges_on_delivery(self):
        expected = bool(self.in_flight) and not self.acking
        assert self.queue.consumed_when_delivered == expected

    @invariant()
    def the_waiting_messages_keep_their_order(self):
        waiting = [e.message.id for e in self.queue.browse()]
        assert waiting == sorted(waiting)


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(max_examples=200, stateful_step_count=40)
