"""One STOMP connection's session: frames in, calls of the node's session layer
(``bridge.node.session`` and its neighbours), frames out.

Sans-IO: the session is handed parsed events and writability changes, and answers through
an :class:`IStompTransport` (send a frame, close, pause or resume reading, heart-beats).
docs/stomp.md describes what a client sees; the choices in short:

- Versions 1.0 to 1.2, the highest both sides speak. CONNECT's login and passcode, and a
  TLS client certificate, go to the SecurityStore; every SEND, SUBSCRIBE, ACK and NACK is
  checked against the subject's permissions.
- Bad input (a malformed frame, a refused operation, a wrong header) is an ERROR frame
  whose ``message`` header says what and whose body says why, then the connection closes,
  as the specification asks. Nothing else on the node is affected.
- A RECEIPT is a confirmation, in the order of the frames (``bridge.heads.stomp.publishing``,
  which also has the SENDs); a SUBSCRIBE's goes before any of its messages.
- While a step waits on the node (a login, a durable queue being stored) the session
  stops reading, so frames are handled in order and nothing piles up.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
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
    SERVER,
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
from bridge.heads.stomp.publishing import Publisher, StompTransaction, open_transaction
from bridge.heads.stomp.settings import StompSettings
from bridge.heads.stomp.subscriptions import Subscription, Subscriptions
from bridge.heads.stomp.wire import Wire, refusal_error
from bridge.message import Message
from bridge.node.addressing import Addressing, matcher
from bridge.node.broker import (
    BadFilter,
    Broker,
    NodeError,
    QueueError,
    QueueInUse,
    QueueNotFound,
)
from bridge.node.consumer import AutoAcks, Consumer, IConsumerListener, settle_failed
from bridge.node.give_back import give_back
from bridge.node.local import LocalTransactions
from bridge.node.session import ServerSession, SessionState
from security import SecurityStore
from security.errors import PermissionDenied
from security.permissions import Permission
from security.subject import SecurityAuth, Subject

# Enum members read on every frame, kept as module constants: Python 3.11 takes about
# 220 ns to read a member off its class (``SessionState.OPEN``), 45 ns to read a global.
# (CLOSING: a DISCONNECT or an ERROR; nothing more is read, receipts still go out.)
_OPEN, _CLOSED = SessionState.OPEN, SessionState.CLOSED
_LIVE = (_OPEN, SessionState.CONNECTED)
_ENDING = (SessionState.CLOSING, _CLOSED)
_CONNECTING = (Command.CONNECT, Command.STOMP)
_AWAITING_CONNECT = SessionState.CONNECTED
_AUTO = AckMode.AUTO
_V1_0, _V1_2 = Version.V1_0, Version.V1_2
_MESSAGE = Command.MESSAGE


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
        self._authenticate = authenticate
        self.settings = settings or StompSettings()
        self.version: Version | None = None
        self.client_id: str | None = None
        self.id = uuid.uuid4().hex
        self._writable = True
        self._subscriptions = Subscriptions()
        self._transactions: LocalTransactions[str, StompTransaction] = LocalTransactions(
            broker, StompTransaction
        )
        self._auto_acks = AutoAcks(clock)
        self._node = ServerSession(broker, security, clock, self)
        """The node's side of this connection: its login and what it may do."""
        self._life = self._node.life
        """Where the connection is in its life (read on every frame)."""
        self._addressing = Addressing(self._node)
        wire = self._wire = Wire(transport, self._node)
        self._emit, self._fail, self._then = wire.emit, wire.fail, wire.then
        publisher = self._publisher = Publisher(
            broker,
            self._node,
            self._addressing,
            self._transactions,
            wire,
            max_unstored=self.settings.max_unstored,
        )
        self._after = publisher.after
        self._beats = (0, 0)
        """The heart-beats the client's CONNECT offers and asks for, until logged in."""
        self._handlers: dict[Command, Callable[[Frame, dict[str, str]], None]] = {
            Command.SEND: publisher.send,
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
                self._publisher.body_chunk(event)
            elif isinstance(event, LargeFrame):
                self._publisher.large_frame(event, headers)
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
            if isinstance(event, BodyChunk):
                receipt = self._publisher.large_receipt
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
        self._auto_acks.close()
        consumers = [subscription.consumer for subscription in self._subscriptions.close()]
        self._publisher.close()
        self._handlers.clear()  # (its bound methods refer back to the session)
        return Deferred.fromCoroutine(
            give_back(self._transactions, consumers, self._addressing, "a closed STOMP session")
        )

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
            self._wire.closing()
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
            raise refusal_error(bad, destination) from None
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
            raise refusal_error(refused, destination) from None
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
        tx = open_transaction(self._transactions, headers.get("transaction"))
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
        tx = open_transaction(self._transactions, headers.get("transaction"))
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
        subscription.settled(subscription.consumer.refuse(deliveries, requeue=requeue))

    # -- transactions ---------------------------------------------------------------------

    def _transaction(self, name: str | None) -> StompTransaction | None:
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

    def _end(self, command: Command, headers: dict[str, str]) -> StompTransaction:
        name = self._transaction_name(command, headers)
        tx = open_transaction(self._transactions, name)
        assert tx is not None
        self._transactions.end(name)
        return tx

    def _commit(self, frame: Frame, headers: dict[str, str]) -> None:
        tx = self._end(Command.COMMIT, headers)
        committing = self._transactions.commit(tx)
        self._publisher.after_each(committing, [*tx.receipts, headers.get("receipt")])

    def _abort(self, frame: Frame, headers: dict[str, str]) -> None:
        """Roll back; the receipts of its SENDs go too (each frame was handled, as the
        client asked: the ABORT undid them), then the ABORT's."""
        tx = self._end(Command.ABORT, headers)
        rolling_back = self._transactions.rollback(tx)
        self._publisher.after_each(rolling_back, [*tx.receipts, headers.get("receipt")])

    def _disconnect(self, frame: Frame, headers: dict[str, str]) -> None:
        """Answer the receipt once every earlier frame's effect is stored, then close."""
        self._node.close()
        self._publisher.goodbye(headers.get("receipt"))


def _nothing(result: object) -> None:
    """What reading waits for is done."""
