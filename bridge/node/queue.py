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

A queue whose address pages keeps a paged message's place (an entry with a stub of the
message) and reads bodies back in order as consumers catch up: when fewer loaded messages
wait than half the last read-back, it asks its ``pager`` for the next ``PAGE_IN_BYTES``
of paged entries, and nothing is delivered past a paged entry until it is back. The
bytes of the messages it holds in memory count in its address's ``AddressMemory``.

A queue with ``max_deliveries`` (the address's ``max-delivery-attempts``) does not take
back a message handed out that many times (given back by a NACK, a closing consumer or a
rolled-back acknowledgement): it lets go of it and hands it to ``dead_letter``, which
moves it to the dead-letter address or drops it (a large message stays: its body file is
not moved).

Durability is not this module's business: the node persists what these calls report
(acknowledged messages, delivery counts) through the message store.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence

import attrs

from bridge.config.node import AddressFullPolicy
from bridge.message import HeaderValue, Message
from bridge.node.memory import AddressMemory, NodeMemory

UNLIMITED = -1

IN_MEMORY, STORED, TRANSIENT = 0, 1, 2
"""Where an entry's message is: in memory; paged, in the store's durable messages; paged,
in the store's transient pages."""

PAGE_IN_BYTES = 1024 * 1024
"""How much a queue reads back from its pages at a time."""

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
    paged: int = IN_MEMORY
    """IN_MEMORY, or where the message is while the entry holds only its stub."""
    size: int = 0
    """A paged entry's message size (its stub's is not the message's)."""


@attrs.define(eq=False)
class Delivery:
    """One message handed to one consumer. (Not frozen, and compared by identity: one is
    made for every message delivered, and a frozen class's ``__init__`` costs three
    times as much. Nothing changes one once made.)"""

    consumer_id: int
    delivery_id: int
    message: Message
    delivery_count: int


@attrs.frozen
class Claim:
    """What a consumer claimed (``Queue.claim``): ``claimed`` (message id, delivery id)
    pairs in the order asked, and the ids ``unclaimed``, not waiting on the queue."""

    claimed: tuple[tuple[int, int], ...]
    unclaimed: tuple[int, ...]


Sink = Callable[[Delivery], object]
Pager = Callable[["Queue", list[Entry]], None]
"""Reads paged entries' messages back, then calls ``Queue.paged_in`` (or
``Queue.page_in_failed``)."""
DeadLetter = Callable[["Queue", list[Entry]], object]
"""Takes entries delivered ``max_deliveries`` times, which the queue let go of."""


def _unlimited() -> AddressMemory:
    return AddressMemory("", UNLIMITED, AddressFullPolicy.PAGE, NodeMemory())


@attrs.define(eq=False)
class Consumer:
    """A consumer's state in its queue."""

    id: int
    sink: Sink
    credits: int | None
    """Bytes it may still receive (below zero after an overshoot); None: no window."""
    filter: Filter | None
    ready: bool = True
    held: bool = False
    """Its head is streaming a large delivery: nothing more until it is done."""
    auto_ack: bool = False
    """Acknowledges what it is handed as it is handed (STOMP ``ack:auto``)."""
    forwards: bool = False
    """A core bridge: acknowledges what it is handed once its target confirmed it."""
    next_delivery_id: int = 1
    in_flight: OrderedDict[int, Entry] = attrs.Factory(OrderedDict)

    def can_take(self) -> bool:
        return self.ready and not self.held and (self.credits is None or self.credits > 0)

    def wants(self, entry: Entry) -> bool:
        return self.filter is None or self.filter(entry.message.headers)


@attrs.define(eq=False)
class Queue:
    """Messages in order, handed to consumers as their credits and readiness allow."""

    name: str
    address: str
    memory: AddressMemory = attrs.Factory(_unlimited)
    pager: Pager | None = None
    max_deliveries: int = UNLIMITED
    dead_letter: DeadLetter | None = None
    _waiting: deque[Entry] = attrs.Factory(deque)
    _paged: deque[Entry] = attrs.Factory(deque)
    _loading: bool = False
    _last_page_in: int = 0
    _consumers: dict[int, Consumer] = attrs.Factory(dict)
    _acking: int = 0
    """Consumers that acknowledge what they were handed later, if at all (not auto_ack)."""
    _forwarding: int = 0
    """Consumers that are core bridges (``forwards``)."""
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
        """Messages not in flight, paged ones included."""
        return len(self._waiting) + len(self._paged)

    @property
    def paged(self) -> int:
        """Messages whose bodies are in the store until they are read back."""
        return len(self._paged)

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

    @property
    def consumed_when_delivered(self) -> bool:
        """Whether it has consumers and every one acknowledges what it is handed as it is
        handed (``auto_ack``): nothing it delivers waits for an acknowledgement."""
        return not self._acking and bool(self._consumers)

    def forwards(self, message_id: int) -> bool:
        """Whether only core bridges consume it and ``message_id`` does not wait on it: it
        is in flight to a bridge (or gone), and leaves once that bridge's target confirmed
        it. What waits is the newest, so a message older than the oldest waiting one does
        not; one given back waits at the front, older than those behind it."""
        consumers = len(self._consumers)
        if not consumers or self._forwarding != consumers or self._paged:
            return False
        waiting = self._waiting
        return not waiting or message_id < waiting[0].message.id

    def browse(self) -> Iterator[Entry]:
        """The waiting messages in memory, oldest first, without taking them (paged ones
        are not read back for a browser)."""
        return iter(tuple(self._waiting))

    # -- messages -----------------------------------------------------------------------

    def add(self, message: Message, delivery_count: int = 0) -> None:
        """Append a message (``delivery_count`` above 0 for one recovered after a restart)."""
        self._added += 1
        waiting = self._waiting
        waiting.append(Entry(message, self._added, delivery_count))
        self.memory.add(message.size)
        consumers = self._consumers
        if len(waiting) == 1 and len(consumers) == 1 and not self._dispatching:
            # (the hot path: a lone consumer that takes everything and can take this one
            # now gets it without the loops of ``dispatch``, which go on from here after
            # a sink that called back into the queue)
            (only,) = consumers.values()
            if only.filter is None and only.can_take() and not self._paged:
                self._dispatching = True
                try:
                    self._deliver(only, 0)
                finally:
                    self._dispatching = False
                if not self._waiting and not self._paged:  # (a sink's nack replaces it)
                    return
        self.dispatch()

    def add_paged(self, stub: Message, where: int, size: int, delivery_count: int = 0) -> None:
        """Append a paged message: ``stub`` keeps its place, ``where`` (STORED or TRANSIENT)
        says where the store has it, ``size`` is its real size. The address counted it as
        paged already (``AddressMemory.paged``)."""
        self._added += 1
        self._paged.append(Entry(stub, self._added, delivery_count, where, size))
        self.dispatch()

    def paged_in(self, entries: list[Entry], messages: Mapping[int, Message]) -> list[Entry]:
        """The pager read ``entries`` back: they wait in memory now, in their places.
        Returns those taken (not those of a queue emptied meanwhile)."""
        self._loading = False
        paged, memory = self._paged, self.memory
        loaded = []
        for entry in entries:
            if not paged or paged[0] is not entry:
                break  # the queue was emptied meanwhile
            paged.popleft()
            message = messages[entry.message.id]
            memory.unpaged(entry.size)
            memory.add(message.size)
            entry.message, entry.paged = message, IN_MEMORY
            loaded.append(entry)
        waiting = self._waiting
        if waiting and loaded and waiting[-1].sequence > loaded[0].sequence:
            self._return(loaded)
        else:
            waiting.extend(loaded)
        self.dispatch()
        return loaded

    def page_in_failed(self) -> None:
        """The pager could not read back: the next dispatch tries again."""
        self._loading = False

    def clear(self) -> list[Entry]:
        """Empty the queue (it is being deleted): every entry, its memory released."""
        entries = [*self._waiting, *self._paged]
        for consumer in self._consumers.values():
            entries += consumer.in_flight.values()
            consumer.in_flight.clear()
        self._waiting, self._paged = deque(), deque()
        memory = self.memory
        for entry in entries:
            if entry.paged:
                memory.unpaged(entry.size)
            else:
                memory.release(entry.message.size)
        return entries

    # -- consumers ----------------------------------------------------------------------

    def add_consumer(
        self,
        consumer_id: int,
        sink: Sink,
        credits: int = UNLIMITED,
        filter: Filter | None = None,
        *,
        held: bool = False,
        auto_ack: bool = False,
        forwards: bool = False,
    ) -> None:
        """Start delivering to ``sink``, with ``credits`` bytes (UNLIMITED: no window);
        ``held``: not before ``hold(consumer_id, False)`` (it claims messages first);
        ``auto_ack``: it acknowledges each delivery as it is handed it; ``forwards``: it
        is a core bridge, which acknowledges once its target confirmed."""
        if consumer_id in self._consumers:
            raise QueueError(f"queue {self.name!r} already has consumer {consumer_id}")
        if credits < UNLIMITED:
            raise ValueError(f"credits must be -1 (unlimited) or more, got {credits}")
        window = None if credits == UNLIMITED else credits
        self._consumers[consumer_id] = Consumer(
            consumer_id, sink, window, filter, held=held, auto_ack=auto_ack, forwards=forwards
        )
        if not auto_ack:
            self._acking += 1
        if forwards:
            self._forwarding += 1
        self.dispatch()

    def claim(self, consumer_id: int, message_ids: Sequence[int]) -> Claim:
        """Messages a reconnected client still holds become deliveries of its consumer:
        those of ``message_ids`` waiting in memory (and matching its filter) go in flight
        to it without being handed out again, so their delivery counts stay (at least 1:
        the client saw them), each spending its size of the consumer's credit. One pass
        over the waiting messages, however many ids; a repeated id counts once."""
        consumer = self._consumer(consumer_id)
        wanted = dict.fromkeys(message_ids)
        found: dict[int, Entry] = {}
        if wanted:
            kept: deque[Entry] = deque()
            for entry in self._waiting:
                message_id = entry.message.id
                if message_id in wanted and message_id not in found and consumer.wants(entry):
                    found[message_id] = entry
                else:
                    kept.append(entry)
            if found:
                self._waiting = kept
        claimed: list[tuple[int, int]] = []
        unclaimed: list[int] = []
        for message_id in wanted:
            taken = found.get(message_id)
            if taken is None:
                unclaimed.append(message_id)
                continue
            taken.delivery_count = max(taken.delivery_count, 1)
            delivery_id = consumer.next_delivery_id
            consumer.next_delivery_id += 1
            consumer.in_flight[delivery_id] = taken
            if consumer.credits is not None:
                consumer.credits -= taken.message.size
            claimed.append((message_id, delivery_id))
        return Claim(tuple(claimed), tuple(unclaimed))

    def remove_consumer(self, consumer_id: int, dead_letters: bool = True) -> list[Entry]:
        """Stop a consumer; what it had in flight returns to the queue's front, in order
        (but for the exhausted, which go to ``dead_letter``, unless ``dead_letters`` is
        False: a bridge giving back what its target did not take, not a consumer failing).

        Returns the returned entries (the node persists their delivery counts)."""
        consumer = self._consumer(consumer_id)
        del self._consumers[consumer_id]
        if not consumer.auto_ack:
            self._acking -= 1
        if consumer.forwards:
            self._forwarding -= 1
        returned = list(consumer.in_flight.values())
        if dead_letters:
            returned = self._take_back(returned)
        else:
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

    def spend(self, consumer_id: int, credits: int) -> bool:
        """The consumer was sent ``credits`` bytes more (a large delivery's chunk): whether
        it has credit left."""
        consumer = self._consumer(consumer_id)
        if consumer.credits is None:
            return True
        consumer.credits -= credits
        return consumer.credits > 0

    def has_credit(self, consumer_id: int) -> bool:
        credits = self._consumer(consumer_id).credits
        return credits is None or credits > 0

    def hold(self, consumer_id: int, held: bool) -> None:
        """Stop delivering to a consumer (True) while its head streams a large delivery,
        or go on (False)."""
        consumer = self._consumer(consumer_id)
        consumer.held = held
        if not held:
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
            entry = consumer.in_flight.pop(delivery_id)
            self.memory.release(entry.message.size)
            return [entry]
        in_flight = consumer.in_flight
        if next(reversed(in_flight)) == delivery_id:
            # Every delivery in flight (an ``ack:auto`` turn's, most cumulative ACKs): at
            # once, not one pop per entry.
            acked = list(in_flight.values())
            in_flight.clear()
        else:
            acked = []
            pop = in_flight.popitem
            while True:
                first, entry = pop(last=False)
                acked.append(entry)
                if first == delivery_id:
                    break
        self.acknowledged_total += len(acked)
        self.memory.release(sum([entry.message.size for entry in acked]))
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
            self._take_back([entry])
            self.dispatch()
        else:
            self.dropped_total += 1
            self.memory.release(entry.message.size)
        return entry

    def give_back(self, entries: list[Entry]) -> list[Entry]:
        """Entries acknowledged in a transaction that rolled back: they wait again, in their
        places, for redelivery (but for the exhausted). Returns those waiting again."""
        self.memory.add(sum(entry.message.size for entry in entries))
        kept = self._take_back(entries)
        self.dispatch()
        return kept

    def exhausted(self, entry: Entry) -> bool:
        """Whether ``entry`` was delivered ``max_deliveries`` times: given back, it goes
        to the dead letters (not a large message: it stays)."""
        limit = self.max_deliveries
        return limit != UNLIMITED and entry.delivery_count >= limit and entry.message.large is None

    def _take_back(self, entries: list[Entry]) -> list[Entry]:
        """Return given-back entries to their places, but for the exhausted, which leave
        for ``dead_letter``; returns those returned."""
        if self.max_deliveries == UNLIMITED:
            self._return(entries)
            return entries
        kept = [entry for entry in entries if not self.exhausted(entry)]
        if len(kept) < len(entries):
            gone = [entry for entry in entries if self.exhausted(entry)]
            self.memory.release(sum(entry.message.size for entry in gone))
            if self.dead_letter is not None:
                self.dead_letter(self, gone)
        self._return(kept)
        return kept

    # -- dispatch -----------------------------------------------------------------------

    def dispatch(self) -> None:
        """Hand waiting messages to consumers that can take them.

        A sink may call back into the queue (ack, close, credits); such calls update the
        state and the loop here carries on, so dispatch never recurses."""
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._waiting and self._dispatch_one():  # (nothing waits: nothing to do)
                pass
        finally:
            self._dispatching = False
        if self._paged and not self._loading and self._consumers and self.pager is not None:
            self._page_in(self.pager)

    def _page_in(self, pager: Pager) -> None:
        """Ask for the next paged entries when the loaded ones run low."""
        waiting = self._waiting
        ahead = len(waiting) if waiting and not self._behind_page(waiting[0]) else 0
        if ahead > self._last_page_in // 2:
            return
        batch: list[Entry] = []
        size = 0
        for entry in self._paged:
            if batch and size + entry.size > PAGE_IN_BYTES:
                break
            batch.append(entry)
            size += entry.size
        self._loading = True
        self._last_page_in = len(batch)
        pager(self, batch)

    def _behind_page(self, entry: Entry) -> bool:
        """Whether a paged message comes before ``entry`` (it must be read back first)."""
        paged = self._paged
        return bool(paged) and paged[0].sequence < entry.sequence

    def _dispatch_one(self) -> bool:
        """Deliver one message (a lone consumer without a filter: as many as it takes);
        False when no waiting message can go anywhere now."""
        if len(self._consumers) == 1:
            (only,) = self._consumers.values()
            if only.filter is None:
                return self._drain(only)
        takers = [c for c in self._consumers.values() if c.can_take()]
        if not takers or not self._waiting or self._behind_page(self._waiting[0]):
            return False
        if all(c.filter is None for c in takers):
            return self._deliver(self._next_taker(takers, self._waiting[0]), 0)
        for index, entry in enumerate(self._waiting):
            if self._behind_page(entry):
                return False
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
            and not (self._paged and self._behind_page(self._waiting[0]))
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
