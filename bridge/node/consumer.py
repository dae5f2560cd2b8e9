"""A connection's consumer on one queue, sans-IO, for every head.

A consumer takes messages while its connection is writable and it has room: bytes of
credit its client granted (core's window, counted by its queue) or fewer unacknowledged
messages than its prefetch (STOMP). It tells its head what to send through
:class:`IConsumerListener`; the head only encodes frames. A large message's body is
streamed (``streams``, core) a chunk at a time while the connection is writable and the
consumer has credit, the consumer taking nothing else meanwhile; a head that streams
bodies itself (STOMP) is handed the message whole.

Acknowledgements go through it too: individual or cumulative, in a transaction or not,
and NACKs (back to the queue, or refused); a consumer that counts its unacknowledged
deliveries (``counts_unacked``: a STOMP client-acknowledged subscription) forgets them as
they are settled and takes messages again as its prefetch frees. An ``ack:auto``
consumer's deliveries are acknowledged by :class:`AutoAcks` at the end of the turn, one
cumulative acknowledgement per consumer.

A browse-only consumer (core) is not a consumer of its queue: it walks a snapshot of the
queue, with a window of its own, and settles nothing.

Its states: OPEN (taking messages as its room allows), STREAMING (a large delivery's
chunks going out, nothing else taken), CLOSED; ``streaming`` and ``closed`` say which.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import attrs
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Attribute, Interface

from bridge.message import LargeBody, Message
from bridge.node.bodies import BodySource
from bridge.node.broker import Broker, NotStored, Transaction
from bridge.node.queue import UNLIMITED, Claim, Delivery, Entry, QueueError

log = Logger()

T = TypeVar("T")


class IConsumerListener(Interface):
    """What a head does for its consumers: turn what they deliver into frames."""

    def deliver(consumer: Consumer[Any], delivery_id: int, count: int, message: Message) -> None:
        """Send ``message`` (delivered ``count`` times) as delivery ``delivery_id``; a
        large one whole (the head streams its body), unless the consumer streams it."""


class IStreamListener(IConsumerListener):
    """A head whose consumers stream large bodies to it a chunk at a time (core)."""

    def begin_large(
        consumer: Consumer[Any], delivery_id: int, count: int, header: Message, size: int
    ) -> None:
        """A streamed large delivery starts: its message without the body, and the body's
        size; its chunks follow."""

    chunk_size = Attribute("The most body bytes the head takes per chunk.")

    def chunk(consumer: Consumer[Any], delivery_id: int, data: bytes, last: bool) -> None:
        """The next chunk of a streamed large delivery's body."""

    def stream_failed(consumer: Consumer[Any], delivery_id: int) -> None:
        """The body of a streamed large delivery could not be read to its end (its file is
        short): the head ends the connection."""


@attrs.define(eq=False)
class _Stream:
    """A large delivery between its beginning and its last chunk."""

    streamer: IStreamListener
    delivery_id: int
    source: BodySource


class Consumer(Generic[T]):
    """One consumer of a connection; ``tag`` is the head's name for it."""

    def __init__(
        self,
        broker: Broker,
        queue: str,
        listener: IConsumerListener,
        tag: T,
        *,
        streamer: IStreamListener | None = None,
        writable: bool = True,
        is_writable: Callable[[], bool] | None = None,
        window: int = UNLIMITED,
        prefetch: int | None = None,
        counts_unacked: bool = False,
        auto_acks: AutoAcks | None = None,
    ) -> None:
        """``streamer``: where large bodies go a chunk at a time (None: whole, through
        ``listener``); ``window``: bytes of credit (UNLIMITED: none counted); ``prefetch``:
        unacknowledged deliveries at most (with ``counts_unacked``); ``is_writable``: the
        connection's writability now, read between chunks (default: ``writable``, as the
        head last said)."""
        self.broker = broker
        self.queue = queue
        self.tag = tag
        self.id = broker.next_consumer_id()
        self.writable = writable
        self.closed = False
        self.active = False
        """Consuming from its queue (or, browsing, walking its snapshot)."""
        self.unacked: dict[int, int] | None = {} if counts_unacked else None
        """Delivery id -> message id of what awaits acknowledgement, oldest first."""
        self._listener = listener
        self._is_writable = is_writable or self._writable
        self._window = window
        self._prefetch = prefetch
        self._auto_acks = auto_acks
        self.auto_acked = 0
        """The last delivery of an ``ack:auto`` consumer, acknowledged at the end of the
        turn (0: none waiting)."""
        self._streamer = streamer
        self._stream: _Stream | None = None
        self._ready = True
        self._browse: Iterator[Entry] | None = None
        self._credits: int | None = None
        """A browsing consumer's credit (a consuming one's lives in its queue)."""
        self._next_delivery_id = 1

    def _writable(self) -> bool:
        return self.writable

    @property
    def streaming(self) -> bool:
        return self._stream is not None

    @property
    def browsing(self) -> bool:
        return self._browse is not None

    # -- starting -------------------------------------------------------------------------

    def start(
        self,
        filter: str | None = None,
        *,
        claim: Sequence[int] = (),
        claimed: Callable[[Claim], object] | None = None,
    ) -> None:
        """Consume from the queue: messages come as the consumer's room allows. With
        ``claimed``, the messages of ``claim`` (ids a reconnected client still holds)
        that wait on the queue become its deliveries first, and ``claimed`` hears which
        before anything else is delivered (``Queue.claim``)."""
        self.active = True
        self.broker.consume(
            self.queue,
            self.id,
            self._take,
            credits=self._window,
            filter=filter,
            held=claimed is not None,
            auto_ack=self._auto_acks is not None,
        )
        if claimed is not None:
            queue = self.broker.queue(self.queue)
            answer = queue.claim(self.id, claim)
            if self.unacked is not None:
                self.unacked.update((d, m) for m, d in answer.claimed)
            claimed(answer)
            queue.hold(self.id, False)
        self._update_ready()

    def browse(self, entries: Iterator[Entry]) -> None:
        """Deliver ``entries`` (a snapshot of the queue) as the window and writability
        allow, taking none of them."""
        self.active = True
        self._browse = entries
        self._credits = None if self._window == UNLIMITED else self._window
        self._walk()

    # -- room -----------------------------------------------------------------------------

    def writability_changed(self, writable: bool) -> None:
        """Deliveries stop while the connection is not writable and go on once it is."""
        self.writable = writable
        if writable and self._stream is not None:
            self._pump()
        if self._browse is None:
            self._update_ready()
        elif writable:
            self._walk()

    def add_credits(self, credits: int) -> None:
        """The client granted ``credits`` bytes more."""
        if self._browse is None:
            self.broker.queue(self.queue).add_credits(self.id, credits)
        elif self._credits is not None:
            self._credits += credits
        if self._stream is not None:
            self._pump()
        if self._browse is not None:
            self._walk()

    def _update_ready(self) -> None:
        """Tell the queue whether to deliver: while writable, and (with a prefetch) while
        fewer deliveries than it await acknowledgement."""
        if not self.active or self._browse is not None:
            return
        unacked, prefetch = self.unacked, self._prefetch
        ready = self.writable and (prefetch is None or unacked is None or len(unacked) < prefetch)
        if ready is not self._ready:
            self._ready = ready
            self.broker.queue(self.queue).set_ready(self.id, ready)

    # -- delivering -----------------------------------------------------------------------

    def _take(self, delivery: Delivery) -> None:
        """The queue's sink: one delivery."""
        delivery_id = delivery.delivery_id
        unacked = self.unacked
        if unacked is not None:
            unacked[delivery_id] = delivery.message.id
            prefetch = self._prefetch
            if prefetch is not None and len(unacked) >= prefetch:
                self._update_ready()
        elif self._auto_acks is not None:
            if not self.auto_acked:  # the first since the last acknowledgement: one call a turn
                self._auto_acks.waiting(self)
            self.auto_acked = delivery_id
        message = delivery.message
        if message.large is None or self._streamer is None:  # (the hot path: one call less)
            self._listener.deliver(self, delivery_id, delivery.delivery_count, message)
        else:
            self._send(delivery_id, delivery.delivery_count, message)

    def _send(self, delivery_id: int, count: int, message: Message) -> None:
        large = message.large
        streamer = self._streamer
        if large is not None and streamer is not None:
            self._start_stream(streamer, delivery_id, count, message, large)
        else:
            self._listener.deliver(self, delivery_id, count, message)

    def _start_stream(
        self,
        streamer: IStreamListener,
        delivery_id: int,
        count: int,
        message: Message,
        body: LargeBody,
    ) -> None:
        self._stream = _Stream(streamer, delivery_id, BodySource(self.broker, body))
        header = attrs.evolve(message, large=None)
        streamer.begin_large(self, delivery_id, count, header, body.size)
        if self._browse is None:
            self.broker.queue(self.queue).hold(self.id, True)
        self._pump()

    def _pump(self) -> None:
        """Send a large delivery's next chunks while the connection is writable and the
        consumer has credit; when the last is out, the consumer takes messages again."""
        stream = self._stream
        assert stream is not None
        queue = None if self._browse is not None else self.broker.queue(self.queue)
        while self._is_writable() and self._has_credit():
            source = stream.source
            try:
                data = source.read(stream.streamer.chunk_size)
            except OSError:
                self._end_stream()
                stream.streamer.stream_failed(self, stream.delivery_id)
                return
            last = source.remaining == 0
            stream.streamer.chunk(self, stream.delivery_id, data, last)
            if queue is not None:
                queue.spend(self.id, len(data))
            elif self._credits is not None:
                self._credits -= len(data)
            if last:
                self._end_stream()
                if queue is not None:
                    queue.hold(self.id, False)
                else:
                    self._walk()
                return

    def _has_credit(self) -> bool:
        if self._browse is None:
            return self.broker.queue(self.queue).has_credit(self.id)
        return self._credits is None or self._credits > 0

    def _end_stream(self) -> None:
        if self._stream is not None:
            self._stream.source.close()
            self._stream = None

    def _walk(self) -> None:
        """Deliver the browsed snapshot while there is credit and the connection is
        writable; it goes on when either returns."""
        entries = self._browse
        assert entries is not None
        while (
            self._stream is None
            and self.writable
            and (self._credits is None or self._credits > 0)
            and not self.closed
        ):
            entry = next(entries, None)
            if entry is None:
                return
            delivery_id = self._next_delivery_id
            self._next_delivery_id += 1
            if self._credits is not None:
                self._credits -= entry.message.size
            self._send(delivery_id, entry.delivery_count, entry.message)

    # -- settling -------------------------------------------------------------------------

    def acknowledge(
        self, delivery_id: int, *, cumulative: bool = False, tx: Transaction | None = None
    ) -> Deferred[None]:
        """Acknowledge delivery ``delivery_id`` (and, ``cumulative``, every earlier one);
        fires once stored. ``QueueError`` if it is not awaiting acknowledgement."""
        return self.broker.acknowledge(
            self.queue, self.id, delivery_id, cumulative=cumulative, tx=tx
        )

    def nack(self, delivery_id: int, *, requeue: bool) -> Deferred[None]:
        """Give a delivery back for redelivery, or refuse it; ``QueueError`` if it is not
        awaiting acknowledgement."""
        return self.broker.nack(self.queue, self.id, delivery_id, requeue=requeue)

    def refuse(self, delivery_ids: list[int], *, requeue: bool) -> list[int]:
        """NACK each of ``delivery_ids`` still awaiting acknowledgement (the others were
        settled since): back to the queue for redelivery, or refused (``requeue`` False).
        Returns those, for the head to settle once they are back in the queue (so that a
        prefetch slot one frees takes it again first)."""
        unacked = self.unacked or {}
        pending = [delivery_id for delivery_id in delivery_ids if delivery_id in unacked]
        for delivery_id in pending:
            try:
                done = self.nack(delivery_id, requeue=requeue)
            except QueueError:
                continue
            done.addErrback(settle_failed)
        return pending

    def settled(self, delivery_ids: list[int]) -> list[int]:
        """Forget counted deliveries the client settled, and take messages again if that
        frees the prefetch: their message ids, in order."""
        unacked = self.unacked
        assert unacked is not None
        message_ids = [unacked.pop(delivery_id) for delivery_id in delivery_ids]
        self._update_ready()
        return message_ids

    # -- closing --------------------------------------------------------------------------

    def close(self) -> Deferred[None]:
        """Stop: what awaits acknowledgement returns to the queue (fires once its delivery
        counts are stored). A browsing consumer, or one whose queue has gone, only
        stops."""
        self.closed = True
        self._end_stream()
        if self._auto_acks is not None:
            self._auto_acks.flush_one(self)
        if not self.active or self._browse is not None or self.queue not in self.broker.queues:
            return succeed(None)
        self.active = False
        return self.broker.close_consumer(self.queue, self.id)


class AutoAcks:
    """The deliveries of one connection's ``ack:auto`` consumers, acknowledged at the end
    of the turn: one cumulative acknowledgement per consumer, not one per message."""

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._call: IDelayedCall | None = None
        self._consumers: list[Consumer[Any]] = []

    def waiting(self, consumer: Consumer[T]) -> None:
        """``consumer`` has deliveries to acknowledge (it was sent one since its last
        acknowledgement; it keeps the id of the latest in ``auto_acked``)."""
        self._consumers.append(consumer)
        if self._call is None:
            self._call = self._clock.callLater(0, self.flush)

    def flush(self) -> None:
        """Acknowledge what every consumer was sent so far."""
        self._call = None
        consumers, self._consumers = self._consumers, []
        for consumer in consumers:
            self.flush_one(consumer)

    @staticmethod
    def flush_one(consumer: Consumer[T]) -> None:
        """Acknowledge what ``consumer`` was sent so far (a consumer that has gone, its
        messages returned, acknowledges nothing)."""
        last, consumer.auto_acked = consumer.auto_acked, 0
        if not last:
            return
        try:
            done = consumer.acknowledge(last, cumulative=True)
        except QueueError:
            return
        done.addErrback(settle_failed)

    def close(self) -> None:
        """The connection is gone: acknowledge what was sent, and nothing more."""
        call = self._call
        self.flush()
        if call is not None and call.active():
            call.cancel()


def settle_failed(failure: Failure) -> None:
    """An acknowledgement or NACK whose store write failed, sent without a request to
    answer: logged (``NotStored``: the broker put the message back and logged why)."""
    if not failure.check(NotStored):
        log.failure("storing an acknowledgement failed", failure)
