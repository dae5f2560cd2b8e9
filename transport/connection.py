"""The framed connection: Twisted glue over the frame codec and the outbound queue.

Its :class:`~transport.wire.OutboundWriter` is the ONE streaming producer on the transport
(as twisted.web's HTTP/2 connection has), and the connection fans Twisted's pause and
resume out to any number of writers through writability listeners. Outgoing frames of a
reactor turn leave in one ``writeSequence``; incoming bytes are decoded into every whole
frame they complete.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from twisted.internet import error as tx_error
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IAddress, IReactorTime
from twisted.internet.protocol import Factory, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from transport.errors import ConnectionClosed, ConnectionTTLExpired, PeerError, ProtocolError
from transport.frames import (
    FIRST_APPLICATION_TYPE,
    HEADER_SIZE,
    ControlType,
    Frame,
    FrameDecoder,
    FramingError,
    encode,
)
from transport.interfaces import IFrameConnection, IFrameReceiver, WritabilityListener
from transport.partial import BudgetExhausted
from transport.settings import ConnectionSettings
from transport.stream import StreamConnection
from transport.wire import peer_certificates

if TYPE_CHECKING:
    from cryptography import x509

_TLS_ERRORS = ("OpenSSL.SSL.Error", "service_identity.exceptions.VerificationError")

log = Logger()

_RECEIVER = "receiver"
"""The one reason the layer above pauses reading for (``pause_reading``)."""
_ASK = struct.Struct("!I")
"""A PING's optional payload: the milliseconds between pings its sender asks for."""
MIN_ASKED_INTERVAL = 0.05
"""The shortest heartbeat interval a connecting side adopts, whatever it is asked."""


@implementer(IFrameConnection)
class FrameConnection(StreamConnection):
    """A connection that carries frames and says when it can take more."""

    def __init__(
        self,
        receiver: IFrameReceiver,
        clock: IReactorTime,
        settings: ConnectionSettings | None = None,
        accepted_types: Iterable[int] = (),
        is_client: bool = False,
    ) -> None:
        self.settings = settings = settings or ConnectionSettings()
        super().__init__(clock, settings.stream, settings.ttl)
        self._receiver = receiver
        self._is_client = is_client
        partial = settings.partial_frames
        self._awaiting_login = partial is not None and not is_client
        self._decoder = FrameDecoder(
            accepted_types,
            min(partial.prelogin_size, settings.max_frame_size)
            if partial is not None and self._awaiting_login
            else settings.max_frame_size,
        )
        self._listeners: list[WritabilityListener] = []
        self._writable_waiters: list[Deferred[None]] = []
        self._lost_waiters: list[Deferred[BaseException]] = []
        self._held: deque[Frame] = deque()
        self._delivering = False
        self._lost: BaseException | None = None
        self._close_reason: BaseException | None = None
        self._heartbeat = settings.heartbeat_interval
        self._ping_payload = (
            _ASK.pack(max(1, round(settings.ttl * 1000 / 3)))
            if settings.ttl is not None and not is_client
            else b""
        )
        """An accepting side's pings ask the peer to ping at a third of its TTL."""

    # -- writability -------------------------------------------------------------------

    @property
    def is_writable(self) -> bool:
        return self._out.writable and not self._closing

    @property
    def pending_bytes(self) -> int:
        """Bytes counted against the water marks now."""
        return self._out.pending

    def add_writability_listener(self, listener: WritabilityListener) -> None:
        self._listeners.append(listener)

    def remove_writability_listener(self, listener: WritabilityListener) -> None:
        self._listeners.remove(listener)

    def when_writable(self) -> Deferred[None]:
        if self._lost is not None:
            return fail(self._lost)
        if self._closing:
            return fail(ConnectionClosed(f"connection to {self.peer} is closing"))
        if self._out.writable:
            return succeed(None)
        waiter: Deferred[None] = Deferred(self._cancel_waiter)
        self._writable_waiters.append(waiter)
        return waiter

    def _cancel_waiter(self, waiter: Deferred[None]) -> None:
        # It may already be on its way out (being fired by _announce).
        if waiter in self._writable_waiters:
            self._writable_waiters.remove(waiter)

    # -- sending -----------------------------------------------------------------------

    def send(self, frame_type: int, payload: bytes) -> None:
        if self._closing:
            raise ConnectionClosed(f"connection to {self.peer} is closing")
        self._queue(frame_type, payload)

    @property
    def max_frame_size(self) -> int:
        return self.settings.max_frame_size

    def logged_in(self) -> None:
        if self._awaiting_login:
            self._awaiting_login = False
            self._decoder.max_frame_size = self.settings.max_frame_size

    def call_before_flush(self, call: Callable[[], None]) -> None:
        if not self._closing:
            self.writer.before_flush(call)

    def _queue(self, frame_type: int, payload: bytes) -> None:
        size = len(payload)
        if size > self.settings.max_frame_size:
            raise ValueError(
                f"frame of {size} bytes exceeds the maximum frame size of "
                f"{self.settings.max_frame_size} bytes"
            )
        self.writer.push(encode(frame_type, payload), size + HEADER_SIZE)

    def _announce(self) -> None:
        for change in self._out.changes_to_announce():
            for listener in list(self._listeners):
                try:
                    listener(change)
                except Exception:
                    log.failure("writability listener {listener!r} failed", listener=listener)
        if self._writable_waiters and self._out.writable:
            waiters, self._writable_waiters = self._writable_waiters, []
            for waiter in waiters:
                if not waiter.called:  # one waiter's callback may have cancelled another
                    waiter.callback(None)

    # -- reading -----------------------------------------------------------------------

    def pause_reading(self) -> None:
        if _RECEIVER not in self._paused:
            self._pause(_RECEIVER)

    def resume_reading(self) -> None:
        self._resume(_RECEIVER)

    def _read_on(self) -> None:
        self._deliver(())

    def _bytes_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FramingError as error:
            self._deliver(error.frames)
            self._protocol_error(error)
            return
        if self._held_bytes is not None:
            try:
                self._held_bytes.holding(self._decoder.buffered, self._last_received)
            except BudgetExhausted as error:
                self._deliver(frames)
                self._protocol_error(ProtocolError(str(error)))
                return
        self._deliver(frames)

    def _deliver(self, frames: Iterable[Frame]) -> None:
        held = self._held
        held.extend(frames)
        if self._delivering:
            return
        self._delivering = True
        try:
            while held and not self._paused and not self._closing:
                self._dispatch(held.popleft())
        finally:
            self._delivering = False

    def _dispatch(self, frame: Frame) -> None:
        frame_type = frame.type
        if frame_type < FIRST_APPLICATION_TYPE:  # (one int comparison per frame, not two enums)
            self._control(frame)
            return
        try:
            self._receiver.frame_received(frame)
        except Exception:
            log.failure("handling a frame from {peer} failed", peer=self.peer)
            self._close_reason = ProtocolError("internal error while handling a frame")
            self.close(error="internal error while handling a frame")

    def _control(self, frame: Frame) -> None:
        """PING (input, which the TTL counts; an accepting side's asks for pings at least
        that often) or ERROR."""
        if frame.type == ControlType.PING:
            if frame.payload and self._is_client:
                self._asked(frame.payload)
        elif frame.type == ControlType.ERROR:
            message = frame.payload.decode("utf-8", "replace")
            # Not a ``message`` field: Twisted's legacy observers (Python logging, as
            # crochet sets up) own that key and show it as "()".
            log.warn("{peer} reported an error: {text}", peer=self.peer, text=message)
            self._close_reason = PeerError(f"{self.peer} reported: {message}")
            self.close()

    def _protocol_error(self, error: ProtocolError) -> None:
        log.warn("protocol error from {peer}: {text}; closing", peer=self.peer, text=error.message)
        self._close_reason = error
        self._drop_partial()
        self.close(error=error.message)

    def _frame_overdue(self, why: str) -> None:
        self._protocol_error(ProtocolError(why))

    def _missing(self) -> int:
        return self._decoder.missing

    def _discard_buffered(self) -> None:
        self._decoder.discard()

    # -- heartbeats and TTL ------------------------------------------------------------

    def _ping(self) -> None:
        """Every heartbeat interval: a ping, unless bytes are already waiting to leave."""
        if not self._closing and not self._out.queued:
            self._queue(ControlType.PING, self._ping_payload)

    def _asked(self, payload: bytes) -> None:
        """The accepting side drops a peer silent for its TTL, whatever the peer's own
        settings say (Artemis's connection-ttl of the server): ping at least as often as it
        asks, or this connection would be dropped whenever it is idle."""
        if len(payload) != _ASK.size:
            self._protocol_error(
                ProtocolError(f"a PING carries 0 or {_ASK.size} bytes, not {len(payload)}")
            )
            return
        (milliseconds,) = _ASK.unpack(payload)
        asked = max(milliseconds / 1000, MIN_ASKED_INTERVAL)
        if self._heartbeat is None or asked < self._heartbeat:
            self._heartbeat = asked
            self._set_timer("heartbeat", self._ping, asked)

    def _silent(self, silent: float, limit: float) -> None:
        log.warn(
            "nothing from {peer} for {silent:.1f}s (connection-ttl {ttl}s); dropping it",
            peer=self.peer,
            silent=silent,
            ttl=limit,
        )
        self._close_reason = ConnectionTTLExpired(
            f"nothing received from {self.peer} for {silent:.1f}s (connection-ttl {limit}s)"
        )

    # -- life cycle --------------------------------------------------------------------

    def connectionMade(self) -> None:
        super().connectionMade()
        self._set_timer("heartbeat", self._ping, self._heartbeat)
        if self._ping_payload:
            self._queue(ControlType.PING, self._ping_payload)  # the ask, before anything
        self._receiver.connection_made(self)

    def close(self, error: str | None = None) -> None:
        if self._closing or self._wire is None:
            return
        if error is not None:
            self._queue(ControlType.ERROR, error.encode("utf-8")[: self.settings.max_frame_size])
        self._close_stream()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        # Without a traceback: its frames would tie this connection in a reference cycle.
        # (Judged before the partial frame is let go: a cut inside one is the reason.)
        lost = self._lost_reason(reason).with_traceback(None)
        self._stream_lost()
        self._lost = lost
        self._held.clear()
        failure = Failure(lost)
        waiters, self._writable_waiters = self._writable_waiters, []
        for waiter in waiters:
            waiter.errback(failure)
        lost_waiters, self._lost_waiters = self._lost_waiters, []
        for lost_waiter in lost_waiters:
            lost_waiter.callback(lost)
        self._receiver.connection_lost(lost)
        # Nothing refers back to this connection any more: it goes at once, with its
        # buffers, when the layer above lets go of it.
        self.writer.release()
        self._listeners.clear()

    def _lost_reason(self, reason: Failure) -> BaseException:
        if self._close_reason is not None:
            return self._close_reason
        value = reason.value if reason.value is not None else tx_error.ConnectionLost()
        # (by name: a process that never used TLS never loads OpenSSL, nor this error)
        if reason.check(*_TLS_ERRORS):
            from transport.tls_failures import describe_tls_failure  # noqa: PLC0415

            tls = describe_tls_failure(value, self.peer, self._is_client)
            log.warn("{text}", text=str(tls))
            return tls
        if reason.check(tx_error.ConnectionDone, tx_error.ConnectionLost):
            try:
                self._decoder.end_of_stream()
            except ProtocolError as truncated:
                return truncated
        return value

    @property
    def lost_reason(self) -> BaseException | None:
        """Why the connection is gone, or None while it is up."""
        return self._lost

    def when_lost(self) -> Deferred[BaseException]:
        if self._lost is not None:
            return succeed(self._lost)
        waiter: Deferred[BaseException] = Deferred()
        self._lost_waiters.append(waiter)
        return waiter

    def peer_certificates(self) -> list[x509.Certificate]:
        return peer_certificates(self.transport)


class FrameFactory(Factory):
    """Builds framed connections, each with a fresh receiver."""

    def __init__(
        self,
        receiver_factory: Callable[[], IFrameReceiver],
        clock: IReactorTime,
        settings: ConnectionSettings | None = None,
        accepted_types: Iterable[int] = (),
        is_client: bool = False,
    ) -> None:
        self.receiver_factory = receiver_factory
        self.clock = clock
        self.settings = settings or ConnectionSettings()
        self.accepted_types = frozenset(accepted_types)
        self.is_client = is_client

    def buildProtocol(self, addr: IAddress | None) -> FrameConnection:
        return FrameConnection(
            self.receiver_factory(), self.clock, self.settings, self.accepted_types, self.is_client
        )
