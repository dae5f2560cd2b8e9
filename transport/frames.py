"""The core protocol's framing, sans-IO: frames to bytes, and bytes to frames.

Each frame is a fixed 8-byte header followed by its payload::

    magic "TX" (2 bytes) | version (1) | type (1) | payload length (4, big-endian)

The magic and version catch a peer speaking something else (an HTTP client, an old
release) at the first header rather than after a garbage length. The decoder is fed
whatever bytes arrive and returns every whole frame in them; it checks each header as soon
as it is complete and never allocates for a payload before its bytes have arrived, so a
hostile length costs nothing.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from enum import IntEnum

import attrs

from transport.errors import ProtocolError

MAGIC = b"TX"
VERSION = 1
HEADER = struct.Struct(">2sBBI")
HEADER_SIZE = HEADER.size
DEFAULT_MAX_FRAME_SIZE = 4 * 1024 * 1024
LENGTH_LIMIT = 2**32 - 1
REJOIN_LIMIT = 64 * 1024
"""A read joins what is buffered to it, to decode straight from the whole, only while
fewer bytes than this are buffered (a large frame's payload gathers chunk by chunk)."""


class ControlType(IntEnum):
    """Frame types the transport itself uses; types from 16 up belong to the layer above."""

    PING = 1
    ERROR = 2


FIRST_APPLICATION_TYPE = 16


@attrs.frozen(slots=True)
class Frame:
    """One frame: its type and its payload."""

    type: int
    payload: bytes


def encode(frame_type: int, payload: bytes) -> tuple[bytes, bytes]:
    """Return the header and the payload to write, without joining them."""
    return HEADER.pack(MAGIC, VERSION, frame_type, len(payload)), payload


def encode_frame(frame: Frame) -> bytes:
    """Return a frame as one bytes object (for tests and small control frames)."""
    return b"".join(encode(frame.type, frame.payload))


def _describe(data: bytes) -> str:
    printable = data[:16]
    return repr(printable) + ("..." if len(data) > 16 else "")


class FramingError(ProtocolError):
    """A fault in the stream of frames (``FrameDecoder.feed``). ``frames`` holds the whole
    frames decoded before it, so that nothing valid is lost."""

    def __init__(self, message: str, frames: Sequence[Frame] = ()) -> None:
        super().__init__(message)
        self.frames = tuple(frames)


class FrameDecoder:
    """Turns a byte stream into frames, checking every header.

    ``accepted_types`` lists the frame types the layer above understands (the control
    types are always accepted); any other type is a protocol error.
    """

    def __init__(
        self,
        accepted_types: Iterable[int] = (),
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        if not 0 < max_frame_size <= LENGTH_LIMIT:
            raise ValueError(f"max_frame_size must be 1..{LENGTH_LIMIT}, got {max_frame_size}")
        types = frozenset(accepted_types)
        reserved = sorted(t for t in types if not FIRST_APPLICATION_TYPE <= t <= 255)
        if reserved:
            raise ValueError(
                f"frame types {reserved} are not application types "
                f"({FIRST_APPLICATION_TYPE}..255; lower ones belong to the transport)"
            )
        self._types: Collection[int] = types | set(ControlType)
        self._max = max_frame_size
        self._chunks: deque[memoryview] = deque()
        self._size = 0
        self._header: tuple[int, int] | None = None
        self._error: FramingError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that are not yet part of a returned frame."""
        return self._size

    @property
    def missing(self) -> int:
        """Bytes still to come of the frame begun (its header's, while that is partial);
        0 between frames."""
        if self._header is not None:
            return self._header[1] - self._size
        return HEADER_SIZE - self._size if self._size else 0

    @property
    def max_frame_size(self) -> int:
        """The largest payload a header may announce (raised once the peer logged in)."""
        return self._max

    @max_frame_size.setter
    def max_frame_size(self, size: int) -> None:
        if not 0 < size <= LENGTH_LIMIT:
            raise ValueError(f"max_frame_size must be 1..{LENGTH_LIMIT}, got {size}")
        self._max = size

    def discard(self) -> None:
        """Drop what is buffered, at once (the connection is closing): the decoder
        accepts nothing more."""
        self._chunks.clear()
        self._size = 0
        self._header = None
        self._error = FramingError("the connection is closing")

    def feed(self, data: bytes) -> list[Frame]:
        """Take the next bytes of the stream; return the frames they complete.

        Raises ``FramingError`` (carrying the frames decoded before the fault) when the
        stream breaks the rules; the decoder stays broken afterwards.
        """
        if self._error is not None:
            raise self._error
        frames: list[Frame] = []
        if data and self._size < REJOIN_LIMIT:
            if self._size or self._header is not None:
                data = self._rejoin(data)
            taken = self._whole_frames(data, frames)
            if taken:
                data = data[taken:]
        if data:
            self._chunks.append(memoryview(data))
            self._size += len(data)
        try:
            while True:
                if self._header is None:
                    if self._size < HEADER_SIZE:
                        self._check_partial_magic()
                        break
                    self._header = self._parse_header(self._take(HEADER_SIZE))
                frame_type, length = self._header
                if self._size < length:
                    break
                frames.append(Frame(frame_type, self._take(length)))
                self._header = None
        except ProtocolError as error:
            self._error = FramingError(error.message, frames)
            self._chunks.clear()
            self._size = 0
            raise self._error from None
        return frames

    def _rejoin(self, data: bytes) -> bytes:
        """The few bytes buffered (with the header again, if it was parsed) and ``data`` as
        one, the buffer emptied: so that a read's frames are decoded straight from it even
        when the last read ended inside a frame."""
        parts: list[bytes | memoryview] = []
        if self._header is not None:
            parts.append(HEADER.pack(MAGIC, VERSION, *self._header))
        parts += self._chunks
        parts.append(data)
        self._chunks.clear()
        self._size = 0
        self._header = None
        return b"".join(parts)

    def _whole_frames(self, data: bytes, frames: list[Frame]) -> int:
        """With nothing buffered: decode the whole frames at the start of ``data`` straight
        from it (the common case of a read), returning how many bytes they took. It stops
        at a partial frame or at any header it does not accept, which the buffered path
        then decodes, or refuses with its precise error."""
        size, at = len(data), 0
        types, limit, unpack = self._types, self._max, HEADER.unpack_from
        while size - at >= HEADER_SIZE:
            magic, version, frame_type, length = unpack(data, at)
            end = at + HEADER_SIZE + length
            if (
                end > size
                or magic != MAGIC
                or version != VERSION
                or frame_type not in types
                or length > limit
            ):
                break
            frames.append(Frame(frame_type, bytes(data[at + HEADER_SIZE : end])))
            at = end
        return at

    def end_of_stream(self) -> None:
        """The stream ended: raise ProtocolError if it stopped inside a frame."""
        if self._error is None and (self._header is not None or self._size):
            expected = HEADER_SIZE if self._header is None else self._header[1]
            raise ProtocolError(
                f"connection closed inside a frame: {self._size} of {expected} bytes of the "
                f"{'header' if self._header is None else 'payload'} received"
            )

    def _check_partial_magic(self) -> None:
        if self._size and not MAGIC.startswith(bytes(self._peek(min(self._size, 2)))):
            raise ProtocolError(
                f"not a txbridge frame: stream starts {_describe(bytes(self._peek(self._size)))}"
            )

    def _parse_header(self, header: bytes) -> tuple[int, int]:
        magic, version, frame_type, length = HEADER.unpack(header)
        if magic != MAGIC:
            start = header + self._peek(min(self._size, 8))
            raise ProtocolError(f"not a txbridge frame: stream starts {_describe(start)}")
        if version != VERSION:
            raise ProtocolError(
                f"unsupported protocol version {version} (this side speaks {VERSION})"
            )
        if frame_type not in self._types:
            raise ProtocolError(f"unknown frame type {frame_type}")
        if length > self._max:
            raise ProtocolError(
                f"frame of {length} bytes exceeds the maximum frame size of {self._max} bytes"
            )
        return frame_type, length

    def _peek(self, n: int) -> bytes:
        out = bytearray()
        for chunk in self._chunks:
            out += chunk[: n - len(out)]
            if len(out) >= n:
                break
        return bytes(out)

    def _take(self, n: int) -> bytes:
        """Remove and return the next n buffered bytes (n <= buffered)."""
        if n == 0:
            return b""
        self._size -= n
        chunks = self._chunks
        first = chunks[0]
        if len(first) >= n:
            if len(first) == n:
                chunks.popleft()
            else:
                chunks[0] = first[n:]
            return bytes(first[:n])
        parts = []
        need = n
        while need:
            chunk = chunks[0]
            if len(chunk) <= need:
                parts.append(chunk)
                chunks.popleft()
                need -= len(chunk)
            else:
                parts.append(chunk[:need])
                chunks[0] = chunk[need:]
                need = 0
        return b"".join(parts)
