"""What a core session sends, in order: its packets, and its consumers' deliveries
encoded as DELIVER, DELIVER_MANY and large deliveries.

Deliveries of one consumer with consecutive ids and one delivery count are gathered into
one DELIVER_MANY (a run, up to the client's frame size), sent before any other packet and
at the end of the turn (``before_flush``; without it, each delivery goes at once). A
body from ``MIN_LARGE_MESSAGE_SIZE`` on goes as DELIVER_LARGE_BEGIN and its chunks: cut
from memory, or streamed from the store by the consumer (``IStreamListener``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from zope.interface import implementer

from bridge.message import Message
from bridge.node.consumer import Consumer, IStreamListener
from bridge.protocol import packets as p

MIN_LARGE_MESSAGE_SIZE = 100 * 1024
"""Bodies of this many bytes or more are delivered in chunks (Artemis's
``min-large-message-size`` default), fixed until the node has that setting."""


Emit = Callable[[p.Packet], None]
BeforeFlush = Callable[[Callable[[], None]], None]
"""Asks the connection to call something at the end of the turn, before it writes."""


@implementer(IStreamListener)
class Outbox:
    """One core connection's outgoing packets, deliveries gathered into runs."""

    def __init__(
        self, emit: Emit, abort: Callable[[str], None], before_flush: BeforeFlush | None
    ) -> None:
        self._emit_packet = emit
        self._abort = abort
        self._before_flush = before_flush
        self._run: list[Message] = []
        """Deliveries gathered for one DELIVER_MANY: consecutive ids of one consumer with
        one delivery count (``_run_key``)."""
        self._run_key = (0, 0, 0)
        self._run_bytes = 0
        self.run_limit = 0
        """Bytes a run may hold (set from the client's frame size at CONNECT)."""
        self.chunk_size = p.LARGE_CHUNK_SIZE
        """Body bytes per DELIVER_LARGE_CHUNK (set from the client's frame size at
        CONNECT), whether cut from memory or read from the store."""

    def emit(self, packet: p.Packet) -> None:
        """Send ``packet`` after the deliveries gathered before it."""
        if self._run:
            self._flush_run()
        self._emit_packet(packet)

    def close(self) -> None:
        """The connection is gone: what was gathered is not sent."""
        self._run = []

    # -- what the consumers tell -----------------------------------------------------------

    def deliver(
        self, consumer: Consumer[int], delivery_id: int, count: int, message: Message
    ) -> None:
        consumer_id = consumer.tag
        if len(message.body) < MIN_LARGE_MESSAGE_SIZE:
            self._deliver_in_run(consumer_id, delivery_id, count, message)
            return
        body = memoryview(message.body)
        header = attrs.evolve(message, body=b"")
        self.emit(p.DeliverLargeBegin(consumer_id, delivery_id, count, header, len(body)))
        step = self.chunk_size
        for start in range(0, len(body), step):
            end = start + step
            chunk = bytes(body[start:end])
            self.emit(p.DeliverLargeChunk(consumer_id, delivery_id, chunk, end >= len(body)))

    def begin_large(
        self, consumer: Consumer[int], delivery_id: int, count: int, header: Message, size: int
    ) -> None:
        self.emit(p.DeliverLargeBegin(consumer.tag, delivery_id, count, header, size))

    def chunk(self, consumer: Consumer[int], delivery_id: int, data: bytes, last: bool) -> None:
        self.emit(p.DeliverLargeChunk(consumer.tag, delivery_id, data, last))

    def stream_failed(self, consumer: Consumer[Any], delivery_id: int) -> None:
        self._abort(f"the body file of large delivery {delivery_id} is short")

    # -- runs --------------------------------------------------------------------------------

    def _deliver_in_run(
        self, consumer_id: int, delivery_id: int, count: int, message: Message
    ) -> None:
        """Add a delivery to the run it continues, or start a new run with it."""
        run = self._run
        cost = message.size + 4  # each message of a DELIVER_MANY has its u32 length
        if run:
            first_consumer, first_id, first_count = self._run_key
            if (
                consumer_id == first_consumer
                and count == first_count
                and delivery_id == first_id + len(run)
                and self._run_bytes + cost <= self.run_limit
            ):
                run.append(message)
                self._run_bytes += cost
                return
            self._flush_run()
        if self._before_flush is None:
            self._emit_packet(p.Deliver(consumer_id, delivery_id, count, message))
            return
        self._run = [message]
        self._run_key = (consumer_id, delivery_id, count)
        self._run_bytes = cost
        self._before_flush(self._flush_run)

    def _flush_run(self) -> None:
        """Send the gathered deliveries: one DELIVER, or a DELIVER_MANY."""
        run = self._run
        if not run:
            return
        self._run = []
        consumer_id, first_id, count = self._run_key
        if len(run) == 1:
            self._emit_packet(p.Deliver(consumer_id, first_id, count, run[0]))
        else:
            self._emit_packet(p.DeliverMany(consumer_id, first_id, count, tuple(run)))
