"""What every connection on a byte stream does alike, whatever its framing.

:class:`StreamConnection` is the Twisted glue under both the framed connection
(``transport.connection``) and the STOMP head's connection: one
:class:`~transport.wire.OutboundWriter` as the transport's only push producer, judged by
the :class:`~transport.outbound.OutboundQueue` water marks; reading paused for as long as
any reason asks (a count per reason, so independent holds do not release each other); the
peer's silence judged against a TTL, where time this side chose not to read does not
count; frames held part-way bounded in size and time (``transport.partial``); the socket's
read and send sizes and ``TCP_NODELAY`` from settings; a close that sends what is queued
and, if asked, aborts a peer that does not take it in time.

Subclasses decode: they get the bytes read (``_bytes_received``), are asked to hand on
what they hold when reading resumes (``_read_on``), and say what happens when the peer
stays silent too long or a frame takes too long.
"""

from __future__ import annotations

import typing
from collections import Counter
from collections.abc import Callable

import attrs
from twisted.internet.abstract import FileDescriptor
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import Protocol
from twisted.internet.task import LoopingCall

from transport.outbound import DEFAULT_HIGH_WATER, DEFAULT_LOW_WATER, OutboundQueue
from transport.partial import HeldBytes, PartialFrameLimits
from transport.wire import OutboundWriter, Wire, peer_name, socket_beneath, tune_socket_io

FRAME_READ_LIMIT = 1024 * 1024
"""The most bytes read per socket call while one frame (or a streamed body) needs more than
the connection's read size: reads sized to what that frame still lacks cost a reactor turn,
a decode and a file write per MiB, not per 64 KiB, and hold nothing the frame would not."""


@attrs.frozen
class StreamSettings:
    """The socket and buffering side of a connection (see ``ConnectionSettings`` for what
    each means); ``close_timeout``: seconds a closing connection may take to send what it
    holds before it is cut (None: only the TTL ends it)."""

    high_water: int = DEFAULT_HIGH_WATER
    low_water: int = DEFAULT_LOW_WATER
    budget: int = DEFAULT_HIGH_WATER
    io_size: int | None = 256 * 1024
    read_size: int | None = None
    tcp_no_delay: bool = True
    partial_frames: PartialFrameLimits | None = None
    close_timeout: float | None = None


class StreamConnection(Protocol):
    """A connection's writer, reading pauses, silence and frame timers, close."""

    def __init__(self, clock: IReactorTime, stream: StreamSettings, ttl: float | None) -> None:
        self._clock = clock
        self._stream = stream
        self._out = OutboundQueue(stream.high_water, stream.low_water)
        self.writer = OutboundWriter(self._out, clock, stream.budget, self._announce)
        """The transport's producer: Twisted's pause and resume go to it."""
        partial = stream.partial_frames
        self._held_bytes = HeldBytes(partial) if partial is not None else None
        self._paused: Counter[str] = Counter()
        """Why reading is paused: a count per reason; reading goes on when none is left."""
        self._closing = False
        self._silence_limit = ttl
        self._last_received = 0.0
        self._timers: dict[str, LoopingCall] = {}
        self._abort_call: IDelayedCall | None = None
        self._wire: Wire | None = None
        self._socket: FileDescriptor | None = None
        self._read_size = 0
        """Bytes per socket call between large frames (the socket's own, once connected)."""
        self.peer = "?"

    # -- what subclasses provide ----------------------------------------------------------

    def _announce(self) -> None:
        """The outbound queue crossed a water mark (or its writer flushed)."""
        raise NotImplementedError

    def _bytes_received(self, data: bytes) -> None:
        """Decode ``data`` and hand on what is whole while reading is not paused."""
        raise NotImplementedError

    def _read_on(self) -> None:
        """Reading resumed: hand on what was decoded and held meanwhile."""
        raise NotImplementedError

    def _missing(self) -> int:
        """Bytes still to come of the frame (or streamed body) being received; 0 between
        frames."""
        raise NotImplementedError

    def _discard_buffered(self) -> None:
        """Let go of the decoder's bytes of a frame that will never be whole."""
        raise NotImplementedError

    def _silent(self, silent: float, limit: float) -> None:
        """Nothing came for ``silent`` seconds, over ``limit``: log it and say why the
        connection ends (it is aborted right after)."""
        raise NotImplementedError

    def _frame_overdue(self, why: str) -> None:
        """A frame took longer than the frame timeout: end the connection."""
        raise NotImplementedError

    # -- reading --------------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self._closing:
            return  # the TTL keeps counting: a closing peer must finish, not keep us open
        self._last_received = self._clock.seconds()
        self._bytes_received(data)
        if self._socket is not None:
            self._size_reads(self._missing())

    def _size_reads(self, missing: int) -> None:
        """Read what the frame being received lacks, up to ``FRAME_READ_LIMIT``, while
        that is more than the read size; the read size otherwise."""
        assert self._socket is not None
        read = self._read_size
        self._socket.bufferSize = read if missing <= read else min(missing, FRAME_READ_LIMIT)

    def _pause(self, reason: str) -> None:
        first = not self._paused
        self._paused[reason] += 1
        if first and self._wire is not None and not self._closing:
            self._wire.pauseProducing()

    def _resume(self, reason: str) -> None:
        paused = self._paused
        count = paused[reason]
        if count <= 0:
            return
        if count == 1:
            del paused[reason]
        else:
            paused[reason] = count - 1
        if paused or self._closing:
            return
        self._last_received = self._clock.seconds()
        self._read_on()
        if not self._paused and not self._closing and self._wire is not None:
            self._wire.resumeProducing()

    def _drop_partial(self) -> None:
        """Let go of the bytes of frames that will never be handled, at once."""
        self._discard_buffered()
        if self._held_bytes is not None:
            self._held_bytes.release()

    # -- timers ---------------------------------------------------------------------------

    def _set_timer(self, name: str, tick: Callable[[], None], period: float | None) -> None:
        """Run ``tick`` every ``period`` seconds (None: not at all) in place of the timer
        called ``name``."""
        old = self._timers.pop(name, None)
        if old is not None and old.running:
            old.stop()
        if period is None:
            return
        timer = LoopingCall(tick)
        timer.clock = self._clock
        timer.start(period, now=False)
        self._timers[name] = timer

    def _stop_timers(self) -> None:
        timers, self._timers = self._timers, {}
        for timer in timers.values():
            if timer.running:
                timer.stop()

    def _watch_silence(self, limit: float | None) -> None:
        """Drop the peer after ``limit`` seconds of silence (None: never), checked four
        times a limit: within 1.25 limits."""
        self._silence_limit = limit
        self._set_timer("silence", self._check_silence, None if limit is None else limit / 4)

    def _check_silence(self) -> None:
        now = self._clock.seconds()
        limit = self._silence_limit
        if self._paused and not self._closing:
            self._last_received = now  # this side chose not to read: not the peer's silence
            return
        if limit is None or now - self._last_received <= limit or self._wire is None:
            return
        self._silent(now - self._last_received, limit)
        self._abort()

    def _check_frame(self) -> None:
        """End a connection whose frame has taken longer than the frame timeout, whatever
        heart-beats were negotiated (time with reading paused does not count)."""
        assert self._held_bytes is not None
        if self._closing:
            return
        now = self._clock.seconds()
        if self._paused:
            self._held_bytes.not_reading(now)
            return
        overdue = self._held_bytes.overdue(now)
        if overdue is not None:
            self._frame_overdue(overdue)

    # -- life cycle -----------------------------------------------------------------------

    def connectionMade(self) -> None:
        wire = self._wire = typing.cast(Wire, self.transport)
        self.peer = peer_name(wire.getPeer())
        self._last_received = self._clock.seconds()
        stream = self._stream
        tune_socket_io(
            self.transport, stream.io_size, stream.read_size, no_delay=stream.tcp_no_delay
        )
        self._socket = socket_beneath(self.transport)
        if self._socket is not None:
            self._read_size = self._socket.bufferSize
        self.writer.attach(wire)
        self._watch_silence(self._silence_limit)
        partial = stream.partial_frames
        if partial is not None and partial.timeout is not None:
            self._set_timer("frame", self._check_frame, partial.timeout / 4)

    def _close_stream(self) -> None:
        """Send what is queued, then disconnect; a peer that takes longer than the close
        timeout to let it go is cut."""
        wire = self._wire
        if self._closing or wire is None:
            return
        self._closing = True
        self._drop_partial()
        if self._paused:
            # Closing needs the peer's end (TLS close_notify, TCP FIN): listen again.
            # Nothing more is handled once closing.
            wire.resumeProducing()
        self.writer.finish()
        wire.loseConnection()
        timeout = self._stream.close_timeout
        if timeout is not None:
            self._abort_call = self._clock.callLater(timeout, wire.abortConnection)

    def _abort(self) -> None:
        """Cut the connection now, dropping what waits to be sent."""
        self._closing = True
        self._stop_timers()
        self._drop_partial()
        if self._wire is not None:
            self.writer.cancel()
            self.writer.detach()
            self._wire.abortConnection()

    def _stream_lost(self) -> None:
        """The connection is gone: timers stopped, nothing more sent, partial frames
        released (the subclass then tells its layer above and calls ``writer.release``)."""
        self._closing = True
        self._stop_timers()
        self.writer.cancel()
        if self._abort_call is not None and self._abort_call.active():
            self._abort_call.cancel()
        self._abort_call = None
        self._drop_partial()
