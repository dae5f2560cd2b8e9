"""The client side of a core protocol session, sans-IO (h11/h2 style).

``ClientSession`` is a plain object: the glue feeds it frames (``receive_frame``) and
application calls (``send``, ``ack``, ``open_consumer`` ...), and takes from it the frames
to write (``data_to_send``) and what happened (``take_events``). It opens no socket and
reads no clock, so every rule of docs/protocol.md is testable packet by packet.

It outlives connections: when one drops (``connection_lost``) and the next is made, it
logs in again, re-creates its consumers and resends every send the node had not confirmed,
in order (session rule 3; a send with a duplicate id is therefore not stored twice). A
consumer re-created on a node of protocol 5 claims the messages the application took and
has not settled (REATTACH_CONSUMER): those the node still had waiting become deliveries
on the new connection, and acknowledging the application's copy acknowledges them; the
others are stale.

Flow control lives here: the confirmation window (bytes of unconfirmed sends), producer
credits per address (rule 4) and consumer credits (rule 5), granted back as the application
takes messages. A send that the windows do not allow yet waits in order; ``is_writable``
tells the application to stop producing until they open.

What it keeps is in modules of their own: the events it returns (``bridge.client.events``),
each send (``bridge.client.sends``), each request (``bridge.client.requests``), each
consumer (``bridge.client.consumers``) and the transactions (``bridge.client.transactions``).
"""

from __future__ import annotations

import io
import tempfile
from collections import deque
from collections.abc import Callable
from typing import IO, Protocol

import attrs
from automat import NoTransition, TypeMachineBuilder

from bridge.client.consumers import ConsumerState, Incoming, Waiting
from bridge.client.errors import (
    ClientClosed,
    ClientError,
    ConnectionLost,
    NodeProtocolError,
    NotAcknowledgeable,
    StaleDelivery,
    refused,
)
from bridge.client.events import (
    AddressInfo,
    Answer,
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
from bridge.client.requests import ANSWERS, Frame, Request, RequestKind
from bridge.client.sends import Barrier, PendingSend
from bridge.client.transactions import Transactions
from bridge.message import Message, MessageFormatError, encode_message
from bridge.protocol import (
    BATCH_BYTES,
    FRAME_SIZE_UNSTATED,
    LARGE_CHUNK_SIZE,
    PROTOCOL_VERSION,
    REATTACH_VERSION,
    SEND_MANY_OVERHEAD,
    UNLIMITED,
    Ack,
    CloseConsumer,
    ClusterConnect,
    Connected,
    ConsumerCredits,
    CreateConsumer,
    CreateQueue,
    DeleteQueue,
    Deliver,
    DeliverLargeBegin,
    DeliverLargeChunk,
    DeliverMany,
    Failed,
    Nack,
    Ok,
    Packet,
    PacketFormatError,
    ProducerCredits,
    QueryAddress,
    ReattachConsumer,
    Reattached,
    Redirect,
    Routing,
    Send,
    SendConfirmed,
    SendFailed,
    SendLargeBegin,
    SendLargeChunk,
    Topology,
    TxBegin,
    TxCommit,
    TxRollback,
    decode_packet,
    encode_packet,
    encode_sends,
    large_chunk_size,
)
from bridge.protocol import AddressInfo as AddressInfoPacket

DEFAULT_CONFIRMATION_WINDOW_SIZE = 1024 * 1024
"""Bytes of sends that may be unconfirmed (Artemis's ``confirmation-window-size``)."""
DEFAULT_CONSUMER_WINDOW_SIZE = 1024 * 1024
"""A consumer's credit in bytes (Artemis's ``consumer-window-size``); -1 unlimited, 0 none."""
DEFAULT_MIN_LARGE_MESSAGE_SIZE = 100 * 1024
"""Bodies of this many bytes or more are sent as large messages (``min-large-message-size``)."""
DEFAULT_CHUNK_SIZE = LARGE_CHUNK_SIZE
"""Bytes read from a large body's file per SEND_LARGE_CHUNK (fewer if the node reads
smaller frames)."""
DEFAULT_SPOOL_MEMORY = 1024 * 1024
"""Bytes of a received large body kept in memory before its spool file goes to disk."""


_ROUTING_WORDS = {
    None: "",
    Routing.ANYCAST: "anycast",
    Routing.MULTICAST: "multicast",
    Routing.BOTH: "anycast,multicast",
}
"""``AddressInfo.routing`` for each ADDRESS_INFO ``routing``."""


def default_spool() -> IO[bytes]:
    """Where a large delivery's body goes: memory up to 1 MiB, then a temporary file."""
    return tempfile.SpooledTemporaryFile(max_size=DEFAULT_SPOOL_MEMORY)


# -- the connection life cycle (automat) ----------------------------------------------


class _Lifecycle(Protocol):
    def connection_made(self) -> None: ...
    def connected(self, packet: Connected) -> None: ...
    def refused(self, packet: Failed) -> None: ...
    def redirected(self, packet: Redirect) -> None: ...
    def connection_lost(self) -> None: ...
    def close(self, error: ClientError) -> None: ...


# -- the session -----------------------------------------------------------------------


class ClientSession:
    """One client's session with a node, across reconnections. See the module docstring."""

    def __init__(
        self,
        *,
        client_id: str,
        user: str | None = None,
        password: str | None = None,
        confirmation_window_size: int = DEFAULT_CONFIRMATION_WINDOW_SIZE,
        min_large_message_size: int = DEFAULT_MIN_LARGE_MESSAGE_SIZE,
        producer_window_size: int = UNLIMITED,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        spool: Callable[[], IO[bytes]] = default_spool,
        max_frame_size: int = FRAME_SIZE_UNSTATED,
    ) -> None:
        if not 0 < confirmation_window_size <= 0xFFFF_FFFF:
            raise ValueError(
                f"confirmation-window-size must be 1 to 4294967295 bytes, "
                f"got {confirmation_window_size}"
            )
        if min_large_message_size < 1 or chunk_size < 1:
            raise ValueError("min-large-message-size and the chunk size must be positive")
        self.client_id = client_id
        self.user = user
        self._password = password
        self.confirmation_window_size = confirmation_window_size
        self.min_large_message_size = min_large_message_size
        self._chunk_size = self._chunk_limit = chunk_size
        self._spool = spool
        self.max_frame_size = max_frame_size
        """The largest frame payload this client reads, stated in CONNECT."""
        self._out: list[Frame] = []
        self._run: list[bytes] = []
        """Sends gathered for one SEND_MANY, encoded: consecutive sequences from
        ``_run_first`` in one transaction (``_run_tx``), ended by any other frame, by
        ``data_to_send`` at the end of the turn, or by reaching ``_run_limit`` bytes."""
        self._run_first = 0
        self._run_tx: int | None = None
        self._run_bytes = 0
        self._run_limit = 0
        self._events: list[Event] = []
        self._is_ready = False
        self._closed = False
        self._epoch = 0
        self._connections = 0
        self._version = PROTOCOL_VERSION
        """The protocol version of the connection (its CONNECTED's)."""
        self.node_name = ""
        self.node_id = ""
        self.store = ""
        """The store asked for at the next connection (the one the sessions were on), ""
        for any: the glue sets it from the TOPOLOGY."""
        # requests
        self._next_request = 1  # 0 answers the CONNECT
        self._requests: dict[int, Request] = {}
        # producing
        self._sequence = 0
        self._confirmed = 0
        self._waiting: deque[PendingSend | Barrier] = deque()
        self._unconfirmed: deque[PendingSend] = deque()
        self._unconfirmed_bytes = 0
        self._streaming: PendingSend | None = None
        self._producer_window = UNLIMITED
        self._producer_window_cap = producer_window_size
        """The most credit per address used (Artemis's client producer-window-size); it
        applies when the node flow-controls producers at all (its grants refill it)."""
        self._credits: dict[str, int] = {}
        # consuming and transactions
        self._next_consumer = 1
        self._consumers: dict[int, ConsumerState] = {}
        self._next_tx = 1
        self._transactions = Transactions()
        self._lifecycle = _Machine(self)
        self._handlers: dict[type[Packet], Callable[[Packet], None]] = {
            SendConfirmed: self._on_confirmed,  # type: ignore[dict-item]
            Deliver: self._on_deliver,  # type: ignore[dict-item]
            DeliverMany: self._on_deliver_many,  # type: ignore[dict-item]
            Ok: self._answered,  # type: ignore[dict-item]
            Failed: self._answered,  # type: ignore[dict-item]
            SendFailed: self._on_send_failed,  # type: ignore[dict-item]
            ProducerCredits: self._on_producer_credits,  # type: ignore[dict-item]
            AddressInfoPacket: self._on_address_info,  # type: ignore[dict-item]
            Topology: self._on_topology,  # type: ignore[dict-item]
            Reattached: self._on_reattached,  # type: ignore[dict-item]
            DeliverLargeBegin: self._on_large_begin,  # type: ignore[dict-item]
            DeliverLargeChunk: self._on_large_chunk,  # type: ignore[dict-item]
        }

    @property
    def login_description(self) -> str:
        return "login" if self.user is None else f"login as {self.user!r}"

    # -- what the glue takes ----------------------------------------------------------

    def data_to_send(self, read_chunks: bool = True, *, end_of_turn: bool = True) -> list[Frame]:
        """The frames to write now. With ``read_chunks`` (the connection is writable), the
        next chunk of a large send is read from its file if its address has credit: call
        again until the answer is empty or the connection is no longer writable. Sends
        being gathered into one SEND_MANY stay gathered unless ``end_of_turn``."""
        if end_of_turn and self._run:
            self._end_run()
        if read_chunks and self._streaming is not None and self._is_ready:
            self._next_chunk(self._streaming)
        out, self._out = self._out, []
        return out

    @property
    def has_data_to_send(self) -> bool:
        """Whether ``data_to_send`` may give frames (cheaper to ask than calling it)."""
        return bool(self._out) or bool(self._run) or self._streaming is not None

    @property
    def has_frames_to_send(self) -> bool:
        """Whether ``data_to_send(end_of_turn=False)`` may give frames: the sends being
        gathered do not count (after each send of a run, nothing is to write yet)."""
        return bool(self._out) or self._streaming is not None

    @property
    def gathering(self) -> bool:
        """Sends are being gathered: ``data_to_send`` must be called by the turn's end."""
        return bool(self._run)

    def _put(self, frame: Frame) -> None:
        """Queue ``frame`` to write, after the sends gathered before it."""
        if self._run:
            self._end_run()
        self._out.append(frame)

    def _end_run(self) -> None:
        """The gathered sends as one SEND, or one SEND_MANY."""
        run, self._run = self._run, []
        self._out.append(encode_sends(self._run_first, self._run_tx, run))

    def take_events(self) -> list[Event]:
        """What happened since the last call, in order."""
        events, self._events = self._events, []
        return events

    @property
    def is_ready(self) -> bool:
        """Logged in on a connection that is up."""
        return self._is_ready

    @property
    def is_writable(self) -> bool:
        """A send now would go out at once: logged in, nothing waiting, no large send
        streaming, and the confirmation window not full."""
        return (
            self._is_ready
            and not self._waiting
            and self._streaming is None
            and self._unconfirmed_bytes < self.confirmation_window_size
        )

    @property
    def streaming(self) -> bool:
        """A large send's chunks are being read: ``data_to_send`` has more to give."""
        return self._streaming is not None

    def address_writable(self, address: str) -> bool:
        """``is_writable``, and ``address`` has producer credit left."""
        return self.is_writable and self._credit(address) != 0

    @property
    def unconfirmed(self) -> int:
        """Sends not yet confirmed or refused, waiting ones included."""
        return len(self._unconfirmed) + sum(isinstance(s, PendingSend) for s in self._waiting)

    # -- connection events ------------------------------------------------------------

    def connection_made(self) -> None:
        """A connection is up: the CONNECT goes first."""
        self._lifecycle.connection_made()

    def connection_lost(self) -> None:
        """The connection is gone: requests on it fail (their outcome is unknown), open
        transactions are lost, and unconfirmed sends wait for the next connection."""
        self._lifecycle.connection_lost()

    def close(self, error: ClientError) -> None:
        """End the session: everything pending fails with ``error``."""
        self._lifecycle.close(error)

    def receive_frame(self, frame_type: int, payload: bytes) -> None:
        """Handle one frame from the node; ``NodeProtocolError`` if it breaks the rules, and
        the glue must then close the connection with that message."""
        try:
            packet = decode_packet(frame_type, payload)
        except PacketFormatError as error:
            raise NodeProtocolError(str(error)) from None
        handler = self._handlers.get(type(packet))
        try:
            if type(packet) is Connected:
                self._lifecycle.connected(packet)
            elif type(packet) is Failed and packet.request_id == 0:
                self._lifecycle.refused(packet)
            elif type(packet) is Redirect:
                self._lifecycle.redirected(packet)
            elif handler is None:
                raise NodeProtocolError(
                    f"the node sent {packet.TYPE.name}, a client -> node packet"
                )
            elif not self._is_ready:
                raise NodeProtocolError(f"the node sent {packet.TYPE.name} before CONNECTED")
            else:
                handler(packet)
        except NoTransition:
            raise NodeProtocolError(
                f"the node sent {packet.TYPE.name} when the session did not expect it"
            ) from None

    # -- life cycle actions (called by the machine) -----------------------------------

    def _handshake(self) -> None:
        self._connections += 1
        self._put(
            encode_packet(
                ClusterConnect(
                    PROTOCOL_VERSION,
                    self.client_id,
                    self.user,
                    self._password,
                    self.confirmation_window_size,
                    self.max_frame_size,
                    self.store,
                )
            )
        )

    def _accepted(self, packet: Connected) -> None:
        self._is_ready = True
        self._run_limit = min(BATCH_BYTES, packet.max_frame_size - SEND_MANY_OVERHEAD)
        self._chunk_limit = min(self._chunk_size, large_chunk_size(packet.max_frame_size))
        self.node_name, self.node_id = packet.node_name, packet.node_id
        self._version = packet.protocol_version
        granted = packet.producer_window_size
        cap = self._producer_window_cap
        self._producer_window = granted if UNLIMITED in (cap, granted) else min(cap, granted)
        self._credits.clear()
        self._sequence = self._confirmed = 0
        for consumer in self._consumers.values():
            self._create_consumer(consumer)
        for tx_id in self._transactions.begin_again():
            self._request(
                RequestKind.TX_BEGIN, f"begin transaction {tx_id} again", None, _begin(tx_id)
            )
        for request_id, request in sorted(self._requests.items()):
            if not request.sent and request.kind not in (RequestKind.COMMIT, RequestKind.ROLLBACK):
                self._put_request(request_id, request)
        self._drain()
        self._events.append(
            Ready(
                packet.node_name,
                packet.node_id,
                packet.producer_window_size,
                reconnected=self._connections > 1,
            )
        )

    def _lost(self) -> None:
        self._is_ready = False
        self._epoch += 1
        self._out.clear()
        self._run = []
        self._transactions.lost(  # the node rolls back what was open
            {r.subject for r in self._requests.values() if r.kind == RequestKind.TX_BEGIN}
        )
        for request_id, request in list(self._requests.items()):
            kind = request.kind
            if kind == RequestKind.QUEUE and not request.sent:
                continue  # it goes on the next connection
            if kind == RequestKind.ADDRESS:
                request.sent = False  # asking changes nothing: ask again on the next one
                continue
            del self._requests[request_id]
            if kind in (RequestKind.CREATE_CONSUMER, RequestKind.REATTACH):
                continue  # the consumer is created again on the next connection
            if kind == RequestKind.CLOSE_CONSUMER:
                self._consumers.pop(request.subject, None)  # the node closed it
                self._settle(request.callback, None)
            elif kind == RequestKind.ROLLBACK:
                self._settle(request.callback, None)  # the node rolled it back
            elif kind == RequestKind.COMMIT and not request.sent:
                self._settle(request.callback, Transactions.rolled_back(request.subject))
            elif request.sent:
                self._settle(
                    request.callback,
                    ConnectionLost(
                        f"{request.what}: the connection to the node was lost before it "
                        "answered; the outcome is unknown"
                    ),
                )
            else:
                self._settle(
                    request.callback,
                    ConnectionLost(
                        f"{request.what}: the connection to the node was lost first, and "
                        "the node rolled the transaction back"
                    ),
                )
        for consumer in self._consumers.values():
            consumer.hold_over()
            consumer.reset()
        resend = [send for send in self._unconfirmed if not send.refused]
        self._unconfirmed.clear()
        self._unconfirmed_bytes = 0
        self._streaming = None
        kept: deque[PendingSend | Barrier] = deque()
        for item in (*resend, *self._waiting):
            if isinstance(item, Barrier):
                if item.request_id in self._requests:
                    kept.append(item)
            elif item.tx_id is not None:
                self._settle(item.callback, Transactions.rolled_back(item.tx_id))
            elif item.file is not None and not self._rewind(item):
                continue
            else:
                kept.append(item)
        self._waiting = kept

    def _rewind(self, send: PendingSend) -> bool:
        """Seek a large send's file back to its start for the resend; fail it if it can't."""
        file = send.file
        assert file is not None
        try:
            file.seek(send.start)
        except (OSError, ValueError) as error:
            self._settle(
                send.callback,
                ConnectionLost(
                    f"large send to {send.message.address!r}: the connection was lost "
                    f"before it was confirmed, and its body cannot be read again ({error})"
                ),
            )
            return False
        send.remaining = send.total
        return True

    def _shut_down(self, error: ClientError) -> None:
        self._closed = True
        self._is_ready = False
        self._out.clear()
        self._run = []
        requests, self._requests = self._requests, {}
        for request in requests.values():
            self._settle(request.callback, error)
        for send in (*self._unconfirmed, *self._waiting):
            if isinstance(send, PendingSend) and not send.refused:
                self._settle(send.callback, error)
        self._unconfirmed.clear()
        self._waiting.clear()
        self._unconfirmed_bytes = 0
        self._streaming = None
        for consumer in self._consumers.values():
            self._stale_claims(consumer, error)
            consumer.reset()
        self._consumers.clear()
        self._transactions.clear()

    def _settle(self, callback: Settle | None, error: ClientError | None) -> None:
        if callback is not None:
            self._events.append(Settled(callback, error))

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the client is closed")

    # -- requests ---------------------------------------------------------------------

    def _request(
        self,
        kind: str,
        what: str,
        callback: Settle | None,
        build: Callable[[int], Packet],
        subject: int = 0,
        *,
        now: bool = True,
        answer: Callable[[AddressInfoPacket], object] | None = None,
    ) -> int:
        self._check_open()
        request_id = self._next_request
        request = Request(
            kind, what, callback, encode_packet(build(request_id)), subject, answer=answer
        )
        self._next_request = request_id + 1
        self._requests[request_id] = request
        if now and self._is_ready:
            self._put_request(request_id, request)
        return request_id

    def _put_request(self, request_id: int, request: Request) -> None:
        request.sent = True
        self._put(request.frame)

    def _take_request(self, packet: Ok | Failed | AddressInfoPacket | Reattached) -> Request:
        """The request ``packet`` answers, no longer pending; NodeProtocolError if there is
        none, or if it is the wrong kind of answer (only a query gets ADDRESS_INFO, only a
        REATTACH_CONSUMER gets REATTACHED, and neither gets OK)."""
        request_id = packet.request_id
        request = self._requests.get(request_id)
        if request is None or not request.sent:
            raise NodeProtocolError(
                f"the node answered request {request_id}, which it was not sent"
            )
        expected = ANSWERS.get(request.kind, Ok)
        if type(packet) is not Failed and type(packet) is not expected:
            raise NodeProtocolError(
                f"the node answered request {request_id} ({request.what}) with {packet.TYPE.name}"
            )
        del self._requests[request_id]
        return request

    def _answered(self, packet: Ok | Failed) -> None:
        request = self._take_request(packet)
        error = (
            refused(request.what, packet.code, packet.message) if type(packet) is Failed else None
        )
        kind = request.kind
        if kind in (RequestKind.CREATE_CONSUMER, RequestKind.REATTACH):
            consumer = self._consumers.get(request.subject)
            if consumer is not None:
                if error is None:
                    consumer.open = True
                else:
                    del self._consumers[request.subject]
                    self._stale_claims(consumer, None)
                    if request.callback is None:
                        self._events.append(ConsumerLost(consumer.consumer_id, error))
        elif kind == RequestKind.CLOSE_CONSUMER:
            consumer = self._consumers.pop(request.subject, None)
            if consumer is not None and consumer.large is not None:
                consumer.large.file.close()
        elif kind == RequestKind.TX_BEGIN and error is not None:
            self._transactions.refused(request.subject)
        self._settle(request.callback, error)

    def create_queue(
        self,
        name: str,
        address: str,
        *,
        routing: Routing,
        durable: bool,
        filter: str | None,
        callback: Settle | None,
    ) -> None:
        """Ask for queue ``name`` bound to ``address``."""
        self._request(
            RequestKind.QUEUE,
            f"create queue {name!r} on address {address!r}",
            callback,
            lambda rid: CreateQueue(rid, name, address, routing, durable, filter),
        )

    def delete_queue(self, name: str, callback: Settle | None) -> None:
        """Ask for queue ``name`` and its messages to be deleted."""
        self._request(
            RequestKind.QUEUE,
            f"delete queue {name!r}",
            callback,
            lambda rid: DeleteQueue(rid, name),
        )

    def address_info(self, address: str, *, answer: Answer, callback: Settle) -> None:
        """Ask how ``address`` is set up: ``answer`` hears the node's ADDRESS_INFO,
        ``callback`` only an error. Asked again after a reconnection until answered."""

        def answered(packet: AddressInfoPacket) -> None:
            routing = packet.routing
            info = AddressInfo(
                address,
                packet.exists,
                _ROUTING_WORDS[routing],
                packet.max_size_bytes,
                packet.address_full_policy.name,
                packet.id_cache_size,
                packet.auto_create,
            )
            self._events.append(Answered(answer, info))

        self._request(
            RequestKind.ADDRESS,
            f"query of address {address!r}",
            callback,
            lambda rid: QueryAddress(rid, address),
            answer=answered,
        )

    def _on_topology(self, packet: Topology) -> None:
        self._events.append(TopologyChanged(packet))

    def _on_address_info(self, packet: AddressInfoPacket) -> None:
        request = self._take_request(packet)
        assert request.answer is not None
        request.answer(packet)

    # -- transactions -----------------------------------------------------------------

    def begin(self, callback: Settle | None) -> int:
        """Open a transaction; returns its id, usable at once (the node takes packets in
        order). ``callback`` hears whether the node opened it."""
        self._check_open()
        tx_id = self._next_tx
        self._next_tx += 1
        self._request(
            RequestKind.TX_BEGIN, f"begin transaction {tx_id}", callback, _begin(tx_id), tx_id
        )
        self._transactions.begun(tx_id)
        return tx_id

    def commit(self, tx_id: int, callback: Settle | None) -> None:
        """Commit: after the transaction's sends that are still waiting."""
        self._end_transaction(tx_id, RequestKind.COMMIT, callback)

    def rollback(self, tx_id: int, callback: Settle | None) -> None:
        """Roll back: after the transaction's sends that are still waiting."""
        self._end_transaction(tx_id, RequestKind.ROLLBACK, callback)

    def _end_transaction(self, tx_id: int, kind: str, callback: Settle | None) -> None:
        self._check_open()
        if tx_id not in self._transactions:
            # rolled back with a lost connection, or done already: nothing goes to the node
            commit = kind == RequestKind.COMMIT
            self._settle(callback, self._transactions.outcome(tx_id, commit=commit))
            return
        self._transactions.ended(tx_id)
        packet = TxCommit if kind == RequestKind.COMMIT else TxRollback
        request_id = self._request(
            kind,
            f"{kind} of transaction {tx_id}",
            callback,
            lambda rid: packet(rid, tx_id),
            tx_id,
            now=False,
        )
        self._waiting.append(Barrier(request_id))
        self._drain()

    def _check_tx(self, tx_id: int | None) -> None:
        if tx_id is not None:
            self._transactions.use(tx_id)

    # -- producing --------------------------------------------------------------------

    def send(
        self,
        message: Message,
        *,
        tx_id: int | None = None,
        callback: Settle | None = None,
        body_file: IO[bytes] | None = None,
    ) -> bool:
        """Send ``message`` (its id is ignored); ``callback`` hears of its confirmation.

        With ``body_file`` (and an empty body), or a body of ``min_large_message_size`` or
        more, it goes as a large message whose body is read in chunks as the connection and
        credits allow. A send the windows do not allow yet waits in order. A message that
        cannot be encoded raises ``PacketFormatError`` here, and nothing is sent.

        Returns ``address_writable(message.address)`` as it is after the send, worked out
        with it: a producer sending back to back asks after every send.
        """
        self._check_open()
        self._check_tx(tx_id)
        if body_file is None and len(message.body) >= self.min_large_message_size:
            body_file = io.BytesIO(message.body)
            message = attrs.evolve(message, body=b"")
        if body_file is not None:
            if message.body:
                raise ValueError("a large send takes its body from the file: pass body=b''")
            start = body_file.tell()
            total = body_file.seek(0, io.SEEK_END) - start
            body_file.seek(start)
            send = PendingSend(message, tx_id, callback, file=body_file, start=start, total=total)
            encode_packet(SendLargeBegin(0, tx_id, message, total))  # refuse it now if bad
        else:
            send = PendingSend(message, tx_id, callback)
        if self._is_ready and not self._waiting and self._streaming is None and self._may(send):
            return self._put_send(send) and self.is_writable  # (``address_writable``)
        if send.file is None:
            encode_packet(Send(0, tx_id, message))  # refuse it now if it cannot go
        self._waiting.append(send)
        return False

    def _credit(self, address: str) -> int:
        """Producer credit left for ``address``: positive, or 0 for none (-1: unlimited)."""
        if self._producer_window == UNLIMITED:
            return UNLIMITED
        return max(self._credits.get(address, self._producer_window), 0)

    def _spend(self, address: str, cost: int) -> bool:
        """Take ``cost`` off ``address``'s credit: whether some is left."""
        window = self._producer_window
        if window == UNLIMITED:
            return True
        left = self._credits[address] = self._credits.get(address, window) - cost
        return left > 0

    def _may(self, send: PendingSend) -> bool:
        return (
            self._unconfirmed_bytes < self.confirmation_window_size
            and self._credit(send.message.address) != 0
        )

    def _put_send(self, send: PendingSend) -> bool:
        """Put ``send`` on the wire (gathered, or as the start of a large send): whether
        its address has credit left after it."""
        sequence = self._sequence + 1
        if send.file is None:
            try:
                data = encode_message(send.message)
            except MessageFormatError:
                encode_packet(Send(sequence, send.tx_id, send.message))  # names the fault
                raise
            self._gather(sequence, send.tx_id, data)
        else:
            frame = encode_packet(SendLargeBegin(sequence, send.tx_id, send.message, send.total))
            self._streaming = send
            self._put(frame)
        self._sequence = send.sequence = sequence
        send.cost = send.message.size
        self._unconfirmed.append(send)
        self._unconfirmed_bytes += send.cost
        return self._spend(send.message.address, send.cost)

    def _gather(self, sequence: int, tx_id: int | None, data: bytes) -> None:
        """Add an encoded send to the run it continues, or start a run with it."""
        cost = len(data) + 4  # each message of a SEND_MANY has its u32 length
        if self._run:
            if tx_id == self._run_tx and self._run_bytes + cost <= self._run_limit:
                self._run.append(data)
                self._run_bytes += cost
                return
            self._end_run()
        self._run = [data]
        self._run_first, self._run_tx, self._run_bytes = sequence, tx_id, cost

    def _drain(self) -> None:
        """Put waiting sends (and commits behind them) on the wire as the windows allow."""
        waiting = self._waiting
        while waiting and self._is_ready and self._streaming is None:
            head = waiting[0]
            if isinstance(head, Barrier):
                waiting.popleft()
                self._put_request(head.request_id, self._requests[head.request_id])
            elif self._may(head):
                waiting.popleft()
                self._put_send(head)
            else:
                return

    def _next_chunk(self, send: PendingSend) -> None:
        address = send.message.address
        if self._credit(address) == 0:
            return
        file = send.file
        assert file is not None
        data = file.read(min(self._chunk_limit, send.remaining))
        # A file shorter than it was at the send ends the body early; the node refuses it.
        send.remaining = send.remaining - len(data) if data else 0
        last = send.remaining == 0
        self._put(encode_packet(SendLargeChunk(send.sequence, data, last)))
        self._spend(address, len(data))
        if last:
            self._streaming = None
            self._drain()

    def _on_confirmed(self, packet: SendConfirmed) -> None:
        up_to = packet.up_to_sequence
        streaming = self._streaming
        if (
            up_to < self._confirmed
            or up_to > self._sequence
            or (streaming is not None and up_to >= streaming.sequence)
        ):
            raise NodeProtocolError(
                f"SEND_CONFIRMED up to {up_to} after {self._confirmed}, with sequences "
                f"sent up to {self._sequence}"
                + ("" if streaming is None else f" and {streaming.sequence} still streaming")
            )
        self._confirmed = up_to
        unconfirmed = self._unconfirmed
        callbacks: list[Settle] = []
        released = 0
        while unconfirmed and unconfirmed[0].sequence <= up_to:
            send = unconfirmed.popleft()
            if not send.refused:
                released += send.cost
                if send.callback is not None:
                    callbacks.append(send.callback)
        self._unconfirmed_bytes -= released
        if callbacks:
            self._events.append(SendsConfirmed(callbacks))
        if self._waiting:
            self._drain()

    def _on_send_failed(self, packet: SendFailed) -> None:
        for send in self._unconfirmed:
            if send.sequence == packet.sequence and not send.refused:
                break
        else:
            raise NodeProtocolError(
                f"SEND_FAILED for sequence {packet.sequence}, which is not an unconfirmed send"
            )
        send.refused = True
        self._unconfirmed_bytes -= send.cost
        what = f"send to {send.message.address!r}"
        if send.tx_id is not None:
            what += f" in transaction {send.tx_id}"
        self._settle(send.callback, refused(what, packet.code, packet.message))
        if self._waiting:
            self._drain()

    def _on_producer_credits(self, packet: ProducerCredits) -> None:
        if self._producer_window != UNLIMITED:
            address = packet.address
            self._credits[address] = (
                self._credits.get(address, self._producer_window) + packet.credits
            )
            if self._waiting:
                self._drain()

    # -- consuming --------------------------------------------------------------------

    def open_consumer(
        self,
        queue: str,
        *,
        filter: str | None = None,
        window_size: int = DEFAULT_CONSUMER_WINDOW_SIZE,
        browse_only: bool = False,
        callback: Settle | None = None,
    ) -> int:
        """Start consuming from ``queue``; returns the consumer id. ``callback`` hears
        whether the node created it. After a reconnection it is created again."""
        self._check_open()
        if not -1 <= window_size <= 0x7FFF_FFFF:
            raise ValueError(
                f"consumer-window-size must be -1 or 0 to 2147483647, got {window_size}"
            )
        consumer_id = self._next_consumer
        self._next_consumer += 1
        consumer = ConsumerState(consumer_id, queue, filter, window_size, browse_only, callback)
        consumer.reset()
        self._consumers[consumer_id] = consumer
        if self._is_ready:
            self._create_consumer(consumer)
        return consumer_id

    def _create_consumer(self, consumer: ConsumerState) -> None:
        callback = None if consumer.open else consumer.create_callback
        if consumer.claiming and self._version >= REATTACH_VERSION:
            claim = tuple(consumer.claiming)
            self._request(
                RequestKind.REATTACH,
                f"consumer on queue {consumer.queue!r}",
                callback,
                lambda rid: ReattachConsumer(
                    rid,
                    consumer.consumer_id,
                    consumer.queue,
                    consumer.filter,
                    consumer.browse_only,
                    consumer.window,
                    claim,
                ),
                consumer.consumer_id,
            )
            return
        self._stale_claims(consumer, None)
        self._request(
            RequestKind.CREATE_CONSUMER,
            f"consumer on queue {consumer.queue!r}",
            callback,
            lambda rid: CreateConsumer(
                rid,
                consumer.consumer_id,
                consumer.queue,
                consumer.filter,
                consumer.browse_only,
                consumer.window,
            ),
            consumer.consumer_id,
        )

    def close_consumer(self, consumer_id: int, callback: Settle | None) -> None:
        """Stop a consumer; its unacknowledged messages go back to the queue."""
        self._check_open()
        consumer = self._consumers.get(consumer_id)
        if consumer is None or consumer.closing:
            self._settle(callback, None)
            return
        consumer.closing = True
        if not self._is_ready:
            del self._consumers[consumer_id]
            self._stale_claims(consumer, None)
            if not consumer.open:
                self._settle(
                    consumer.create_callback,
                    ClientClosed(f"the consumer on queue {consumer.queue!r} was closed first"),
                )
            self._settle(callback, None)
            return
        self._request(
            RequestKind.CLOSE_CONSUMER,
            f"close of the consumer on queue {consumer.queue!r}",
            callback,
            lambda rid: CloseConsumer(rid, consumer_id),
            consumer_id,
        )

    def released(self, delivery: Delivery) -> None:
        """The application took ``delivery``: it holds it (to be claimed after a drop)
        until it settles it, and its bytes go back to the consumer's credit (in grants of
        at least half the window, as Artemis does)."""
        consumer = self._consumers.get(delivery.consumer_id)
        if consumer is None or delivery.epoch != self._epoch:
            return
        delivery_id = delivery.delivery_id
        if delivery_id in consumer.unsettled:
            consumer.held[delivery_id] = (
                delivery.message.id,
                delivery.cost,
                (delivery.epoch, delivery_id),
            )
        if consumer.window <= 0:
            return
        consumer.to_grant += delivery.cost
        if consumer.to_grant * 2 >= consumer.window:
            self._grant(consumer, consumer.to_grant)

    def demand(self, consumer_id: int) -> None:
        """The application waits for a message of a consumer with window 0: let one come."""
        consumer = self._consumers.get(consumer_id)
        if consumer is not None and consumer.window == 0 and consumer.balance <= 0:
            self._grant(consumer, 1 - consumer.balance)

    def _grant(self, consumer: ConsumerState, credits: int) -> None:
        consumer.to_grant = 0
        if self._is_ready and not consumer.closing:
            consumer.balance += credits
            self._put(encode_packet(ConsumerCredits(consumer.consumer_id, credits)))

    def _consumer_for(self, consumer_id: int, delivery_id: int) -> ConsumerState:
        consumer = self._consumers.get(consumer_id)
        if consumer is None:
            raise NodeProtocolError(f"a delivery for consumer {consumer_id}, which is not open")
        if delivery_id <= consumer.last_delivery:
            raise NodeProtocolError(
                f"delivery {delivery_id} to consumer {consumer_id} after delivery "
                f"{consumer.last_delivery}: delivery ids must increase"
            )
        if consumer.large is not None:
            raise NodeProtocolError(
                f"delivery {delivery_id} to consumer {consumer_id} before the last chunk "
                f"of large delivery {consumer.large.begin.delivery_id}"
            )
        consumer.last_delivery = delivery_id
        return consumer

    def _on_deliver(self, packet: Deliver) -> None:
        self._delivered(
            packet.consumer_id, packet.delivery_id, packet.delivery_count, packet.message
        )

    def _on_deliver_many(self, packet: DeliverMany) -> None:
        consumer_id, count = packet.consumer_id, packet.delivery_count
        delivery_id = packet.first_delivery_id
        for message in packet.messages:
            self._delivered(consumer_id, delivery_id, count, message)
            delivery_id += 1

    def _delivered(self, consumer_id: int, delivery_id: int, count: int, message: Message) -> None:
        consumer = self._consumer_for(consumer_id, delivery_id)
        cost = message.size
        consumer.balance -= cost
        if consumer.closing:
            return
        if not consumer.browse_only:
            consumer.unsettled[delivery_id] = None
        self._events.append(
            Delivery(consumer_id, delivery_id, count, message, None, cost, self._epoch)
        )

    def _on_large_begin(self, packet: DeliverLargeBegin) -> None:
        consumer = self._consumer_for(packet.consumer_id, packet.delivery_id)
        if packet.message.body:
            raise NodeProtocolError("DELIVER_LARGE_BEGIN with a body: chunks carry it")
        consumer.large = Incoming(packet, self._spool(), packet.total_size)
        consumer.balance -= packet.message.size
        self._keep_large_coming(consumer)

    def _on_large_chunk(self, packet: DeliverLargeChunk) -> None:
        consumer = self._consumers.get(packet.consumer_id)
        incoming = None if consumer is None else consumer.large
        if consumer is None or incoming is None or incoming.begin.delivery_id != packet.delivery_id:
            raise NodeProtocolError(
                f"DELIVER_LARGE_CHUNK for delivery {packet.delivery_id} of consumer "
                f"{packet.consumer_id}, which has no large delivery under way"
            )
        size = len(packet.data)
        if size > incoming.remaining or packet.last != (size == incoming.remaining):
            raise NodeProtocolError(
                f"large delivery {packet.delivery_id} of consumer {packet.consumer_id}: a "
                f"chunk of {size} bytes with {incoming.remaining} to come, "
                f"last={packet.last}"
            )
        incoming.file.write(packet.data)
        incoming.remaining -= size
        consumer.balance -= size
        if consumer.window > 0:  # the chunk is in the spool file, out of the window
            consumer.to_grant += size
            if consumer.to_grant * 2 >= consumer.window:
                self._grant(consumer, consumer.to_grant)
        if not packet.last:
            self._keep_large_coming(consumer)
            return
        consumer.large = None
        begin = incoming.begin
        if consumer.closing:
            incoming.file.close()
            return
        incoming.file.seek(0)
        if not consumer.browse_only:
            consumer.unsettled[begin.delivery_id] = None
        self._events.append(
            Delivery(
                begin.consumer_id,
                begin.delivery_id,
                begin.delivery_count,
                begin.message,
                incoming.file,
                begin.message.size,
                self._epoch,
            )
        )

    def _keep_large_coming(self, consumer: ConsumerState) -> None:
        """A consumer with window 0 grants what the rest of a large body needs to flow."""
        if consumer.window == 0 and consumer.balance <= 0:
            self._grant(consumer, 1 - consumer.balance)

    def ack(
        self,
        delivery: Delivery,
        *,
        cumulative: bool = False,
        tx_id: int | None = None,
        callback: Settle | None = None,
    ) -> None:
        """Acknowledge ``delivery`` (``cumulative``: and every earlier unsettled one of its
        consumer). With ``callback`` the node answers once the ack is durable. A held
        message being claimed is acknowledged once the claim is answered (if it is not
        claimed, ``callback`` hears ``StaleDelivery``)."""
        now = self._current(
            delivery,
            lambda again: self.ack(again, cumulative=cumulative, tx_id=tx_id, callback=callback),
            callback,
        )
        if now is None:
            return
        delivery = now
        consumer = self._settleable(delivery)
        self._check_tx(tx_id)
        delivery_id = delivery.delivery_id
        epoch = self._epoch
        if cumulative:
            for earlier in [d for d in consumer.unsettled if d <= delivery_id]:
                consumer.settled(earlier, epoch)
        else:
            consumer.settled(delivery_id, epoch)
        packet = Ack(consumer.consumer_id, delivery_id, cumulative, tx_id, None)
        if callback is None:
            self._put(encode_packet(packet))
        else:
            self._request(
                RequestKind.ACK,
                f"ack of message {delivery.message.id} from queue {consumer.queue!r}",
                callback,
                lambda rid: attrs.evolve(packet, request_id=rid),
            )

    def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        """Refuse ``delivery``: back on its queue (``requeue``) or dropped (a held message
        being claimed: once the claim is answered)."""
        now = self._current(delivery, lambda again: self.nack(again, requeue=requeue), None)
        if now is None:
            return
        delivery = now
        consumer = self._settleable(delivery)
        consumer.settled(delivery.delivery_id, self._epoch)
        self._put(encode_packet(Nack(consumer.consumer_id, delivery.delivery_id, requeue)))

    def _current(
        self, delivery: Delivery, again: Callable[[Delivery], None], callback: Settle | None
    ) -> Delivery | None:
        """``delivery`` as this connection knows it: a claimed one under its new delivery
        id; None for one being claimed, whose settling ``again`` waits for the claim's
        answer; any other as it is (``_settleable`` judges it)."""
        self._check_open()
        if delivery.epoch == self._epoch:
            return delivery
        consumer = self._consumers.get(delivery.consumer_id)
        if consumer is None or consumer.closing:
            return delivery
        origin = (delivery.epoch, delivery.delivery_id)
        delivery_id = consumer.origins.get(origin)
        if delivery_id is not None:
            return attrs.evolve(delivery, delivery_id=delivery_id, epoch=self._epoch)
        held = consumer.claiming.get(delivery.message.id)
        if held is not None and held[2] == origin:
            consumer.waiting.append(Waiting(delivery, again, callback))
            return None
        return delivery

    def _on_reattached(self, packet: Reattached) -> None:
        """A consumer re-created with a claim: the claimed messages are its deliveries on
        this connection (their credit back at once: the application took them), the
        others are stale; the acks and nacks that waited for the answer go now."""
        request = self._take_request(packet)
        consumer = self._consumers.get(request.subject)
        if consumer is None:
            self._settle(request.callback, None)
            return
        consumer.open = True
        claiming, consumer.claiming = consumer.claiming, {}
        for claimed in packet.claimed:
            held = claiming.pop(claimed.message_id, None)
            delivery_id = claimed.delivery_id
            if held is None or delivery_id <= consumer.last_delivery:
                raise NodeProtocolError(
                    f"REATTACHED gives message {claimed.message_id} delivery {delivery_id} "
                    f"of consumer {consumer.consumer_id}, which did not claim it or has "
                    f"had delivery {consumer.last_delivery}"
                )
            consumer.last_delivery = delivery_id
            consumer.unsettled[delivery_id] = None
            consumer.held[delivery_id] = held
            consumer.origins[held[2]] = delivery_id
            consumer.balance -= held[1]
            if consumer.window > 0:
                consumer.to_grant += held[1]
        if consumer.to_grant:
            self._grant(consumer, consumer.to_grant)
        waiting, consumer.waiting = consumer.waiting, []
        for settle in waiting:
            self._settle_again(settle)
        self._settle(request.callback, None)

    def _settle_again(self, waiting: Waiting) -> None:
        """An ack or nack that waited for its message's claim: made now, or (the message
        was not claimed) failed as stale."""
        try:
            waiting.settle(waiting.delivery)
        except ClientError as error:
            self._settle(waiting.callback, error)

    def _stale_claims(self, consumer: ConsumerState, error: ClientError | None) -> None:
        """Nothing of ``consumer``'s claim is claimed: what waited on it fails (with
        ``error``, or as stale)."""
        consumer.claiming.clear()
        waiting, consumer.waiting = consumer.waiting, []
        for settle in waiting:
            if error is None:
                self._settle_again(settle)
            else:
                self._settle(settle.callback, error)

    def _settleable(self, delivery: Delivery) -> ConsumerState:
        self._check_open()
        consumer = self._consumers.get(delivery.consumer_id)
        if consumer is None or consumer.closing or delivery.epoch != self._epoch:
            raise StaleDelivery(
                f"message {delivery.message.id} was received on an earlier connection or by "
                "a consumer closed since; the node delivers it again"
            )
        if consumer.browse_only:
            raise NotAcknowledgeable(
                f"message {delivery.message.id} came from a browse-only consumer of queue "
                f"{consumer.queue!r}: browsing takes nothing, so there is nothing to settle"
            )
        if delivery.delivery_id not in consumer.unsettled:
            raise NotAcknowledgeable(
                f"message {delivery.message.id} from queue {consumer.queue!r} is already "
                "acknowledged or refused"
            )
        return consumer


_builder = TypeMachineBuilder(_Lifecycle, ClientSession)
_disconnected = _builder.state("disconnected")
_handshaking = _builder.state("handshaking")
_ready = _builder.state("ready")
_closed = _builder.state("closed")


@_disconnected.upon(_Lifecycle.connection_made).to(_handshaking)
def _handshake(lifecycle: _Lifecycle, session: ClientSession) -> None:
    session._handshake()


@_handshaking.upon(_Lifecycle.connected).to(_ready)
def _accepted(lifecycle: _Lifecycle, session: ClientSession, packet: Connected) -> None:
    session._accepted(packet)


@_handshaking.upon(_Lifecycle.refused).to(_closed)
def _refused(lifecycle: _Lifecycle, session: ClientSession, packet: Failed) -> None:
    error = refused(session.login_description, packet.code, packet.message)
    session._events.append(LoginRefused(error))
    session._shut_down(error)


@_handshaking.upon(_Lifecycle.redirected).loop()
def _redirected(lifecycle: _Lifecycle, session: ClientSession, packet: Redirect) -> None:
    """The node closes the connection after it; the glue goes where it says."""
    session._events.append(Redirected(packet.store, packet.urls))


@_handshaking.upon(_Lifecycle.connection_lost).to(_disconnected)
def _lost_in_handshake(lifecycle: _Lifecycle, session: ClientSession) -> None:
    session._lost()


@_ready.upon(_Lifecycle.connection_lost).to(_disconnected)
def _lost(lifecycle: _Lifecycle, session: ClientSession) -> None:
    session._lost()


for _state in (_disconnected, _handshaking, _ready):

    @_state.upon(_Lifecycle.close).to(_closed)
    def _close(lifecycle: _Lifecycle, session: ClientSession, error: ClientError) -> None:
        session._shut_down(error)


@_closed.upon(_Lifecycle.close).loop()
def _closed_again(lifecycle: _Lifecycle, session: ClientSession, error: ClientError) -> None:
    """Closing twice, or failing after a close, changes nothing."""


@_closed.upon(_Lifecycle.connection_lost).loop()
def _lost_after_close(lifecycle: _Lifecycle, session: ClientSession) -> None:
    """The connection of a closed session ends: nothing is left to do."""


_Machine = _builder.build()


def _begin(tx_id: int) -> Callable[[int], Packet]:
    return lambda request_id: TxBegin(request_id, tx_id)
