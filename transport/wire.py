"""A connection's Twisted transport, as the framed connection and the STOMP head both use
it: the outbound writer, the socket's I/O size, the peer's name and its certificates.

The writer is the ONE streaming producer registered on the transport (as twisted.web's
HTTP/2 connection does). Its connection queues bytes in an :class:`OutboundQueue`; at the
end of the reactor turn the writer hands them over in ``writeSequence`` calls, up to a
budget per pass, while Twisted produces. Twisted's pause and resume move the queue's water
marks, and after each pass or resume the connection's ``announce`` tells its writers what
changed: the connection decides who hears it.
"""

from __future__ import annotations

import socket
import sys
import typing
from collections.abc import Callable, Iterable, Sequence

import attrs
from twisted.internet.abstract import FileDescriptor
from twisted.internet.interfaces import (
    IAddress,
    IDelayedCall,
    IPushProducer,
    IReactorTime,
    ISystemHandle,
    ITCPTransport,
)
from twisted.logger import Logger
from zope.interface import implementer

from transport.outbound import OutboundQueue

if typing.TYPE_CHECKING:
    from cryptography import x509

log = Logger()


class Wire(typing.Protocol):
    """What a connection uses of a Twisted TCP or TLS transport."""

    def writeSequence(self, data: Iterable[bytes]) -> None: ...
    def loseConnection(self) -> None: ...
    def abortConnection(self) -> None: ...
    def registerProducer(self, producer: IPushProducer, streaming: bool) -> None: ...
    def unregisterProducer(self) -> None: ...
    def pauseProducing(self) -> None: ...
    def resumeProducing(self) -> None: ...
    def getPeer(self) -> IAddress: ...


@implementer(IPushProducer)
class OutboundWriter:
    """Hands a connection's queued bytes to its transport, a reactor turn's worth at once."""

    def __init__(
        self,
        queue: OutboundQueue,
        clock: IReactorTime,
        budget: int,
        announce: Callable[[], None],
    ) -> None:
        self.queue = queue
        self.wire: Wire | None = None
        self._clock = clock
        self._budget = budget
        self._announce = announce
        self.direct: DirectSend | None = None
        """Set while the wire is a plain TCP socket: bursts go to it straight."""
        self._turn_call: IDelayedCall | None = None
        self._before_flush: list[Callable[[], None]] = []
        self._flushing = False
        self._registered = False
        self._finished = False

    def attach(self, wire: Wire) -> None:
        """Become ``wire``'s one streaming producer."""
        self.wire = wire
        self.direct = DirectSend.beneath(wire)
        wire.registerProducer(self, True)
        self._registered = True

    def detach(self) -> None:
        """Stop being the transport's producer (once: a closing connection may expire)."""
        if self._registered and self.wire is not None:
            self._registered = False
            self.wire.unregisterProducer()

    def push(self, parts: Sequence[bytes], size: int) -> None:
        """Queue the parts of one frame; they leave at the end of this turn at the latest."""
        self.queue.push(parts, size)
        if self._turn_call is None:
            self._turn_call = self._clock.callLater(0, self._end_of_turn)

    def before_flush(self, call: Callable[[], None]) -> None:
        """Call ``call()`` at the end of this turn, before the queued bytes are handed
        over (it may push more); dropped if the writer is cancelled first."""
        if self._finished:
            return
        self._before_flush.append(call)
        if self._turn_call is None:
            self._turn_call = self._clock.callLater(0, self._end_of_turn)

    def finish(self) -> None:
        """The connection closes: no more turns, everything queued goes to the transport
        now, and the writer stops producing."""
        self.cancel()
        self.detach()
        parts = self.queue.take_all()
        if parts and self.wire is not None:
            self.wire.writeSequence(parts)

    def cancel(self) -> None:
        """Nothing more leaves (the connection is gone or going)."""
        self._finished = True
        self._before_flush.clear()
        if self._turn_call is not None:
            if self._turn_call.active():
                self._turn_call.cancel()
            self._turn_call = None

    def release(self) -> None:
        """The connection is gone: drop its queued bytes and everything that refers back
        to it (its announce callback, the wire), so that it is freed as soon as it is
        unreferenced, not whenever the cycle collector runs."""
        self.cancel()
        self.queue.take_all()
        self._announce = _nothing
        self.wire = None
        self.direct = None

    def _end_of_turn(self) -> None:
        # The calls run while this turn's call is still set, so that what they push (and
        # any call they ask for) goes out in this flush, not in one more turn.
        while self._before_flush:
            calls, self._before_flush = self._before_flush, []
            for call in calls:
                try:
                    call()
                except Exception:
                    log.failure("a call before the flush failed: {call!r}", call=call)
        self._turn_call = None
        self.flush()
        self._announce()

    def flush(self) -> None:
        """Hand queued bytes to the transport while it produces, up to one pass's budget."""
        out = self.queue
        if out.transport_paused or not out.queued or self.wire is None:
            return
        out.transport_producing()
        budget = self._budget
        self._flushing = True
        try:
            while out.queued and not out.transport_paused and budget > 0:
                parts = out.take(budget)
                budget -= sum(map(len, parts))
                if self.direct is not None:
                    parts = self.direct.send(parts)
                if parts:
                    self.wire.writeSequence(parts)
        finally:
            self._flushing = False
        if out.queued and not out.transport_paused and self._turn_call is None:
            self._turn_call = self._clock.callLater(0, self._end_of_turn)

    # -- IPushProducer: Twisted's signals about its own buffer -------------------------

    def pauseProducing(self) -> None:
        self.queue.transport_paused_by_peer()
        if not self._flushing and self._turn_call is None and not self._finished:
            self._turn_call = self._clock.callLater(0, self._end_of_turn)

    def resumeProducing(self) -> None:
        self.queue.transport_resumed()
        self.flush()
        self._announce()

    def stopProducing(self) -> None:
        """The transport is going away; the connection's ``connectionLost`` cleans up."""


def _nothing() -> None:
    """The announce callback of a released writer."""


IOV_MAX = 1024
"""The most buffers one ``sendmsg`` takes (Linux's ``UIO_MAXIOV``)."""


@attrs.frozen
class DirectSend:
    """Sends straight to a plain TCP socket while Twisted holds nothing for it.

    Twisted only queues what it is given, asks epoll to watch the socket for writability,
    and writes on the next reactor turn, joining its buffer first: for each burst, two
    ``epoll_ctl`` calls, a turn and a copy. With Twisted's buffer empty, nothing can be
    overtaken, so a burst goes to the kernel at once, its parts gathered by ``sendmsg``;
    only what the kernel does not take is handed to Twisted, whose buffer and pause
    signals then work as before. Under TLS the bytes must go through the TLS layer: none.
    """

    transport: FileDescriptor
    socket: socket.socket

    @classmethod
    def beneath(cls, wire: object) -> DirectSend | None:
        """For a plain TCP transport whose buffer this can see; None otherwise."""
        sock = getattr(wire, "socket", None)
        if (
            isinstance(wire, FileDescriptor)
            and isinstance(sock, socket.socket)
            and sock.type == socket.SOCK_STREAM
            and all(hasattr(wire, name) for name in _TWISTED_BUFFER)
        ):
            return cls(wire, sock)
        return None

    def _idle(self) -> bool:
        transport = self.transport
        return (
            bool(transport.connected)
            and not transport.disconnecting
            and not transport._tempDataLen
            and transport.offset == len(transport.dataBuffer)
        )

    def send(self, parts: list[bytes]) -> list[bytes]:
        """Send what the kernel takes of ``parts`` now; return the rest, in order.

        A failing socket sends nothing here: Twisted meets the same error on its own
        write and reports the connection lost as usual."""
        if not self._idle():
            return parts
        while parts:
            batch = parts[:IOV_MAX]
            try:
                sent = self.socket.sendmsg(batch)
            except OSError:
                return parts
            whole = 0
            for part in batch:
                if sent < len(part):
                    break
                sent -= len(part)
                whole += 1
            if whole < len(batch):
                return [parts[whole][sent:], *parts[whole + 1 :]]
            parts = parts[whole:]
        return parts


_TWISTED_BUFFER = ("dataBuffer", "offset", "_tempDataLen", "connected", "disconnecting")
"""What Twisted's FileDescriptor keeps of its write buffer (DirectSend's check)."""


def peer_name(address: IAddress) -> str:
    """``host:port`` (``[host]:port`` for IPv6), or the address as text."""
    host, port = getattr(address, "host", None), getattr(address, "port", None)
    if host is None:
        return str(address)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def socket_beneath(transport: object) -> FileDescriptor | None:
    """The TCP transport beneath ``transport`` (under TLS, the wrapped one), if any."""
    inner = transport
    while inner is not None and not isinstance(inner, FileDescriptor):
        inner = getattr(inner, "transport", None)
    return inner if isinstance(inner, FileDescriptor) else None


def tune_socket_io(
    transport: object,
    size: int | None,
    read_size: int | None = None,
    *,
    no_delay: bool = True,
) -> None:
    """Send ``size`` bytes per socket call on the TCP transport beneath (under TLS, the
    wrapped one), and read ``read_size`` (default ``size``; None keeps Twisted's own):
    Twisted's 64 KiB reads and 128 KiB sends cost a reactor turn each, which dominates the
    cost of moving large frames.

    ``no_delay`` turns Nagle's algorithm off (``TCP_NODELAY``, Artemis's ``tcpNoDelay``,
    on by default there too). With it on, a small frame (a confirmation, a credit grant, an
    acknowledgement) written while an earlier small one is unacknowledged waits for the
    peer's delayed ACK, up to 40 ms on Linux: the peer's window stalls meanwhile."""
    inner = socket_beneath(transport)
    if inner is None:
        return
    if ITCPTransport.providedBy(inner):
        inner.setTcpNoDelay(no_delay)
    read = read_size if read_size is not None else size
    if read is not None:
        inner.bufferSize = read
    if size is not None:
        inner.SEND_LIMIT = max(size, FileDescriptor.SEND_LIMIT)


def peer_certificates(transport: object) -> list[x509.Certificate]:
    """The peer's verified TLS certificate chain, leaf first; empty without TLS, and at
    once in a process that never loaded OpenSSL (none of its connections is TLS)."""
    if "OpenSSL.SSL" not in sys.modules:
        return []
    from OpenSSL import SSL  # noqa: PLC0415 (loaded already)

    handle: object = (
        ISystemHandle(transport).getHandle() if ISystemHandle.providedBy(transport) else None
    )
    if not isinstance(handle, SSL.Connection):
        return []
    verified = handle.get_verified_chain(as_cryptography=True)
    if verified:
        return list(verified)
    leaf = handle.get_peer_certificate(as_cryptography=True)
    return [leaf] if leaf is not None else []
