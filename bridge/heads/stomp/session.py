"""One STOMP connection's session on the node: frames in, broker calls and frames out.

Sans-IO: the session is handed parsed events and writability changes, and answers through
an :class:`IStompTransport` (send a frame, close, pause or resume reading, heart-beats).
docs/stomp.md describes what a client sees; the choices in short:

- Versions 1.0 to 1.2, the highest both sides speak. CONNECT's login and passcode, and a
  TLS client certificate, go to the SecurityStore; every SEND, SUBSCRIBE, ACK and NACK is
  checked against the subject's permissions.
- Bad input (a malformed frame, a refused operation, a wrong header) is an ERROR frame
  whose ``message`` header says what and whose body says why, then the connection closes,
  as the specification asks. Nothing else on the node is affected.
- A RECEIPT is a confirmation: for a persistent SEND it goes once the store holds the
  message, for a SEND in a transaction once the transaction is committed (or aborted),
  for a SUBSCRIBE before any of its messages; receipts go out in the order of their
  frames.
- While a step waits on the node (a login, a durable queue being stored) the session
  stops reading, so frames are handled in order and nothing piles up.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from bridge.config.node import Routing
from bridge.heads.stomp.destinations import (
    Destination,
    Kind,
)
from bridge.heads.stomp.frames import (
    BodyChunk,
    Command,
    Event,
    Frame,
    FrameError,
    HeartBeat,
    LargeFrame,
    Version,
)
from bridge.heads.stomp.headers import (
    DELIVERY_COUNT_HEADER,
    SEND_FRAME_HEADERS,
    SERVER,
    SET_BY_NODE,
    VERSIONS,
    AckMode,
    StompError,
    ack_mode,
    destination_of,
    heart_beat,
    message_headers,
    names_durable,
    negotiate,
    requeue_of,
)
from bridge.heads.stomp.interfaces import IStompTransport
from bridge.heads.stomp.settings import StompSettings
from bridge.heads.stomp.subscriptions import Subscription, Subscriptions
from bridge.message import ROUTING_TYPE, HeaderValue, Message
from bridge.node.addressing import Addressing, matcher
from bridge.node.broker import (
    DUPLICATE_ID_HEADER,
    AddressNotFound,
    BadFilter,
    Broker,
    NodeError,
    QueueError,
    QueueExists,
    QueueInUse,
    QueueNotFound,
    WrongRouting,
    refusal,
)
from bridge.node.consumer import AutoAcks, Consumer, IConsumerListener, settle_failed
from bridge.node.give_back import give_back
from bridge.node.large_sends import LargeSend
from bridge.node.local import LocalTransaction, LocalTransactions
from bridge.node.order import Place
from bridge.node.sends import Sends
from bridge.node.session import ServerSession, SessionState
from security import SecurityStore
from security.errors import PermissionDenied
from security.permissions import Permission
from security.subject import SecurityAuth, Subject

log = Logger()

BUSY = "session"
"""The reason the session gives when it pauses reading while a step waits on the node."""
STORE = "store"
"""The reason it gives while too many persistent sends wait for the store."""
ADDRESS_FULL = "address-full"
"""The reason it gives while a SEND waits for room on an address full under BLOCK."""
ORDER = "order"
"""The reason it gives while a non-persistent SEND waits for the persistent ones before
it to be stored and queued, so that it does not overtake them."""


# Enum members read on every frame, kept as module constants: Python 3.11 takes about
# 220 ns to read a member off its class (``SessionState.OPEN``), 45 ns to read a global.
# (CLOSING: a DISCONNECT or an ERROR; nothing more is read, receipts still go out.)
_OPEN, _CLOSED = SessionState.OPEN, SessionState.CLOSED
_LIVE = (_OPEN, SessionState.CONNECTED)
_ENDING = (SessionState.CLOSING, _CLOSED)
_CONNECTING = (Command.CONNECT, Command.STOMP)
_AWAITING_CONNECT = SessionState.CONNECTED
_AMQ_QUEUE, _QUEUE = Kind.AMQ_QUEUE, Kind.QUEUE
_ANYCAST, _MULTICAST = Routing.ANYCAST, Routing.MULTICAST
_ROUTING = {Kind.QUEUE: _ANYCAST, Kind.TOPIC: _MULTICAST, Kind.AMQ_QUEUE: _ANYCAST}
"""The routing type a send to each kind of destination states, where it must."""
_SEND = Permission.SEND
_AUTO = AckMode.AUTO
_V1_0, _V1_2 = Version.V1_0, Version.V1_2
_MESSAGE = Command.MESSAGE


@attrs.define(eq=False)
class _LargeSend(LargeSend):
    """A SEND whose body is being streamed: where it goes once the body is in."""

    tx: _Transaction | None = None
    receipt: str | None = None


@attrs.define(eq=False)
class _Outstanding(Place):
    """A frame's effect in line (waiting for the store, or held); its receipt (if any)
    goes out in turn."""

    receipt: str | None
    close: bool = False
    then: Callable[[], None] | None = None
    """Run once the receipt has gone: a subscription starts delivering after it."""


@attrs.define(eq=False)
class _Transaction(LocalTransaction):
    receipts: list[str] = attrs.Factory(list)
    """The receipts its SENDs asked for, sent at COMMIT (or ABORT), in order."""


Authenticate = Callable[[SecurityAuth], "Deferred[Subject]"]


@implementer(IConsumerListener)
class StompSession:
    """The node's side of one STOMP connection."""

    def __init__(
        self,
        broker: Broker,
        security: SecurityStore,
        transport: IStompTransport,
        *,
        clock: IReactorTime,
        authenticate: Authenticate,
        settings: StompSettings | None = None,
    ) -> None:
        self._broker = broker
        self._transport = transport
        self._clock = clock
        self._authenticate = authenticate
        self.settings = settings or StompSettings()
        self.version: Version | None = None
        self.client_id: str | None = None
        self.id = uuid.uuid4().hex
        self._writable = True
        self._subscriptions = Subscriptions()
        self._transactions: LocalTransactions[str, _Transaction] = LocalTransactions(
            broker, _Transaction
        )
        self._sends: Sends[_Outstanding] = Sends(broker, self, self.settings.max_unstored)
        self._auto_acks = AutoAcks(clock)
        self._node = ServerSession(broker, security, clock, self)
        """The node's side of this connection: its login and what it may do."""
        self._life = self._node.life
        """Where the connection is in its life (read on every frame)."""
        self._addressing = Addressing(self._node)
        self._large: _LargeSend | None = None
        """The SEND whose body is being streamed, between its head and its last chunk."""
        self._beats = (0, 0)
        """The heart-beats the client's CONNECT offers and asks for, until logged in."""
        self._handlers: dict[Command, Callable[[Frame, dict[str, str]], None]] = {
            Command.SEND: self._send,
            Command.SUBSCRIBE: self._subscribe,
            Command.UNSUBSCRIBE: self._unsubscribe,
            Command.ACK: self._ack,
            Command.NACK: self._nack,
            Command.BEGIN: self._begin,
            Command.COMMIT: self._commit,
            Command.ABORT: self._abort,
            Command.DISCONNECT: self._disconnect,
        }

    # -- input ----------------------------------------------------------------------------

    def event_received(self, event: Event) -> None:
        """Act on one frame or heart-beat."""
        if isinstance(event, HeartBeat) or self._life.state not in _LIVE:
            return
        headers = {} if isinstance(event, BodyChunk) else event.header_map()
        try:
            if isinstance(event, BodyChunk):
                self._body_chunk(event)
            elif isinstance(event, LargeFrame):
                self._large_frame(event, headers)
            elif event.command in _CONNECTING:
                if self._life.state is not _AWAITING_CONNECT:
                    raise StompError("already connected", f"a second {event.command} frame")
                self._connect(headers)
            elif self._life.state is _AWAITING_CONNECT:
                raise StompError(
                    "not connected", f"{event.command} before CONNECT: send CONNECT first"
                )
            else:
                self._handlers[event.command](event, headers)
        except StompError as error:
            receipt = headers.get("receipt")
            if isinstance(event, BodyChunk) and self._large is not None:
                receipt = self._large.receipt
            self._fail(error.message, error.detail, receipt)

    def protocol_error(self, error: FrameError) -> None:
        """The bytes from the peer are not a frame this node accepts."""
        if self._life.state not in _ENDING:
            self._fail(error.message, error.detail)

    def writability_changed(self, writable: bool) -> None:
        """Deliveries stop while the connection is not writable and go on once it is."""
        self._writable = writable
        for subscription in self._subscriptions:
            subscription.consumer.writability_changed(writable)

    def close(self, reason: str) -> None:
        """The node ends the connection (shutting down): an ERROR saying why, then close."""
        if self._life.state not in _ENDING:
            self._fail("connection closed by the node", reason)

    def connection_lost(self) -> Deferred[None]:
        """Give back what the connection held: unacknowledged messages return to their
        queues (counted as delivered), open transactions roll back, the queues of its
        non-durable topic subscriptions go. Fires once that is stored."""
        self._node.lost()  # a SEND held for room is dropped with its connection
        if self._large is not None:
            self._large.discard()
            self._large = None
        self._auto_acks.close()
        consumers = [subscription.consumer for subscription in self._subscriptions.close()]
        self._sends.close()  # never published: a large body's file goes
        self._handlers.clear()  # (its bound methods refer back to the session)
        return Deferred.fromCoroutine(
            give_back(self._transactions, consumers, self._addressing, "a closed STOMP session")
        )

    # -- output ---------------------------------------------------------------------------

    def _emit(self, frame: Frame) -> None:
        if self._life.state is not _CLOSED:
            self._transport.send(frame)

    def _fail(self, message: str, detail: str, receipt: str | None = None) -> None:
        """An ERROR frame, then the connection closes."""
        headers = [("message", message), ("content-type", "text/plain")]
        if receipt is not None:
            headers.append(("receipt-id", receipt))
        body = detail.encode("utf-8")
        headers.append(("content-length", str(len(body))))
        self._emit(Frame(Command.ERROR, tuple(headers), body))
        self._closing()

    def _closing(self) -> None:
        self._node.close()
        self._transport.close()

    def _then(
        self,
        work: Deferred[Any],
        done: Callable[[Any], None],
        receipt: str | None,
        failed: Callable[[Failure], None] | None = None,
    ) -> None:
        """Stop reading until ``work`` fires, then run ``done`` with its result (or
        ``failed``, by default an ERROR naming the failure)."""
        self._transport.pause_reading(BUSY)

        def succeeded(result: Any) -> None:
            if self._life.state is _CLOSED:
                return
            try:
                done(result)
            except StompError as error:
                self._fail(error.message, error.detail, receipt)
            self._transport.resume_reading(BUSY)

        def refused(failure: Failure) -> None:
            if self._life.state is _CLOSED:
                return
            if failed is not None:
                failed(failure)
            else:
                self._fail(*_describe(failure), receipt)
            self._transport.resume_reading(BUSY)

        work.addCallbacks(succeeded, refused)

    def _after(
        self,
        work: Deferred[Any] | None,
        receipt: str | None,
        size: int = 0,
        then: Callable[[], None] | None = None,
    ) -> None:
        """Send the receipt (if any) once ``work`` is stored and every earlier frame's
        receipt has gone, then run ``then``; a failure to store is an ERROR."""
        entry = _Outstanding(receipt, then=then, size=size)
        if work is None:
            self._sends.order.enter_done(entry)
        else:
            self._sends.wait(entry, work)

    def _after_each(self, work: Deferred[Any], receipts: list[str | None]) -> None:
        """Send ``receipts`` in order once ``work`` is stored and every earlier frame's
        receipt has gone (a transaction's SENDs', then its COMMIT's or ABORT's)."""
        order = self._sends.order
        entries = [_Outstanding(receipt) for receipt in receipts]
        for entry in entries:
            order.enter(entry)

        def stored(_: object) -> None:
            for entry in entries:
                order.written(entry)

        work.addCallbacks(stored, lambda failure: self.failed(entries[-1], failure))

    def busy(self, busy: bool) -> None:
        """Too many persistent sends' bytes wait for the store: read no more until half
        of them are written."""
        if busy:
            self._transport.pause_reading(STORE)
        else:
            self._transport.resume_reading(STORE)

    def _hold_in_order(self, message: Message, receipt: str | None) -> bool:
        """Keep a non-persistent SEND behind the frames before it that wait for the store
        (False if none does), and read nothing more meanwhile (so it is the only one
        held), as the core head holds such a send and Artemis keeps a session's sends in
        order."""
        if not self._sends.hold(_Outstanding(receipt, message=message)):
            return False
        self._transport.pause_reading(ORDER)
        return True

    def due(self, entry: _Outstanding) -> None:
        """The held SEND's turn came: publish it, then read on."""
        message, entry.message = entry.message, None
        receipt, entry.receipt = entry.receipt, None  # its own place, once published
        assert message is not None
        if self._life.state is _OPEN:
            self._publish_held(message, None, receipt, ORDER, due=True)
        else:
            self._broker.discard(message)
        self._sends.written(entry)

    def _publish_held(
        self,
        message: Message,
        tx: _Transaction | None,
        receipt: str | None,
        reason: str,
        due: bool = False,
    ) -> None:
        """Publish a SEND held while reading paused for ``reason``, then read on."""
        try:
            self._publish(message, tx, receipt, due)
        except StompError as error:
            self._fail(error.message, error.detail, receipt)
        self._transport.resume_reading(reason)

    def released(self, entry: _Outstanding) -> None:
        """Every frame before ``entry`` has had its effect and its receipt: its turn."""
        if entry.receipt is not None:
            self._emit(Frame(Command.RECEIPT, (("receipt-id", entry.receipt),)))
        if entry.then is not None:
            entry.then()
        if entry.close:
            self._closing()

    def failed(self, entry: _Outstanding, failure: Failure) -> bool:
        """A frame's effect could not be stored: an ERROR, and no receipt after it."""
        if self._life.state is _CLOSED:
            return False
        if refusal(failure, "storing a STOMP frame") is not None:
            log.warn("a STOMP frame was not stored: {why}", why=failure.getErrorMessage())
        self._fail("not stored", f"the node could not store it: {failure.getErrorMessage()}")
        return False

    # -- connecting -----------------------------------------------------------------------

    def _connect(self, headers: dict[str, str]) -> None:
        version = negotiate(headers.get("accept-version"))
        if version is None:
            self._emit(
                Frame(
                    Command.ERROR,
                    (
                        ("version", ",".join(v.value for v in reversed(VERSIONS))),
                        ("message", "unsupported version"),
                        ("content-type", "text/plain"),
                    ),
                    f"this node speaks STOMP {', '.join(reversed(VERSIONS))}; the client "
                    f"accepts {headers.get('accept-version')!r}".encode(),
                )
            )
            self._closing()
            return
        send, receive = heart_beat(headers.get("heart-beat", "0,0"))
        self.version = version
        self.client_id = headers.get("client-id") or None
        auth = SecurityAuth(
            user=headers.get("login"),
            password=headers.get("passcode"),
            peer_certificates=tuple(self._transport.peer_certificates()),
            remote_address=self._transport.peer,
            protocol="stomp",
        )
        self._beats = (send, receive)
        login = self._authenticate(auth)
        self._node.log_in(login)
        self._then(login, _nothing, None)  # (reading waits for the answer)

    @property
    def subject(self) -> Subject | None:
        """Who logged in on the connection (None until then)."""
        return self._node.subject

    def logged_in(self, subject: Subject) -> None:
        client_send, client_receive = self._beats
        ours = round(self.settings.heart_beat * 1000) if self.settings.heart_beat else 0
        send_every = max(ours, client_receive) / 1000 if ours and client_receive else None
        expect_every = max(ours, client_send) / 1000 if ours and client_send else None
        silence: float | None = None
        if expect_every is not None:
            silence = max(self.settings.ttl or 0.0, 2 * expect_every)
        self._transport.set_heart_beats(send_every, silence)
        assert self.version is not None
        self._emit(
            Frame(
                Command.CONNECTED,
                (
                    ("version", self.version.value),
                    # Nothing either way where the client offers or wants none.
                    ("heart-beat", f"{ours if client_receive else 0},{ours if client_send else 0}"),
                    ("server", SERVER),
                    ("session", self.id),
                ),
            )
        )

    def login_refused(self, reason: str) -> None:
        self._fail("authentication failed", reason)

    # -- refusals -----------------------------------------------------------------------

    def _check(self, address: str, permission: Permission, queue: str | None = None) -> None:
        try:
            self._node.check(address, permission, queue)
        except PermissionDenied as denied:
            raise StompError("permission denied", str(denied)) from None

    # -- sending --------------------------------------------------------------------------

    def _send(self, frame: Frame, headers: dict[str, str]) -> None:
        message, tx, receipt, creating = self._send_message(headers, frame.body)
        if creating is None:
            self._publish(message, tx, receipt)
        else:
            self._then(creating, lambda _: self._publish(message, tx, receipt), receipt)

    def _large_frame(self, head: LargeFrame, headers: dict[str, str]) -> None:
        """A SEND whose body is streamed: checked now, as any SEND, before its body comes;
        the body goes to a file of the large-message store as it arrives (reading waits
        for a destination being created first)."""
        message, tx, receipt, creating = self._send_message(headers, b"")
        message = message.with_id(self._broker.allocate_id())
        large = _LargeSend(message, head.length, tx, receipt)
        large.open(self._broker)
        if large.failure is not None:
            raise StompError("store failed", large.failure)
        self._large = large
        if creating is not None:
            self._then(creating, lambda _: None, receipt)

    def _body_chunk(self, chunk: BodyChunk) -> None:
        """The next bytes of the streamed SEND's body; the last one publishes it."""
        large = self._large
        assert large is not None
        large.write(chunk.data)
        if large.failure is not None:
            raise StompError("store failed", large.failure)
        if not chunk.last:
            return
        message = large.finish()
        try:
            self._publish(message, large.tx, large.receipt)
        except StompError:
            self._broker.discard(message)  # published nowhere: its file goes
            raise  # (with ``_large`` still set, for the ERROR's receipt-id)
        self._large = None

    def _send_message(
        self, headers: dict[str, str], body: bytes
    ) -> tuple[Message, _Transaction | None, str | None, Deferred[Any] | None]:
        """A SEND's message, checked: its transaction, its receipt, and the creation of
        its destination to wait for, if any."""
        destination = destination_of(headers)
        for name in SET_BY_NODE:
            if name in headers:
                raise StompError(
                    "header not allowed",
                    f"SEND may not set the {name!r} header: the node sets it on MESSAGE frames",
                )
        tx = self._transaction(headers.get("transaction"))
        receipt = headers.get("receipt")
        name = destination.name
        try:
            if destination.kind is _AMQ_QUEUE:
                address, creating = self._addressing.send_to_queue(name), None
            else:
                address = name
                creating = self._addressing.send_to(name, _ROUTING[destination.kind])
        except (PermissionDenied, NodeError) as refused:
            raise _refusal(refused, destination) from None
        message_headers: dict[str, HeaderValue] = {
            key: value for key, value in headers.items() if key not in SEND_FRAME_HEADERS
        }
        if self._addressing.states_routing(address):
            # (``/topic/``: multicast, else anycast)
            message_headers[ROUTING_TYPE] = _ROUTING[destination.kind].value
        else:
            message_headers.pop(ROUTING_TYPE, None)
        duplicate = message_headers.get(DUPLICATE_ID_HEADER)
        message = Message(
            0,
            address,
            headers.get("persistent") == "true",
            message_headers,
            body,
            duplicate.encode("utf-8") if isinstance(duplicate, str) else None,
        )
        return message, tx, receipt, creating

    def _publish(
        self, message: Message, tx: _Transaction | None, receipt: str | None, due: bool = False
    ) -> None:
        """Publish a SEND, or hold it: for room on its address, or (unless it is ``due``,
        its turn come) behind the frames before it."""
        if self._node.full_under_block(message.address):
            self._hold(message, tx, receipt)
            return
        if tx is None and not (message.durable or due) and self._hold_in_order(message, receipt):
            return
        try:
            if tx is None and message.durable:
                self._publish_persistent(message, receipt)
                return
            routed = self._broker.publish(message, tx=tx.tx if tx is not None else None)
        except AddressNotFound as missing:
            raise StompError("no such destination", str(missing)) from None
        if tx is not None:  # done at commit: so is its receipt
            if receipt is not None:
                tx.receipts.append(receipt)
            return
        if isinstance(routed, Deferred):
            self._after(routed, receipt, len(message.body))
        elif receipt is not None:
            self._after(None, receipt)

    def _publish_persistent(self, message: Message, receipt: str | None) -> None:
        """The hot path of persistent sends: no Deferred, one entry in line (in it before
        publishing, whenever the store tells of its write, which it may do before
        ``publish_then`` returns)."""
        self._sends.publish(_Outstanding(receipt, size=len(message.body)), message)

    def _hold(self, message: Message, tx: _Transaction | None, receipt: str | None) -> None:
        """BLOCK: keep the SEND and stop reading this connection until the address has
        room, then publish it and read on. Only this connection waits, holding one
        message; its frames keep their order because nothing more is read meanwhile."""
        self._transport.pause_reading(ADDRESS_FULL)

        def room() -> None:
            if self._life.state is not _CLOSED:
                self._publish_held(message, tx, receipt, ADDRESS_FULL)

        self._node.wait_for_room(message.address, room)

    # -- subscribing ----------------------------------------------------------------------

    def _subscribe(self, frame: Frame, headers: dict[str, str]) -> None:
        destination = destination_of(headers)
        sub_id = headers.get("id")
        durable = destination.kind is Kind.TOPIC and names_durable(headers)
        if sub_id is None:
            if self.version is not Version.V1_0:
                raise StompError("missing header", "SUBSCRIBE needs an 'id' header")
            if durable and "activemq.subscriptionName" not in headers:
                raise StompError(
                    "missing header",
                    "a durable SUBSCRIBE needs an 'id' header: it names the subscription",
                )
            sub_id = str(destination)
        if sub_id in self._subscriptions:
            raise StompError("duplicate subscription", f"subscription id {sub_id!r} is in use")
        ack = ack_mode(headers.get("ack", "auto"))
        prefetch = self._prefetch(headers)
        selector = headers.get("selector") or None
        try:
            matcher(selector)
        except BadFilter as bad:
            raise _refusal(bad, destination) from None
        subscription = Subscription(
            sub_id,
            self._subscriptions.next_key(),
            ack=ack,
            destination=str(destination),
            address=destination.name,
            durable=durable,
        )
        auto = ack is _AUTO
        subscription.consumer = Consumer(
            self._broker,
            "",
            self,
            subscription,
            writable=self._writable,
            prefetch=prefetch,
            counts_unacked=not auto,
            auto_acks=self._auto_acks if auto else None,
        )
        try:
            creating = self._subscription_queue(subscription, destination, headers, selector)
        except (PermissionDenied, NodeError) as refused:
            raise _refusal(refused, destination) from None
        self._subscriptions.add(subscription)
        receipt = headers.get("receipt")
        consumer_filter = selector if destination.kind is not Kind.TOPIC else None
        if creating is None:
            self._consume(subscription, consumer_filter, receipt)
        else:
            self._then(
                creating, lambda _: self._consume(subscription, consumer_filter, receipt), receipt
            )

    def _prefetch(self, headers: dict[str, str]) -> int | None:
        text = headers.get("prefetch-count") or headers.get("activemq.prefetchSize")
        if text is None:
            value = self.settings.prefetch
        elif text.isdigit() and len(text) < 10:
            value = int(text)
        else:
            raise StompError("bad header", f"prefetch-count {text!r} is not a number >= 0")
        return value or None

    def _subscription_queue(
        self,
        subscription: Subscription,
        destination: Destination,
        headers: dict[str, str],
        selector: str | None,
    ) -> Deferred[Any] | None:
        """Name (and create if needed) the queue a subscription consumes from; checks the
        permissions. Returns the creation to wait for, if any."""
        name, addressing = destination.name, self._addressing
        if destination.kind is Kind.AMQ_QUEUE:
            subscription.queue = name
            subscription.address, routing = addressing.consume_queue(name)
            prefix = "/topic/" if routing is Routing.MULTICAST else "/queue/"
            subscription.destination = f"{prefix}{subscription.address}"
            return None
        if destination.kind is Kind.QUEUE:
            subscription.queue = name
            return addressing.consume_anycast(name)
        if subscription.durable:
            subscription.queue = self._durable_name(headers, subscription.id)
        else:
            subscription.queue = f"{name}.stomp-{self.id}-{subscription.key}"
            subscription.temporary = True
        return addressing.subscribe(
            name, subscription.queue, durable=subscription.durable, filter=selector
        )

    def _durable_name(self, headers: dict[str, str], sub_id: str) -> str:
        """The queue of a durable topic subscription: ``CLIENT-ID.NAME`` (as Artemis names
        it), NAME being ``activemq.subscriptionName`` or else the subscription id."""
        name = headers.get("activemq.subscriptionName") or sub_id
        return f"{self.client_id}.{name}" if self.client_id else name

    def _consume(
        self, subscription: Subscription, consumer_filter: str | None, receipt: str | None
    ) -> None:
        """Start the subscription's consumer; with a receipt, once the receipt has gone,
        so that it comes before any of the subscription's messages."""
        if not self._subscriptions.is_open(subscription):
            return
        start = partial(self._start, subscription, consumer_filter)
        if receipt is None:
            start()
        else:
            self._after(None, receipt, then=start)

    def _start(self, subscription: Subscription, consumer_filter: str | None) -> None:
        if self._life.state is not _OPEN or not self._subscriptions.is_open(subscription):
            return  # unsubscribed, or the connection ends, while the receipt waited
        subscription.consumer.start(consumer_filter)

    def deliver(
        self, consumer: Consumer[Subscription], delivery_id: int, count: int, message: Message
    ) -> None:
        """A MESSAGE frame for what a subscription's consumer delivers."""
        subscription = consumer.tag
        body = message.body
        headers = [
            ("subscription", subscription.id),
            ("message-id", str(message.id)),
            ("destination", subscription.destination),
        ]
        if subscription.ack is not _AUTO:
            if self.version is _V1_2:
                headers.append(("ack", f"{subscription.key}-{delivery_id}"))
            else:
                subscription.by_message[message.id] = delivery_id
        large = message.large
        headers += (
            ("content-length", str(len(body) if large is None else large.size)),
            ("redelivered", "true" if count > 1 else "false"),
            (DELIVERY_COUNT_HEADER, str(count)),
        )
        if message.durable:
            headers.append(("persistent", "true"))
        if message.headers:
            headers += message_headers(message.headers, self.version or _V1_0)
        if large is None:
            self._emit(Frame(_MESSAGE, tuple(headers), body))
        elif self._life.state is not _CLOSED:
            self._transport.send_large(Frame(_MESSAGE, tuple(headers)), large)

    def _unsubscribe(self, frame: Frame, headers: dict[str, str]) -> None:
        sub_id = headers.get("id")
        if sub_id is None and self.version is Version.V1_0:
            sub_id = headers.get("destination")
        if sub_id is None:
            raise StompError("missing header", "UNSUBSCRIBE needs an 'id' header")
        receipt = headers.get("receipt")
        forget = names_durable(headers)
        subscription = self._subscriptions.get(sub_id)
        if subscription is None:
            if forget:
                self._forget_durable(self._durable_name(headers, sub_id), receipt)
                return
            raise StompError("no such subscription", f"no subscription with id {sub_id!r}")
        if forget and subscription.durable:
            try:
                self._addressing.may_delete(subscription.queue)
            except PermissionDenied as denied:
                raise StompError("permission denied", str(denied)) from None
        self._subscriptions.remove(subscription)
        removing = Deferred.fromCoroutine(self._remove(subscription, forget))
        self._then(removing, lambda _: self._after(None, receipt), receipt)

    async def _remove(self, subscription: Subscription, forget: bool) -> None:
        """Stop a subscription's consumer; delete its queue if it was temporary, or
        durable and ``forget``."""
        await subscription.consumer.close()
        if subscription.temporary or (forget and subscription.durable):
            await self._addressing.drop(subscription.queue)

    def _forget_durable(self, queue_name: str, receipt: str | None) -> None:
        """UNSUBSCRIBE with ``durable:true`` of a durable subscription not open here."""
        try:
            deleting = self._addressing.delete_queue(queue_name, durable=True)
        except QueueNotFound:
            raise StompError(
                "no such subscription", f"no durable subscription queue {queue_name!r}"
            ) from None
        except QueueInUse as in_use:
            raise StompError(
                "subscription in use",
                f"durable subscription {queue_name!r} has {in_use.consumers} consumer(s)",
            ) from None
        except PermissionDenied as denied:
            raise StompError("permission denied", str(denied)) from None
        self._then(deleting, lambda _: self._after(None, receipt), receipt)

    # -- acknowledging --------------------------------------------------------------------

    def _settling(
        self, command: Command, headers: dict[str, str]
    ) -> tuple[Subscription, list[int]]:
        """What an ACK or NACK settles, once checked that the client may."""
        subscription, deliveries = self._subscriptions.settling(command, headers, self.version)
        self._check(subscription.address, Permission.CONSUME, subscription.queue)
        return subscription, deliveries

    def _ack(self, frame: Frame, headers: dict[str, str]) -> None:
        subscription, deliveries = self._settling(Command.ACK, headers)
        tx = self._transaction(headers.get("transaction"))
        last = deliveries[-1]
        subscription.settled(deliveries)
        try:
            done = subscription.consumer.acknowledge(
                last,
                cumulative=subscription.ack is AckMode.CLIENT,
                tx=tx.tx if tx is not None else None,
            )
        except QueueError as error:
            raise StompError("unknown message", str(error)) from None
        receipt = headers.get("receipt")
        if receipt is not None:
            self._after(done, receipt)
        else:
            done.addErrback(settle_failed)

    def _nack(self, frame: Frame, headers: dict[str, str]) -> None:
        subscription, deliveries = self._settling(Command.NACK, headers)
        tx = self._transaction(headers.get("transaction"))
        requeue = requeue_of(headers.get("requeue", "true"))
        if tx is not None:
            tx.at_commit.append(partial(self._give_up, subscription, deliveries, requeue))
        else:
            self._give_up(subscription, deliveries, requeue)
        self._after(None, headers.get("receipt"))

    def _give_up(self, subscription: Subscription, deliveries: list[int], requeue: bool) -> None:
        """NACK: back to the queue for redelivery, or dropped (requeue:false)."""
        if not self._subscriptions.is_open(subscription):
            return  # unsubscribed since: its messages went back already
        deliveries = [d for d in deliveries if d in subscription.unacked]
        for delivery_id in deliveries:
            try:
                done = subscription.consumer.nack(delivery_id, requeue=requeue)
            except QueueError:
                continue
            done.addErrback(settle_failed)
        # Settled once back in the queue: a prefetch slot it frees takes it again first.
        subscription.settled(deliveries)

    # -- transactions ---------------------------------------------------------------------

    def _transaction(self, name: str | None) -> _Transaction | None:
        if name is None:
            return None
        tx = self._transactions.get(name)
        if tx is None:
            raise StompError("no such transaction", f"transaction {name!r} is not open")
        return tx

    def _transaction_name(self, command: Command, headers: dict[str, str]) -> str:
        name = headers.get("transaction")
        if name is None:
            raise StompError("missing header", f"{command} needs a 'transaction' header")
        return name

    def _begin(self, frame: Frame, headers: dict[str, str]) -> None:
        name = self._transaction_name(Command.BEGIN, headers)
        if not self._transactions.begin(name):
            raise StompError("transaction in use", f"transaction {name!r} is already open")
        self._after(None, headers.get("receipt"))

    def _end(self, command: Command, headers: dict[str, str]) -> _Transaction:
        name = self._transaction_name(command, headers)
        tx = self._transaction(name)
        assert tx is not None
        self._transactions.end(name)
        return tx

    def _commit(self, frame: Frame, headers: dict[str, str]) -> None:
        tx = self._end(Command.COMMIT, headers)
        committing = self._transactions.commit(tx)
        self._after_each(committing, [*tx.receipts, headers.get("receipt")])

    def _abort(self, frame: Frame, headers: dict[str, str]) -> None:
        """Roll back; the receipts of its SENDs go too (each frame was handled, as the
        client asked: the ABORT undid them), then the ABORT's."""
        tx = self._end(Command.ABORT, headers)
        rolling_back = self._transactions.rollback(tx)
        self._after_each(rolling_back, [*tx.receipts, headers.get("receipt")])

    def _disconnect(self, frame: Frame, headers: dict[str, str]) -> None:
        """Answer the receipt once every earlier frame's effect is stored, then close."""
        self._node.close()
        self._sends.order.enter_done(_Outstanding(headers.get("receipt"), close=True))


def _nothing(result: object) -> None:
    """What reading waits for is done."""


def _refusal(refused: PermissionDenied | NodeError, destination: Destination) -> StompError:
    """What the node refused of a frame naming ``destination``, as an ERROR words it."""
    if isinstance(refused, PermissionDenied):
        return StompError("permission denied", str(refused))
    if isinstance(refused, WrongRouting):
        name = refused.name
        what, other = ("multicast", "/topic/") if refused.multicast else ("anycast", "/queue/")
        return StompError(
            "wrong destination type",
            f"{destination} names address {name!r}, which is {what} (auto-create-addresses "
            f"is off for it, so it stays so): use {other}{name}",
        )
    if isinstance(refused, QueueExists):
        return StompError(
            "subscription name in use",
            f"queue {refused.name!r} exists and is not a durable subscription of "
            f"{destination}: choose another subscription name",
        )
    if isinstance(refused, BadFilter):
        return StompError("bad selector", f"selector {refused.text!r}: {refused.reason}")
    return StompError("no such destination", f"{destination}: {refused}")


def _describe(failure: Failure) -> tuple[str, str]:
    """An ERROR's message and body for a step that failed on the node."""
    refused = refusal(failure, "a STOMP request")
    if isinstance(refused, AddressNotFound):
        return "no such destination", failure.getErrorMessage()
    if refused is not None:
        return "refused", failure.getErrorMessage()
    return "internal error", f"the node failed: {failure.getErrorMessage()}"
