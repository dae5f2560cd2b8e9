"""Large bodies streamed through the store, for every head: a send's body written to the
large-message store a chunk at a time as it arrives, and a large message's body read
back a chunk at a time as it is delivered, so that neither is ever whole in memory (core
SEND_LARGE and DELIVER_LARGE chunks; STOMP SEND and MESSAGE frames with streamed bodies).

A :class:`BodySink` owns its body until ``finish`` hands it over as the message's
``LargeBody`` (the broker's from then on: deleted when no queue needs it), or ``discard``
drops it (a refused or interrupted send). No head opens a body's file itself: the store
hands out these handles (``Broker.new_body``, ``Broker.open_body``).
"""

from __future__ import annotations

from typing import IO

from bridge.message import LargeBody
from bridge.node.broker import Broker
from bridge.store.interfaces import IBodyWriter

CHUNK_SIZE = 1024 * 1024
"""Bytes of a large body read per chunk delivered unless the head asks for others (a STOMP
body's per write to the connection; the core head asks for its DELIVER_LARGE_CHUNK's). As
the core chunks: each chunk costs a file read, a socket send and a reactor turn, and the
kernel's loopback send costs a third less per byte in 1 MiB sends than in 256 KiB ones."""


class BodySink:
    """A streamed body being written to the large-message store as it arrives."""

    def __init__(self, broker: Broker, message_id: int, size: int) -> None:
        self.message_id = message_id
        self.size = size
        self.received = 0
        self._body: IBodyWriter | None = broker.new_body(self.message_id)

    @property
    def name(self) -> str:
        """Where the body is being written, for messages."""
        return self._body.name if self._body is not None else "its store"

    def write(self, data: bytes | memoryview) -> None:
        assert self._body is not None
        self._body.write(data)
        self.received += len(data)

    def finish(self) -> LargeBody:
        """The whole body, as the message's ``LargeBody``; it is no longer ours."""
        assert self._body is not None and self.received == self.size
        body, self._body = self._body, None
        return body.finish()

    def discard(self) -> None:
        """The send will not be published: its partial body goes."""
        if self._body is not None:
            body, self._body = self._body, None
            body.abort()


class BodySource:
    """A large message's body, read from its file a chunk at a time. The file is opened
    at once, so the body stays readable should the message be acknowledged (and its file
    deleted) while it is still being sent."""

    def __init__(self, broker: Broker, body: LargeBody) -> None:
        self.remaining = body.size
        self._broker = broker
        self._file: IO[bytes] = broker.open_body(body)  # open until the end

    def read(self, size: int = CHUNK_SIZE) -> bytes:
        """The next chunk (``size`` bytes, or what remains); OSError if the file ends
        before the body does."""
        want = min(size, self.remaining)
        data = self._file.read(want)
        if len(data) < want:
            raise OSError(f"the body file {self._file.name!r} is short")
        self.remaining -= len(data)
        return data

    def close(self) -> None:
        """Done reading: the file is closed, and deleted now if the message was
        acknowledged (its body discarded) meanwhile."""
        self._broker.close_body(self._file)
