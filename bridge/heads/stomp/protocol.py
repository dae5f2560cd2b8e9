"""The STOMP head's Twisted glue: bytes to the parser, events to the session, frames out.

STOMP has its own framing, so a connection here is not the transport's framed connection,
but it stands on the same machinery (``transport.stream``): the transport's
:class:`~transport.wire.OutboundWriter` is the one push producer on its transport and
judges writability with the :class:`~transport.outbound.OutboundQueue` water marks, so
deliveries stop while the client does not read; a reactor turn's frames leave together;
reading pauses for as long as anything asks it to (a session step waiting on the node,
too many persistent sends waiting for the store, a SEND waiting for room on an address
full under BLOCK: ``pause_reading("address-full")``), and the silence of a peer that is
not read does not count against its TTL.

A large message's body leaves from its file a chunk at a time, while the connection is
writable (``send_large``); the frames sent meanwhile wait behind it, since STOMP frames
cannot interleave, and the session is told the connection is not writable until it is
out.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IAddress, IListeningPort
from twisted.internet.protocol import Factory, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from bridge.heads.lifecycle import Head
from bridge.heads.stomp.frames import (
    NEED_DATA,
    Frame,
    FrameError,
    FrameParser,
    Limits,
    Version,
    serialize,
    serialize_head,
    with_body,
)
from bridge.heads.stomp.interfaces import IStompTransport
from bridge.heads.stomp.session import StompSession
from bridge.heads.stomp.settings import StompSettings
from bridge.heads.stomp.wire import ADDRESS_FULL
from bridge.message import LargeBody
from bridge.node.bodies import BodySource
from security.auth import SecurityAuth
from security.subject import Subject
from transport.endpoints import server_endpoint
from transport.partial import BudgetExhausted, PartialFrameLimits
from transport.stream import StreamConnection, StreamSettings
from transport.tls import TLSConfig
from transport.urls import URL
from transport.wire import peer_certificates

if TYPE_CHECKING:
    from cryptography import x509

log = Logger()

HEART_BEAT = b"\n"


class StompHead(Head["StompProtocol"]):
    """STOMP on one node: a protocol per connection (the shared lifecycle,
    ``bridge.heads.lifecycle``, knows the live ones)."""

    def listen(
        self,
        url: str | URL,
        *,
        settings: StompSettings | None = None,
        tls: TLSConfig | None = None,
        partial_frames: PartialFrameLimits | None = None,
    ) -> Deferred[IListeningPort]:
        """Accept STOMP connections at ``url`` (``tcp://`` or ``tls://``); with
        ``partial_frames``, frames not yet whole are bounded by a pre-login size, a frame
        timeout and a node-wide budget (``transport.partial``)."""
        factory = StompFactory(self, settings or StompSettings(), partial_frames)
        listening: Deferred[IListeningPort] = server_endpoint(self.reactor, url, tls).listen(
            factory
        )
        return listening


@attrs.define(eq=False)
class _LargeOut:
    """A frame whose body is being sent from its file."""

    frame: Frame
    source: BodySource
    started: bool = False


class StompFactory(Factory):
    """Builds the connections of one acceptor."""

    def __init__(
        self,
        head: StompHead,
        settings: StompSettings,
        partial_frames: PartialFrameLimits | None = None,
    ) -> None:
        self.head = head
        self.settings = settings
        self.partial_frames = partial_frames

    def buildProtocol(self, addr: IAddress | None) -> StompProtocol:
        return StompProtocol(self.head, self.settings, self.partial_frames)


@implementer(IStompTransport)
class StompProtocol(StreamConnection):
    """One STOMP connection."""

    def __init__(
        self,
        head: StompHead,
        settings: StompSettings,
        partial_frames: PartialFrameLimits | None = None,
    ) -> None:
        super().__init__(
            head.reactor,
            StreamSettings(
                high_water=settings.high_water,
                low_water=settings.low_water,
                budget=settings.high_water,
                io_size=settings.io_size,
                read_size=settings.read_size,
                tcp_no_delay=settings.tcp_no_delay,
                partial_frames=partial_frames,
                close_timeout=settings.close_timeout,
            ),
            settings.ttl,
        )
        self._head = head
        self.settings = settings
        limits = settings.limits
        self._parser = FrameParser(
            limits if partial_frames is None else _prelogin(limits, partial_frames.prelogin_size)
        )
        self._session: StompSession | None = None
        self._pumping = False
        self._announced_writable = True
        self._backlog: deque[Frame | list[bytes] | _LargeOut] = deque()
        """A large body being sent (first), and what waits behind it; empty otherwise."""
        self.finished: Deferred[None] = Deferred()
        """Fires once the connection is gone and its session gave back what it held."""

    # -- IStompTransport ------------------------------------------------------------------

    @property
    def is_writable(self) -> bool:
        return self._out.writable and not self._closing and not self._backlog

    def send(self, frame: Frame) -> None:
        if self._closing:
            return
        if self._backlog:
            self._backlog.append(frame)
            return
        assert self._session is not None
        parts = serialize(frame, self._session.version or Version.V1_0)
        self._push(parts)

    def send_serialized(self, head: bytes, body: bytes) -> None:
        if self._closing:
            return
        parts = with_body(head, body)
        if self._backlog:
            self._backlog.append(parts)
            return
        self._push(parts)

    def send_large(self, frame: Frame, body: LargeBody) -> None:
        if self._closing:
            return
        try:
            source = BodySource(self._head.broker, body)
        except OSError as error:
            log.error(
                "closing STOMP connection from {peer}: a large body cannot be read: {error}",
                peer=self.peer,
                error=error,
            )
            self.close()
            return
        self._backlog.append(_LargeOut(frame, source))
        if len(self._backlog) == 1:
            self._send_backlog()
        self._announce()

    def _send_backlog(self) -> None:
        """Send the large body at the head of the backlog while the connection is
        writable; once it is out, the frames behind it, up to the next large one."""
        assert self._session is not None
        version = self._session.version or Version.V1_0
        backlog = self._backlog
        while backlog and not self._closing:
            item = backlog[0]
            if isinstance(item, Frame):
                backlog.popleft()
                self._push(serialize(item, version))
                continue
            if isinstance(item, list):  # (a frame sent serialized)
                backlog.popleft()
                self._push(item)
                continue
            if not item.started:
                item.started = True
                self._push([serialize_head(item.frame, version)])
            source = item.source
            try:
                while source.remaining and self._out.writable:
                    self._push([source.read()])
            except OSError as error:
                log.error(
                    "closing STOMP connection from {peer}: {error}", peer=self.peer, error=error
                )
                self._drop_backlog()
                self.close()
                return
            if source.remaining:
                return  # on when the connection drains
            source.close()
            backlog.popleft()
            self._push([b"\0"])

    def _drop_backlog(self) -> None:
        for item in self._backlog:
            if isinstance(item, _LargeOut):
                item.source.close()
        self._backlog.clear()

    def _push(self, parts: list[bytes]) -> None:
        self.writer.push(parts, sum(map(len, parts)))
        if self._announced_writable and not self._out.writable:
            # At once, not at the end of the turn: a queue draining into this
            # connection stops here, with at most one message over the mark.
            self._announce()

    def close(self) -> None:
        if self._closing or self._wire is None:
            return
        self._stop_timers()
        self._drop_backlog()
        self._close_stream()

    def pause_reading(self, reason: str) -> None:
        self._pause(reason)

    def resume_reading(self, reason: str) -> None:
        self._resume(reason)

    def set_heart_beats(self, send_every: float | None, silence_limit: float | None) -> None:
        self._set_timer("heart-beat", self._heart_beat, send_every)
        self._watch_silence(silence_limit)

    def peer_certificates(self) -> list[x509.Certificate]:
        return peer_certificates(self.transport)

    # -- the node's view ------------------------------------------------------------------

    @property
    def blocked(self) -> bool:
        """Whether reading waits for room on an address full under BLOCK."""
        return ADDRESS_FULL in self._paused

    @property
    def producers_blocked(self) -> int:
        """1 while a SEND waits for room (reading stops: the core head's withheld
        producer credits, for STOMP)."""
        return 1 if self.blocked else 0

    def end(self, reason: str) -> None:
        """The node is stopping: an ERROR saying so, then close."""
        if self._session is not None:
            self._session.close(reason)

    # -- writing --------------------------------------------------------------------------

    def _announce(self) -> None:
        changes = self._out.changes_to_announce()
        if self._session is None:
            return
        if self._backlog and changes and changes[-1] and not self._closing:
            self._send_backlog()  # room again for a large body's next chunks
        if not changes and not self._backlog and self._announced_writable:
            return
        writable = self.is_writable
        if writable is not self._announced_writable:
            self._announced_writable = writable
            self._session.writability_changed(writable)

    # -- reading --------------------------------------------------------------------------

    def _bytes_received(self, data: bytes) -> None:
        self._parser.feed(data)
        self._pump()

    def _read_on(self) -> None:
        self._pump()

    def _missing(self) -> int:
        return self._parser.missing

    def _pump(self) -> None:
        """Hand the session every whole event, while nothing pauses reading."""
        if self._pumping:
            return
        session = self._session
        assert session is not None
        parser = self._parser
        self._pumping = True
        try:
            while not self._paused and not self._closing:
                parser.version = session.version
                try:
                    event = parser.next_event()
                except FrameError as error:
                    log.info(  # (the text: the error's traceback would hold this frame)
                        "closing STOMP connection from {peer}: {error}",
                        peer=self.peer,
                        error=str(error),
                    )
                    session.protocol_error(error)
                    return
                if event is NEED_DATA:
                    break
                session.event_received(event)  # type: ignore[arg-type]
            if self._held_bytes is not None and not self._closing:
                self._held_bytes.holding(parser.buffered, self._clock.seconds())
        except BudgetExhausted as exhausted:
            log.info(
                "closing STOMP connection from {peer}: {error}",
                peer=self.peer,
                error=str(exhausted),
            )
            session.protocol_error(FrameError("partial-frame budget exhausted", str(exhausted)))
        finally:
            self._pumping = False
            session.read_ended()

    def _discard_buffered(self) -> None:
        self._parser.discard()

    def _authenticate(self, auth: SecurityAuth) -> Deferred[Subject]:
        return self._head.authenticate(auth).addCallback(self._logged_in)

    def _logged_in(self, subject: Subject) -> Subject:
        """Frames up to the acceptor's limits from now on (before: a CONNECT's worth)."""
        self._parser.limits = self.settings.limits
        return subject

    # -- heart-beats and silence ----------------------------------------------------------

    def _heart_beat(self) -> None:
        if not self._closing and not self._out.queued and not self._backlog:
            self._push([HEART_BEAT])

    def _silent(self, silent: float, limit: float) -> None:
        log.warn(
            "nothing from STOMP peer {peer} for {silent:.1f}s (limit {limit}s); dropping it",
            peer=self.peer,
            silent=silent,
            limit=limit,
        )

    def _frame_overdue(self, why: str) -> None:
        assert self._session is not None
        log.info("closing STOMP connection from {peer}: {error}", peer=self.peer, error=why)
        self._session.protocol_error(FrameError("frame timeout", why))

    # -- life cycle -----------------------------------------------------------------------

    def connectionMade(self) -> None:
        super().connectionMade()
        self._session = StompSession(
            self._head.broker,
            self._head.security,
            self,
            clock=self._clock,
            authenticate=self._authenticate,
            settings=self.settings,
        )
        self._head.opened(self)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._stream_lost()
        self._drop_backlog()
        assert self._session is not None
        self._head.closed(self, self._session.connection_lost())
        # Break the protocol <-> session <-> writer cycles: the connection and what it
        # buffered are freed as soon as the session's cleanup ends.
        self.writer.release()
        self._session = None


def _prelogin(limits: Limits, size: int) -> Limits:
    """The limits before login: a CONNECT frame's worth at most, and no body streamed
    (a SEND pipelined behind CONNECT is held to the same size until the login is done)."""
    return attrs.evolve(
        limits,
        max_body=min(limits.max_body, size),
        max_header_bytes=min(limits.max_header_bytes, size),
        min_large=None,
        max_large=min(limits.max_large, size),
    )
