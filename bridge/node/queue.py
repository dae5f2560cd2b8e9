"""A queue and its consumers, sans-IO: which message goes to which consumer, and when.

A message is in exactly one place at a time: waiting in the queue, or in flight to one
consumer until that consumer acknowledges it (it leaves) or gives it back (a nack, or the
consumer closing: it returns to the queue, ahead of newer messages, in its original order).
Every delivery counts: a message's ``delivery_count`` is how many times it was handed out,
so a count above one tells a consumer it is a redelivery.

A consumer receives while it is ready (its connection writable) and has credits: bytes its
client granted (Artemis's consumer window). A delivery may overshoot the credits by one
message, never more. Consumers take turns (round robin). A consumer with a filter skips
the messages it does not match; those wait for another consumer, keeping their order.

Durability is not this module's business: the node persists what these calls report
(acknowledged messages, delivery counts) through the message store.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping

import attrs

from bridge.message import HeaderValue, Message

UNLIMITED = -1

Filter = Callable[[Mapping[str, HeaderValue]], bool]


class QueueError(Exception):
    """An operation named a consumer or delivery the queue does not have."""


@attrs.define
class Entry:
    """A message in a queue, its place in the queue's order, and how many times it has
    been delivered."""

    message: Message
    sequence: int
    delivery_count: int = 0


@attrs.frozen
class Delivery:
    """One message handed to one consumer."""

    consumer_id: int
    delivery_id: int
    message: Message
    delivery_count: int


Sink = Callable[[Delivery], object]


@attrs.define(eq=False)
class Consumer:
    """A consumer's state in its queue."""

    id: int
    sink: Sink
    credits: int | None
    """Bytes it may still receive (below zero after an overshoot); None: no window."""
    filter: Filter | None
    ready: bool = True
    next_delivery_id: int = 1
    in_flight: OrderedDict[int, Entry] = attrs.Factory(OrderedDict)

    def can_take(self) -> bool:
        return self.ready and (self.credits is None or self.credits > 0)

    def wants(self, entry: Entry) -> bool:
        return self.filter is None or self.filter(entry.message.headers)


@attrs.define(eq=False)
class Queue:
    """Messages in order, handed to consumers as their credits and readiness allow."""

    name: str
    address: str
    _waiting: deque[Entry] = attrs.Factory(deque)
    _consumers: dict[int, Consumer] = attrs.Factory(dict)
    _turn: int = 0
    _dispatching: bool = False
    _added: int = 0
    acknowledged_total: int = attrs.field(default=0, init=False)
    """Messages acknowledged, counted when the consumer acknowledges (a transaction that
    then rolls back does not uncount them: a counter only grows)."""
    dropped_total: int = attrs.field(default=0, init=False)
    """Messages a consumer refused without requeue (gone for good)."""

    # -- state --------------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        """Messages not in flight."""
        return len(self._waiting)

    @property
    def in_flight(self) -> int:
        return sum(len(c.in_flight) for c in self._consumers.values())

    @property
    def depth(self) -> int:
        """Messages in the queue: waiting or in flight."""
        return self.waiting + self.in_flight

    @property
    def added_total(self) -> int:
        """Messages added since the node started, those recovered from the store included."""
        return self._added

    @property
    def consumer_ids(self) -> tuple[int, ...]:
        return tuple(self._consumers)

    def browse(self) -> Iterator[Entry]:
        """The waiting messages, oldest first, without taking them."""
        return iter(tuple(self._waiting))

    # -- messages -----------------------------------------------------------------------

    def add(self, message: Message, delivery_count: int = 0) -> None:
        """Append a message (``delivery_count`` above 0 for one recovered after a restart)."""
        self._added += 1
        self._waiting.append(Entry(message, self._added, delivery_count))
        self.dispatch()

    # -- consumers ----------------------------------------------------------------------

    def add_consumer(
        self, consumer_id: int, sink: Sink, credits: int = UNLIMITED, filter: Filter | None = None
    ) -> None:
        """Start delivering to ``sink``, with ``credits`` bytes (UNLIMITED: no window)."""
        if consumer_id in self._consumers:
            raise QueueError(f"queue {self.name!r} already has consumer {consumer_id}")
        if credits < UNLIMITED:
            raise ValueError(f"credits must be -1 (unlimited) or more, got {credits}")
        window = None if credits == UNLIMITED else credits
        self._consumers[consumer_id] = Consumer(consumer_id, sink, window, filter)
        self.dispatch()

    def remove_consumer(self, consumer_id: int) -> list[Entry]:
        """Stop a consumer; what it had in flight returns to the queue's front, in order.

        Returns the returned entries (the node persists their delivery counts)."""
        consumer = self._consumer(consumer_id)
        del self._consumers[consumer_id]
        returned = list(consumer.in_flight.values())
        self._return(returned)
        self.dispatch()
        return returned

    def add_credits(self, consumer_id: int, credits: int) -> None:
        """The consumer's client granted more bytes."""
        if credits < 0:
            raise ValueError(f"credits granted must not be negative, got {credits}")
        consumer = self._consumer(consumer_id)
        if consumer.credits is not None:
            consumer.credits += credits
            self.dispatch()

    def set_ready(self, consumer_id: int, ready: bool) -> None:
        """The consumer's connection became writable (True) or stopped being so."""
        consumer = self._consumer(consumer_id)
        consumer.ready = ready
        if ready:
            self.dispatch()

    # -- acknowledgements ---------------------------------------------------------------

    def acknowledge(
        self, consumer_id: int, delivery_id: int, cumulative: bool = False
    ) -> list[Entry]:
        """Remove acknowledged messages (with ``cumulative``, every delivery of this
        consumer up to ``delivery_id``); returns them, oldest first."""
        consumer = self._consumer(consumer_id)
        if delivery_id not in consumer.in_flight:
            raise QueueError(
                f"consumer {consumer_id} on queue {self.name!r} has no delivery {delivery_id} "
                "in flight"
            )
        if not cumulative:
            self.acknowledged_total += 1
            return [consumer.in_flight.pop(delivery_id)]
        acked = []
        while consumer.in_flight:
            first = next(iter(consumer.in_flight))
            if first > delivery_id:
                break
            acked.append(consumer.in_flight.pop(first))
        self.acknowledged_total += len(acked)
        return acked

    def nack(self, consumer_id: int, delivery_id: int, requeue: bool) -> Entry:
        """Give a delivery back: to the queue's front for redelivery, or drop it."""
        consumer = self._consumer(consumer_id)
        try:
            entry = consumer.in_flight.pop(delivery_id)
        except KeyError:
            raise QueueError(
                f"consumer {consumer_id} on queue {self.name!r} has no delivery {delivery_id} "
                "in flight"
            ) from None
        if requeue:
            self._return([entry])
            self.dispatch()
        else:
            self.dropped_total += 1
        return entry

    def give_back(self, entries: list[Entry]) -> None:
        """Entries acknowledged in a transaction that rolled back: they wait again, in their
        places, for redelivery."""
        self._return(entries)
        self.dispatch()

    # -- dispatch -----------------------------------------------------------------------

    def dispatch(self) -> None:
        """Hand waiting messages to consumers that can take them.

        A sink may call back into the queue (ack, close, credits); such calls update the
        state and the loop here carries on, so dispatch never recurses."""
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._dispatch_one():
                pass
        finally:
            self._dispatching = False

    def _dispatch_one(self) -> bool:
        """Deliver one message (a lone consumer without a filter: as many as it takes);
        False when no waiting message can go anywhere now."""
        if len(self._consumers) == 1:
            (only,) = self._consumers.values()
            if only.filter is None:
                return self._drain(only)
        takers = [c for c in self._consumers.values() if c.can_take()]
        if not takers or not self._waiting:
            return False
        if all(c.filter is None for c in takers):
            return self._deliver(self._next_taker(takers, self._waiting[0]), 0)
        for index, entry in enumerate(self._waiting):
            consumer = self._next_taker(takers, entry)
            if consumer is not None:
                return self._deliver(consumer, index)
        return False

    def _drain(self, consumer: Consumer) -> bool:
        """Hand a queue's only consumer, which takes every message, what it can take in
        order, building nothing per message; stops should its sink add or close a
        consumer, so that the turns go on as usual."""
        consumers = self._consumers
        delivered = False
        # A sink's nack may replace the deque, and its close or open change the consumers.
        while (
            self._waiting
            and consumer.can_take()
            and len(consumers) == 1
            and consumers.get(consumer.id) is consumer
        ):
            self._deliver(consumer, 0)
            delivered = True
        return delivered

    def _next_taker(self, takers: list[Consumer], entry: Entry) -> Consumer | None:
        """The next consumer in turn that takes ``entry``."""
        for offset in range(len(takers)):
            consumer = takers[(self._turn + offset) % len(takers)]
            if consumer.wants(entry):
                self._turn = (self._turn + offset + 1) % len(takers)
                return consumer
        return None

    def _deliver(self, consumer: Consumer | None, index: int) -> bool:
        if consumer is None:
            return False
        if index:
            entry = self._waiting[index]
            del self._waiting[index]
        else:
            entry = self._waiting.popleft()
        entry.delivery_count += 1
        delivery_id = consumer.next_delivery_id
        consumer.next_delivery_id += 1
        consumer.in_flight[delivery_id] = entry
        if consumer.credits is not None:
            consumer.credits -= entry.message.size
        consumer.sink(Delivery(consumer.id, delivery_id, entry.message, entry.delivery_count))
        return True

    def _return(self, entries: list[Entry]) -> None:
        """Put entries back where they were: the queue stays in the order messages arrived
        (a merge of two ordered runs, which sorting does in one pass)."""
        if entries:
            merged = sorted([*entries, *self._waiting], key=lambda entry: entry.sequence)
            self._waiting = deque(merged)

    def _consumer(self, consumer_id: int) -> Consumer:
        try:
            return self._consumers[consumer_id]
        except KeyError:
            raise QueueError(f"queue {self.name!r} has no consumer {consumer_id}") from None
