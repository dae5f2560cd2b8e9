"""A send whose body arrives in chunks after its header, for every head (core
SEND_LARGE_BEGIN and its chunks; a STOMP SEND whose body is streamed).

The body goes to the store a chunk at a time (``bridge.node.bodies.BodySink``), never
whole in memory and never through a path the head opens. A write that fails (a full
disk, say) drops the partial body at once, giving its room back, and the send goes on
being counted, not kept, until its end says why it is refused. Heads subclass
:class:`LargeSend` with what they answer it by (a sequence, a receipt).
"""

from __future__ import annotations

import attrs
from twisted.logger import Logger

from bridge.message import Message
from bridge.node.bodies import BodySink
from bridge.node.broker import Broker, NodeError, NotStored

log = Logger()


@attrs.define(eq=False)
class LargeSend:
    """One large send between its header and its last chunk."""

    message: Message
    """Its header, with the id its body is stored under."""
    size: int
    """The body's bytes, as the header declared them."""
    received: int = attrs.field(default=0, init=False)
    sink: BodySink | None = attrs.field(default=None, init=False)
    failure: str | None = attrs.field(default=None, init=False)
    """Why its body could not be written, if it could not."""

    def open(self, broker: Broker) -> None:
        """Start writing the body (once the send is allowed)."""
        try:
            self.sink = BodySink(broker, self.message.id, self.size)
        except OSError as error:
            self._not_written(error)

    def write(self, data: bytes | memoryview) -> None:
        """The next chunk: written while the body is open and no longer than declared."""
        self.received += len(data)
        sink = self.sink
        if sink is not None and self.received <= self.size:
            try:
                sink.write(data)
            except OSError as error:
                self._not_written(error)

    def finish(self) -> Message:
        """The message with its whole body, once the last chunk is in. ``NotStored`` if
        the body could not be written; ``NodeError`` if the chunks do not add up to the
        declared size (the body goes)."""
        if self.failure is not None:
            raise NotStored(self.failure)
        sink = self.sink
        if self.received != self.size or sink is None:
            self.discard()
            raise NodeError(f"declared {self.size} bytes but its chunks held {self.received}")
        self.sink = None
        return attrs.evolve(self.message, large=sink.finish())

    def discard(self) -> None:
        """The send will not be published: its partial body goes."""
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.discard()

    def _not_written(self, error: OSError) -> None:
        where = error.filename or (self.sink.name if self.sink is not None else "its store")
        self.discard()
        cause = error.strerror or str(error)
        self.failure = (
            f"large message to {self.message.address!r} not stored: writing its body to "
            f"{where} failed: {cause}"
        )
        log.warn("a large send was refused: {why}", why=self.failure)
