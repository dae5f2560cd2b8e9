"""The Twisted API of the client: ``connect`` gives a ``Client`` to send, consume and
transact with, over one framed connection kept up by ``transport.reconnect``.

This module is glue: ``ClientSession`` (sans-IO) holds every protocol rule; here frames go
between it and the connection, its events become Deferreds and callbacks, and writability
combines the connection's with the session's windows. docs/client.md is the guide.
"""

from __future__ import annotations

import io
import os
import socket
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import IO, Any, cast

import attrs
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from bridge import events as event_log
from bridge.client.errors import (
    ClientClosed,
    ClientError,
    ConnectionLost,
    NodeProtocolError,
    Refused,
)
from bridge.client.events import (
    AddressInfo,
    Answered,
    ConsumerLost,
    Delivery,
    Event,
    LoginRefused,
    Ready,
    Redirected,
    SendsConfirmed,
    Settle,
    Settled,
    TopologyChanged,
)
from bridge.client.session import (
    DEFAULT_CONFIRMATION_WINDOW_SIZE,
    DEFAULT_CONSUMER_WINDOW_SIZE,
    DEFAULT_MIN_LARGE_MESSAGE_SIZE,
    ClientSession,
)
from bridge.message import HeaderValue, Message
from bridge.protocol import PACKET_TYPES, Routing, Topology
from transport.connection import FrameFactory
from transport.endpoints import client_endpoint
from transport.errors import ReconnectAttemptsExhausted
from transport.failover import FailoverEndpoint
from transport.frames import Frame
from transport.interfaces import IFrameConnection, IFrameReceiver
from transport.reconnect import Reconnector, ReconnectPolicy
from transport.settings import ConnectionSettings
from transport.tls import TLSConfig
from transport.urls import URL, parse_url

log = Logger()

NO_RECONNECT = ReconnectPolicy(reconnect_attempts=0)
"""One connection attempt, and no reconnection after a drop (Artemis's client default)."""

DEFAULT_MAX_REDIRECTS = 3
"""Redirects a client follows in a row before it counts the node as failed."""

Body = bytes | bytearray | memoryview | IO[bytes]
"""A message body: bytes, or a binary file-like object streamed as a large message."""


def _fire(deferred: Deferred[None], error: ClientError | None) -> None:
    if error is None:
        deferred.callback(None)
    else:
        deferred.errback(error)


def _settling() -> tuple[Deferred[None], Settle]:
    deferred: Deferred[None] = Deferred()
    return deferred, partial(_fire, deferred)


class _Trace:
    """What a traced client records (``connect(trace=...)``): one event per send, send
    outcome, delivery and acknowledgement, and the spans it waited to be writable.

    Sends are numbered per client and stamped with the ``txb.producer`` and ``txb.seq``
    headers (kept when the application set both itself, so a resend of the same logical
    message keeps its identity); deliveries are recorded with the identity they carry.
    """

    def __init__(self, writer: event_log.EventWriter, producer: str) -> None:
        self.record = writer.record
        self.producer = producer
        self.seq = 0

    def send(
        self,
        client: Client,
        address: str,
        body: Body,
        headers: Mapping[str, HeaderValue] | None,
        on_settled: Callable[[ClientError | None], object] | None,
    ) -> tuple[dict[str, HeaderValue], Callable[[ClientError | None], None]]:
        stamped = dict(headers or {})
        producer = stamped.get(event_log.TRACE_PRODUCER)
        seq = stamped.get(event_log.TRACE_SEQ)
        if not isinstance(producer, str) or not isinstance(seq, int):
            producer, seq = self.producer, self.seq
            self.seq += 1
            stamped[event_log.TRACE_PRODUCER] = producer
            stamped[event_log.TRACE_SEQ] = seq
        size = len(body) if isinstance(body, bytes | bytearray | memoryview) else None
        node = client.node_name or None
        self.record(event_log.SEND_INVOKED, producer, seq, node=node, address=address, size=size)

        def settled(error: ClientError | None) -> None:
            if error is None:
                kind, detail = event_log.SEND_CONFIRMED, None
            else:
                # A refusal is the node's answer; a lost connection leaves it unknown.
                kind = (
                    event_log.SEND_FAILED if isinstance(error, Refused) else event_log.SEND_UNKNOWN
                )
                detail = f"{type(error).__name__}: {error}"
            self.record(
                kind, producer, seq, node=client.node_name or None, address=address, detail=detail
            )
            if on_settled is not None:
                on_settled(error)

        return stamped, settled

    def not_sent(self, headers: Mapping[str, HeaderValue], address: str, error: Exception) -> None:
        producer = headers[event_log.TRACE_PRODUCER]
        seq = headers[event_log.TRACE_SEQ]
        assert isinstance(producer, str) and isinstance(seq, int)
        self.record(
            event_log.SEND_FAILED, producer, seq, address=address, detail=f"not sent: {error}"
        )

    def delivery(self, client: Client, delivery: Delivery, kind: str, detail: str | None) -> None:
        message = delivery.message
        headers = message.headers
        producer = headers.get(event_log.TRACE_PRODUCER)
        seq = headers.get(event_log.TRACE_SEQ)
        file = delivery.body_file
        self.record(
            kind,
            producer if isinstance(producer, str) else None,
            seq if isinstance(seq, int) else None,
            message=str(message.id),
            node=client.node_name or None,
            address=message.address,
            size=len(message.body) if file is None else None,
            detail=detail,
        )


@implementer(IFrameReceiver)
class _Receiver:
    """One connection's receiver: hands everything to the client."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def connection_made(self, connection: IFrameConnection) -> None:
        self._client._connection_made(connection)

    def frame_received(self, frame: Frame) -> None:
        self._client._frame_received(frame)

    def connection_lost(self, reason: BaseException) -> None:
        self._client._connection_lost(reason)


@attrs.frozen
class ReceivedMessage:
    """A message delivered to a consumer.

    ``body`` is the whole body as bytes: for a large message that reads its spooled file
    into memory, so read ``body_file`` instead when it may be big (``is_large``).
    """

    _client: Client
    delivery: Delivery

    @property
    def id(self) -> int:
        return self.delivery.message.id

    @property
    def address(self) -> str:
        return self.delivery.message.address

    @property
    def headers(self) -> Mapping[str, HeaderValue]:
        return self.delivery.message.headers

    @property
    def durable(self) -> bool:
        return self.delivery.message.durable

    @property
    def duplicate_id(self) -> bytes | None:
        return self.delivery.message.duplicate_id

    @property
    def delivery_count(self) -> int:
        """1 on the first delivery, then one more per redelivery."""
        return self.delivery.delivery_count

    @property
    def redelivered(self) -> bool:
        """Whether the node handed this message out before (a consumer crashed, closed or
        gave it back without acknowledging it), as STOMP's ``redelivered`` says."""
        return self.delivery.delivery_count > 1

    @property
    def is_large(self) -> bool:
        return self.delivery.body_file is not None

    @property
    def body(self) -> bytes:
        file = self.delivery.body_file
        if file is None:
            return self.delivery.message.body
        file.seek(0)
        return file.read()

    @property
    def body_file(self) -> IO[bytes]:
        """The body as a binary file positioned at its start (the spool of a large one)."""
        file = self.delivery.body_file
        if file is None:
            return io.BytesIO(self.delivery.message.body)
        file.seek(0)
        return file

    def ack(self, *, cumulative: bool = False, tx: Transaction | None = None) -> None:
        """Acknowledge (``cumulative``: with every earlier unsettled message of this
        consumer); with ``tx``, as part of that transaction."""
        self._client._ack(self, cumulative, tx, None)

    def ack_durably(
        self, *, cumulative: bool = False, tx: Transaction | None = None
    ) -> Deferred[None]:
        """Acknowledge, and fire once the node has the acknowledgement durably."""
        deferred, settle = _settling()
        self._client._ack(self, cumulative, tx, settle)
        return deferred

    def nack(self, requeue: bool = True) -> None:
        """Refuse: back on the queue for redelivery (``requeue``), or dropped."""
        self._client._nack(self, requeue)


@attrs.frozen
class Transaction:
    """A local transaction: pass it as ``tx`` to sends and acks, then commit or roll back."""

    _client: Client
    tx_id: int

    def commit(self) -> Deferred[None]:
        """Make its sends and acks take effect at once; fires when durable."""
        return self._client._end(self.tx_id, commit=True)

    def rollback(self) -> Deferred[None]:
        """Drop its sends and give its acknowledged messages back for redelivery."""
        return self._client._end(self.tx_id, commit=False)


class Consumer:
    """Messages from one queue: by ``receive()``, or by the ``on_message`` callback given
    to ``Client.consumer``. Taking a message gives its bytes back to the consumer's window.
    """

    def __init__(
        self,
        client: Client,
        consumer_id: int,
        queue: str,
        window_size: int,
        on_message: Callable[[ReceivedMessage], object] | None,
    ) -> None:
        self._client = client
        self.consumer_id = consumer_id
        self.queue = queue
        self._window_size = window_size
        self._on_message = on_message
        self._buffer: deque[ReceivedMessage] = deque()
        self._waiters: deque[Deferred[ReceivedMessage]] = deque()
        self._error: ClientError | None = None

    def receive(self) -> Deferred[ReceivedMessage]:
        """The next message; cancel the Deferred to stop waiting."""
        if self._on_message is not None:
            raise ValueError(f"the consumer of {self.queue!r} hands messages to on_message")
        if self._error is not None:
            return fail(self._error)
        if self._buffer:
            message = self._buffer.popleft()
            self._client._taken(message)
            return succeed(message)
        waiter: Deferred[ReceivedMessage] = Deferred(self._cancel)
        self._waiters.append(waiter)
        if self._window_size == 0:
            self._client._demand(self.consumer_id)
        return waiter

    def _cancel(self, waiter: Deferred[ReceivedMessage]) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)

    def close(self) -> Deferred[None]:
        """Stop consuming; messages taken but not acknowledged go back to the queue.
        Waiting ``receive()`` calls fail with ``ClientClosed``."""
        self._fail(ClientClosed(f"the consumer of queue {self.queue!r} was closed"))
        return self._client._close_consumer(self.consumer_id)

    def _deliver(self, message: ReceivedMessage) -> None:
        if self._on_message is not None:
            self._client._taken(message)
            try:
                self._on_message(message)
            except Exception:
                log.failure("on_message of the consumer of {queue!r} failed", queue=self.queue)
        elif self._waiters:
            self._client._taken(message)
            self._waiters.popleft().callback(message)
        else:
            self._buffer.append(message)

    def _connection_lost(self) -> None:
        """Messages not taken yet are the node's again: it delivers them anew."""
        self._buffer.clear()

    def _fail(self, error: ClientError) -> None:
        if self._error is None:
            self._error = error
        self._buffer.clear()
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            waiter.errback(error)


class Client:
    """A client of one node. Made by ``connect``; see the module docstring."""

    def __init__(
        self,
        reactor: Any,
        urls: Sequence[URL],
        session: ClientSession,
        *,
        tls: TLSConfig | None,
        settings: ConnectionSettings | None,
        reconnect: ReconnectPolicy,
        trace: event_log.EventWriter | None = None,
        max_redirects: int = DEFAULT_MAX_REDIRECTS,
    ) -> None:
        if max_redirects < 0:
            raise ValueError(f"max-redirects must not be negative, got {max_redirects}")
        self._session = session
        self._reactor = reactor
        self._tls = tls
        self._policy = reconnect
        self._max_redirects = max_redirects
        self._redirects = 0
        """Redirects followed since the last login."""
        self._redirected_to: URL | None = None
        self.topology: Topology | None = None
        """The cluster's latest TOPOLOGY, as the node last reached sent it (None: not a
        member of a cluster, or a node of an older protocol)."""
        self._trace = None if trace is None else _Trace(trace, session.client_id)
        self.urls = tuple(urls)
        """The node and its backups, tried in turn (``transport.failover``)."""
        self._connection: IFrameConnection | None = None
        self._established = False
        """Whether the node accepted the login on the current connection."""
        self._consumers: dict[int, Consumer] = {}
        self._writable_waiters: list[tuple[str | None, Deferred[None]]] = []
        self._closed_waiters: list[Deferred[ClientError]] = []
        self._closed_by: ClientError | None = None
        self._gathering_on: IFrameConnection | None = None
        """The connection asked to end this turn's gathered sends before it writes."""
        self._connected: Deferred[Client] | None = Deferred(self._give_up_connecting)
        self._closed = False
        clock = cast(IReactorTime, reactor)
        factory = FrameFactory(
            lambda: _Receiver(self), clock, settings, PACKET_TYPES, is_client=True
        )
        self._order = self.urls
        """The URLs in the order attempts go to them: ``urls``, or once a TOPOLOGY came,
        the node's and its failover nodes'."""
        endpoints = [client_endpoint(reactor, url, tls) for url in self.urls]
        self._endpoint = FailoverEndpoint(endpoints)
        self._reconnector = Reconnector(
            self._endpoint,
            factory,
            reconnect,
            clock,
            on_exhausted=self._exhausted,
        )

    def _give_up_connecting(self, _: Deferred[Client]) -> None:
        """Whoever waited for the connection stopped waiting (cancelled it): close, so
        that no attempt goes on and no connection is left that nobody holds."""
        self._connected = None
        self.close()

    def _start(self) -> Deferred[Client]:
        connected = self._connected
        assert connected is not None
        self._reconnector.start()
        return connected

    # -- state ------------------------------------------------------------------------

    @property
    def url(self) -> URL:
        """The URL connected to (or tried next, between connections)."""
        if self._endpoint.detour is not None and self._redirected_to is not None:
            return self._redirected_to
        return self._order[self._endpoint.current]

    @property
    def node_name(self) -> str:
        return self._session.node_name

    @property
    def node_id(self) -> str:
        """The node's unique id, from its CONNECTED ("" before the first login); stable
        across its restarts, and shared by a live/backup pair."""
        return self._session.node_id

    @property
    def is_closed(self) -> bool:
        """Closed for good: by ``close``, a refused login, or the connection lost with no
        reconnection left."""
        return self._closed

    @property
    def is_writable(self) -> bool:
        """Whether to send now: connected, the confirmation window not full, nothing
        waiting, and the connection writable."""
        connection = self._connection
        return connection is not None and connection.is_writable and self._session.is_writable

    def address_writable(self, address: str) -> bool:
        """``is_writable``, and ``address`` has producer credit left."""
        connection = self._connection
        return (
            connection is not None
            and connection.is_writable
            and self._session.address_writable(address)
        )

    def when_writable(self, address: str | None = None) -> Deferred[None]:
        """Fire when ``is_writable`` (``address_writable(address)``) is true."""
        if self._closed:
            return fail(ClientClosed("the client is closed"))
        if self.is_writable if address is None else self.address_writable(address):
            return succeed(None)
        entry: tuple[str | None, Deferred[None]]

        def cancel(_: Deferred[None]) -> None:
            if entry in self._writable_waiters:
                self._writable_waiters.remove(entry)

        waiter: Deferred[None] = Deferred(cancel)
        if self._trace is not None and not self._writable_waiters:
            self._trace.record(event_log.FLOW_PAUSED, address=address, detail=self._why_paused())
        entry = (address, waiter)
        self._writable_waiters.append(entry)
        return waiter

    def _why_paused(self) -> str:
        connection = self._connection
        if connection is None:
            return "disconnected"
        if not connection.is_writable:
            return "connection"
        if not self._session.is_writable:
            return "confirmation-window"
        return "producer-credit"

    @property
    def unconfirmed(self) -> int:
        """Sends neither confirmed nor refused yet."""
        return self._session.unconfirmed

    # -- producing --------------------------------------------------------------------

    def send(
        self,
        address: str,
        body: Body,
        headers: Mapping[str, HeaderValue] | None = None,
        *,
        durable: bool = True,
        duplicate_id: bytes | None = None,
        tx: Transaction | None = None,
    ) -> Deferred[None]:
        """Send a message; the Deferred (one per send) fires when the node confirms it, or
        fails with the ``Refused`` error the node gave. A file-like ``body`` is streamed as
        a large message. Bulk producers: ``send_nowait``."""
        deferred, settle = _settling()
        try:
            self.send_nowait(
                address,
                body,
                headers,
                durable=durable,
                duplicate_id=duplicate_id,
                tx=tx,
                on_settled=settle,
            )
        except ClientError as error:
            return fail(error)
        return deferred

    def send_nowait(
        self,
        address: str,
        body: Body,
        headers: Mapping[str, HeaderValue] | None = None,
        *,
        durable: bool = True,
        duplicate_id: bytes | None = None,
        tx: Transaction | None = None,
        on_settled: Callable[[ClientError | None], object] | None = None,
    ) -> None:
        """Send without a Deferred: ``on_settled(None)`` on confirmation, or with the error.
        Raises ``ClientError`` at once if the client is closed or ``tx`` is not open."""
        trace = self._trace
        if trace is not None:
            headers, on_settled = trace.send(self, address, body, headers, on_settled)
        if isinstance(body, bytes | bytearray | memoryview):
            message = Message(0, address, durable, headers or {}, bytes(body), duplicate_id)
            file = None
        else:
            message = Message(0, address, durable, headers or {}, b"", duplicate_id)
            file = body
        try:
            self._session.send(
                message,
                tx_id=None if tx is None else tx.tx_id,
                callback=on_settled,
                body_file=file,
            )
        except ClientError as error:
            if trace is not None:
                trace.not_sent(message.headers, address, error)
            raise
        self._flush_sends()

    def send_message_nowait(
        self,
        message: Message,
        *,
        body_file: IO[bytes] | None = None,
        on_settled: Callable[[ClientError | None], object] | None = None,
    ) -> bool:
        """``send_nowait`` of a message made already (its id is ignored), with its body or
        from ``body_file``: a bridge's forward, whose encoding it keeps where it has one
        (``Message.forwarded``). Returns ``address_writable(message.address)`` after the
        send, worked out with it (a bridge asks after every forward)."""
        if self._trace is not None:
            body = message.body if body_file is None else body_file
            self.send_nowait(
                message.address,
                body,
                message.headers,
                durable=message.durable,
                duplicate_id=message.duplicate_id,
                on_settled=on_settled,
            )
            return self.address_writable(message.address)
        writable = self._session.send(message, callback=on_settled, body_file=body_file)
        self._flush_sends()
        connection = self._connection
        return writable and connection is not None and connection.is_writable

    # -- queues -----------------------------------------------------------------------

    def create_queue(
        self,
        name: str,
        address: str | None = None,
        *,
        routing: Routing = Routing.ANYCAST,
        durable: bool = True,
        filter: str | None = None,
    ) -> Deferred[None]:
        """Create queue ``name`` on ``address`` (default: the queue's name)."""
        deferred, settle = _settling()
        return self._call(
            deferred,
            lambda: self._session.create_queue(
                name,
                name if address is None else address,
                routing=routing,
                durable=durable,
                filter=filter,
                callback=settle,
            ),
        )

    def delete_queue(self, name: str) -> Deferred[None]:
        """Delete queue ``name`` and its messages."""
        deferred, settle = _settling()
        return self._call(deferred, lambda: self._session.delete_queue(name, settle))

    def address_info(self, address: str) -> Deferred[AddressInfo]:
        """How ``address`` is set up on the node, or would be if created on first use
        (asking creates nothing). Needs the ``send`` permission on it. Asked again after a
        reconnection until the node answers."""
        answered: Deferred[AddressInfo] = Deferred()

        def failed(error: ClientError | None) -> None:
            if error is not None:
                answered.errback(error)

        return self._call(
            answered,
            lambda: self._session.address_info(address, answer=answered.callback, callback=failed),
        )

    def _call(self, deferred: Deferred[Any], call: Callable[[], object]) -> Deferred[Any]:
        try:
            call()
        except ClientError as error:
            return fail(error)
        self._after()
        return deferred

    # -- consuming --------------------------------------------------------------------

    def consumer(
        self,
        queue: str,
        *,
        filter: str | None = None,
        window_size: int = DEFAULT_CONSUMER_WINDOW_SIZE,
        browse_only: bool = False,
        on_message: Callable[[ReceivedMessage], object] | None = None,
    ) -> Deferred[Consumer]:
        """Consume from ``queue``; fires once the node created the consumer.

        ``window_size`` is Artemis's consumer-window-size: bytes the node may send ahead of
        what the application took (-1 unlimited, 0 one message per ``receive()``).
        ``browse_only`` reads without taking. With ``on_message`` every message is handed
        to that callback as it arrives, and ``receive()`` is not used.
        """
        created, settle = _settling()
        try:
            consumer_id = self._session.open_consumer(
                queue,
                filter=filter,
                window_size=window_size,
                browse_only=browse_only,
                callback=settle,
            )
        except ClientError as error:
            return fail(error)
        consumer = Consumer(self, consumer_id, queue, window_size, on_message)
        self._consumers[consumer_id] = consumer

        def failed(failure: Any) -> Any:
            self._consumers.pop(consumer_id, None)
            return failure

        self._flush()
        return created.addCallbacks(lambda _: consumer, failed)

    def _close_consumer(self, consumer_id: int) -> Deferred[None]:
        self._consumers.pop(consumer_id, None)
        deferred, settle = _settling()
        return self._call(deferred, lambda: self._session.close_consumer(consumer_id, settle))

    def _taken(self, message: ReceivedMessage) -> None:
        self._session.released(message.delivery)
        self._flush()

    def _demand(self, consumer_id: int) -> None:
        self._session.demand(consumer_id)
        self._flush()

    def _ack(
        self,
        message: ReceivedMessage,
        cumulative: bool,
        tx: Transaction | None,
        settle: Settle | None,
    ) -> None:
        if self._trace is not None:
            self._trace.delivery(
                self, message.delivery, event_log.ACKED, "cumulative" if cumulative else None
            )
        self._session.ack(
            message.delivery,
            cumulative=cumulative,
            tx_id=None if tx is None else tx.tx_id,
            callback=settle,
        )
        self._flush()

    def _nack(self, message: ReceivedMessage, requeue: bool) -> None:
        self._session.nack(message.delivery, requeue=requeue)
        self._flush()

    # -- transactions -----------------------------------------------------------------

    def begin(self) -> Deferred[Transaction]:
        """Open a local transaction; fires once the node opened it."""
        deferred, settle = _settling()
        try:
            tx_id = self._session.begin(settle)
        except ClientError as error:
            return fail(error)
        self._flush()
        return deferred.addCallback(lambda _: Transaction(self, tx_id))

    def _end(self, tx_id: int, *, commit: bool) -> Deferred[None]:
        deferred, settle = _settling()
        end = self._session.commit if commit else self._session.rollback
        return self._call(deferred, lambda: end(tx_id, settle))

    # -- closing ----------------------------------------------------------------------

    def close(self) -> Deferred[None]:
        """Close the connection and stop reconnecting; whatever is pending fails with
        ``ClientClosed``. Fires once the connection is gone."""
        if self._closed:
            return succeed(None)
        self._fail(ClientClosed("the client was closed"))
        if self._connection is not None:
            self._connection.close()
        return self._reconnector.stop()

    def when_closed(self) -> Deferred[ClientError]:
        """Fires with the error that ended the client: its connection lost for good, a
        refused login, or ``close``. Whoever keeps a client (a bridge) learns here that it
        has to make another."""
        if self._closed_by is not None:
            return succeed(self._closed_by)
        waiter: Deferred[ClientError] = Deferred(self._closed_waiters.remove)
        self._closed_waiters.append(waiter)
        return waiter

    def _fail(self, error: ClientError) -> None:
        self._closed = True
        if self._closed_by is None:
            self._closed_by = error
        self._session.close(error)
        self._after()
        consumers, self._consumers = self._consumers, {}
        for consumer in consumers.values():
            consumer._fail(error)
        waiters, self._writable_waiters = self._writable_waiters, []
        if waiters and self._trace is not None:
            self._trace.record(event_log.FLOW_RESUMED, detail="closed")
        for _, waiter in waiters:
            waiter.errback(error)
        connected, self._connected = self._connected, None
        if connected is not None:
            connected.errback(error)
        closed, self._closed_waiters = self._closed_waiters, []
        for closed_waiter in closed:
            closed_waiter.callback(error)

    def _exhausted(self, exhausted: ReconnectAttemptsExhausted) -> None:
        if not self._closed:
            self._fail(
                ConnectionLost(
                    f"the connection to {self.url} is lost: {exhausted}", exhausted.cause
                )
            )

    # -- the connection ---------------------------------------------------------------

    def _connection_made(self, connection: IFrameConnection) -> None:
        if self._closed:
            connection.close()
            return
        self._connection = connection
        self._established = False
        connection.add_writability_listener(self._writability_changed)
        self._session.connection_made()
        self._flush()

    def _frame_received(self, frame: Frame) -> None:
        try:
            self._session.receive_frame(frame.type, frame.payload)
        except NodeProtocolError as error:
            log.warn("{url}: {error}; closing the connection", url=self.url, error=error)
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.close(error=str(error))
        self._after()

    def _connection_lost(self, reason: BaseException) -> None:
        self._connection = None
        self._session.connection_lost()
        for consumer in self._consumers.values():
            consumer._connection_lost()
        if not self._closed:
            log.info("connection to {url} lost: {reason}", url=self.url, reason=reason)
        if not self._established and self._endpoint.detour is None:
            self._endpoint.failed()  # never logged in there: the next attempt may move on
        self._after()

    def _writability_changed(self, writable: bool) -> None:
        if writable:
            self._flush()
            self._wake_writers()

    def _flush_sends(self) -> None:
        """After a send: write what is whole now; sends the session gathers into one
        SEND_MANY go when the connection ends its turn (at the latest when it writes)."""
        if self._session.has_frames_to_send:
            self._flush(end_of_turn=False)
        connection = self._connection
        if (
            connection is not None
            and self._gathering_on is not connection  # (asked first: true once a turn)
            and self._session.gathering
        ):
            self._gathering_on = connection
            connection.call_before_flush(self._end_of_turn)

    def _end_of_turn(self) -> None:
        self._gathering_on = None
        self._flush()

    def _flush(self, end_of_turn: bool = True) -> None:
        """Write what the session has to send; read chunks of a large send only while
        the connection is writable (the listener resumes them)."""
        connection = self._connection
        session = self._session
        if connection is None or not session.has_data_to_send:
            return
        while True:
            frames = session.data_to_send(connection.is_writable, end_of_turn=end_of_turn)
            for frame_type, payload in frames:
                connection.send(frame_type, payload)
            if not frames or not session.streaming:
                return

    def _after(self) -> None:
        """Act on the session's events, write what it has to send, wake writers."""
        events = self._session.take_events()
        if events:
            self._handle(events)
        self._flush()
        if self._writable_waiters:
            self._wake_writers()

    def _handle(self, events: list[Event]) -> None:
        for event in events:
            if type(event) is Delivery:
                if self._trace is not None:
                    count = event.delivery_count
                    detail = None if count == 1 else f"delivery {count}"
                    self._trace.delivery(self, event, event_log.RECEIVED, detail)
                consumer = self._consumers.get(event.consumer_id)
                if consumer is not None:
                    consumer._deliver(ReceivedMessage(self, event))
            elif type(event) is SendsConfirmed:
                for callback in event.callbacks:
                    self._settle(callback, None)
            elif type(event) is Settled:
                self._settle(event.callback, event.error)
            elif type(event) is Answered:
                try:
                    event.callback(event.info)
                except Exception:
                    log.failure("a query's callback failed")
            elif type(event) is Ready:
                self._ready(event)
            elif type(event) is ConsumerLost:
                lost = self._consumers.pop(event.consumer_id, None)
                if lost is not None:
                    log.warn("{error}", error=event.error)
                    lost._fail(event.error)
            elif type(event) is LoginRefused:
                self._refused(event.error)
            elif type(event) is TopologyChanged:
                self._follow(event.topology)
            elif type(event) is Redirected:
                self._redirected(event)

    @staticmethod
    def _settle(callback: Settle, error: ClientError | None) -> None:
        try:
            callback(error)
        except Exception:
            log.failure("a send or request callback failed")

    def _follow(self, topology: Topology) -> None:
        """Keep the map; from now on ask for the store this node serves, and after a drop
        retry this node first (``reconnect-attempts`` times: a glitch is not a
        failover), then its failover nodes in order, one attempt each. A node that
        serves nothing drains: after the drop, its failover nodes at once, asking for
        any store."""
        self.topology = topology
        members = {member.node_id: member for member in topology.members}
        own = members.get(self.node_name)
        if own is None or not own.urls:
            return
        failover = [
            parse_url(members[node].urls[0])
            for node in own.failover
            if node in members and members[node].urls
        ]
        draining = not own.serves and bool(failover)
        if draining:
            # The node drains (it serves nothing): its failover nodes, at once, for any
            # store (the first of them takes this node's messages).
            self._session.store = ""
            order, first_attempts = failover, 1
        else:
            self._session.store = own.serves[0] if own.serves else own.node_id
            order, first_attempts = [parse_url(own.urls[0]), *failover], 0
        attempts = self._policy.reconnect_attempts
        if attempts == 0:
            return  # no reconnection at all
        self._order = tuple(order)
        first = first_attempts or (attempts if attempts > 0 else sys.maxsize)
        endpoints = [client_endpoint(self._reactor, url, self._tls) for url in order]
        self._endpoint.follow(endpoints, first)
        if attempts > 0:  # a whole round before giving up
            policy = attrs.evolve(self._policy, reconnect_attempts=attempts + len(order) - 1)
            self._reconnector.reconsider(policy)

    def _redirected(self, event: Redirected) -> None:
        """The node does not serve our store: go where it says, at once (or, when no
        member serves it yet, on to the next in the order)."""
        self._redirects += 1
        connection = self._connection
        if self._redirects > self._max_redirects:
            error = ConnectionLost(
                f"redirected {self._redirects} times in a row looking for store "
                f"{event.store!r} (max-redirects {self._max_redirects})"
            )
            self._fail(error)
            self._reconnector.stop()
        elif event.urls:
            log.info(
                "{url}: store {store} is served at {to}; going there",
                url=self.url,
                store=event.store,
                to=event.urls[0],
            )
            self._redirected_to = target = parse_url(event.urls[0])
            self._endpoint.redirect(client_endpoint(self._reactor, target, self._tls))
            self._reconnector.retry_now()
        else:
            log.info("{url}: no member serves store {store} yet", url=self.url, store=event.store)
        if connection is not None:
            connection.close()

    def _ready(self, event: Ready) -> None:
        self._established = True
        self._redirects = 0
        self._endpoint.established()
        if event.reconnected:
            log.info(
                "reconnected to {url} (node {node}); unconfirmed sends resent, consumers "
                "created again",
                url=self.url,
                node=event.node_name,
            )
        connected, self._connected = self._connected, None
        if connected is not None:
            connected.callback(self)

    def _refused(self, error: ClientError) -> None:
        connected, self._connected = self._connected, None
        self._fail(error)
        stopped = self._reconnector.stop()
        if connected is not None:
            stopped.addBoth(lambda _: connected.errback(error))

    def _wake_writers(self) -> None:
        still: list[tuple[str | None, Deferred[None]]] = []
        ready: list[Deferred[None]] = []
        for address, waiter in self._writable_waiters:
            writable = self.is_writable if address is None else self.address_writable(address)
            (ready.append(waiter) if writable else still.append((address, waiter)))
        self._writable_waiters = still
        if ready and not still and self._trace is not None:
            self._trace.record(event_log.FLOW_RESUMED)
        for waiter in ready:
            waiter.callback(None)


def connect(
    reactor: Any,
    url: str | URL | Sequence[str | URL],
    *,
    user: str | None = None,
    password: str | None = None,
    client_id: str | None = None,
    tls: TLSConfig | None = None,
    confirmation_window_size: int = DEFAULT_CONFIRMATION_WINDOW_SIZE,
    min_large_message_size: int = DEFAULT_MIN_LARGE_MESSAGE_SIZE,
    producer_window_size: int = -1,
    reconnect: ReconnectPolicy = NO_RECONNECT,
    settings: ConnectionSettings | None = None,
    trace: event_log.EventWriter | None = None,
    max_redirects: int = DEFAULT_MAX_REDIRECTS,
) -> Deferred[Client]:
    """Connect and log in to the node at ``url``; fires with the ``Client`` once the node
    accepted the login. Fails with ``AuthenticationFailed`` (the node's words) or
    ``ConnectionLost`` when no attempt ``reconnect`` allows succeeded.

    ``url`` may be a list: a live node and its backups. Each attempt then goes to the node
    the last one reached, and after a failed attempt there to the next in the list, so
    that a client follows a failover (the attempts ``reconnect`` allows count across the
    list).

    With ``trace``, the client records its sends, their outcomes, deliveries, acks and
    flow-control pauses into that event writer (docs/events.md), ``client_id`` (default:
    the writer's process name) being the producer id. ``producer_window_size`` caps the
    producer credit used per address below the node's grant (-1: the node's grant).

    A node of a cluster sends the client its failover map (TOPOLOGY): after a drop the
    client retries its node ``reconnect.reconnect_attempts`` times, then the node's
    failover nodes, asking each for the store it was on; a node that does not serve it
    redirects the client to the one that does, at most ``max_redirects`` times in a row
    (docs/client.md, "Following the failover map")."""
    given = [url] if isinstance(url, (str, URL)) else list(url)
    if not given:
        raise ValueError("connect: no URL given")
    parsed = [each if isinstance(each, URL) else parse_url(each) for each in given]
    session = ClientSession(
        client_id=client_id
        or (trace.process if trace is not None else None)
        or f"txbridge-client@{socket.gethostname()}:{os.getpid()}",
        user=user,
        password=password,
        confirmation_window_size=confirmation_window_size,
        min_large_message_size=min_large_message_size,
        producer_window_size=producer_window_size,
        max_frame_size=(settings or ConnectionSettings()).max_frame_size,
    )
    client = Client(
        reactor,
        parsed,
        session,
        tls=tls,
        settings=settings,
        reconnect=reconnect,
        trace=trace,
        max_redirects=max_redirects,
    )
    return client._start()
