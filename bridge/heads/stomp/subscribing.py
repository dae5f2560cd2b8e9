"""A STOMP connection's consuming side: SUBSCRIBE and UNSUBSCRIBE, the queue each
subscription consumes from (a durable topic subscription's kept by name), the MESSAGE
frames its consumer delivers, and the ACKs and NACKs that settle them.

It is its own module so that the session keeps only the frame dispatch, the connection's
life and its transactions, as ``bridge.heads.stomp.publishing`` holds the SEND side. The
session hands SUBSCRIBE, UNSUBSCRIBE, ACK and NACK straight to a :class:`Subscriber`'s
bound methods, and the subscriber is its consumers' listener: a MESSAGE or an ACK costs
no call more than when the session did this itself. The bookkeeping of ids and ack ids
is ``bridge.heads.stomp.subscriptions``'s; deliveries, acknowledgement and redelivery
are the node's consumer's (``bridge.node.consumer``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from bridge.config.node import Routing
from bridge.heads.stomp.destinations import Destination, Kind
from bridge.heads.stomp.frames import Command, Frame, Version
from bridge.heads.stomp.headers import (
    AckMode,
    StompError,
    ack_mode,
    destination_of,
    names_durable,
    requeue_of,
)
from bridge.heads.stomp.message_frames import message_frame, message_head
from bridge.heads.stomp.publishing import Publisher, StompTransaction, open_transaction
from bridge.heads.stomp.subscriptions import Subscription, Subscriptions
from bridge.heads.stomp.wire import Wire, refusal_error
from bridge.message import Message
from bridge.node.addressing import Addressing, matcher
from bridge.node.broker import (
    BadFilter,
    NodeError,
    QueueError,
    QueueInUse,
    QueueNotFound,
)
from bridge.node.consumer import AutoAcks, Consumer, IConsumerListener, settle_failed
from bridge.node.local import LocalTransactions
from bridge.node.session import ServerSession, SessionState
from security.errors import PermissionDenied
from security.permissions import Permission

# Read on every MESSAGE or ACK, kept as module constants (see bridge.heads.stomp.session).
_OPEN, _CLOSED = SessionState.OPEN, SessionState.CLOSED
_AUTO = AckMode.AUTO
_V1_0, _V1_2 = Version.V1_0, Version.V1_2


@implementer(IConsumerListener)
class Subscriber:
    """One STOMP connection's subscriptions: the frames that open, close and settle them,
    and the MESSAGE frames of their deliveries."""

    def __init__(
        self,
        node: ServerSession,
        addressing: Addressing,
        transactions: LocalTransactions[str, StompTransaction],
        wire: Wire,
        publisher: Publisher,
        *,
        clock: IReactorTime,
        session_id: str,
        prefetch: int,
    ) -> None:
        self._broker = node.broker
        self._node = node
        self._life = node.life
        self._addressing = addressing
        self._transactions = transactions
        self._transport = wire.transport
        self._emit, self._then = wire.emit, wire.then
        self._emit_serialized = wire.emit_serialized
        self._after = publisher.after
        self._session_id = session_id
        self._prefetch = prefetch
        """The prefetch of a SUBSCRIBE that names none (0: unbounded)."""
        self._writable = True
        self._auto_acks = AutoAcks(clock)
        self.subscriptions = Subscriptions()
        self.version: Version | None = None
        self.client_id: str | None = None

    def connected(self, version: Version, client_id: str | None) -> None:
        """The CONNECT's version and ``client-id`` (a durable subscription's first name)."""
        self.version = version
        self.client_id = client_id

    def writability_changed(self, writable: bool) -> None:
        """Deliveries stop while the connection is not writable and go on once it is."""
        self._writable = writable
        for subscription in self.subscriptions:
            subscription.consumer.writability_changed(writable)

    def close(self) -> list[Consumer[Subscription]]:
        """The connection is gone: no more automatic acknowledgements; the consumers of
        every subscription, to close."""
        self._auto_acks.close()
        return [subscription.consumer for subscription in self.subscriptions.close()]

    # -- subscribing ----------------------------------------------------------------------

    def subscribe(self, frame: Frame, headers: dict[str, str]) -> None:
        """SUBSCRIBE: a consumer on the destination's queue, started once the queue is
        there (and the receipt, if asked for, has gone)."""
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
        if sub_id in self.subscriptions:
            raise StompError("duplicate subscription", f"subscription id {sub_id!r} is in use")
        ack = ack_mode(headers.get("ack", "auto"))
        prefetch = self._prefetch_of(headers)
        selector = headers.get("selector") or None
        try:
            matcher(selector)
        except BadFilter as bad:
            raise refusal_error(bad, destination) from None
        subscription = Subscription(
            sub_id,
            self.subscriptions.next_key(),
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
        self.subscriptions.add(subscription)
        receipt = headers.get("receipt")
        consumer_filter = selector if destination.kind is not Kind.TOPIC else None
        if creating is None:
            self._consume(subscription, consumer_filter, receipt)
        else:
            self._then(
                creating, lambda _: self._consume(subscription, consumer_filter, receipt), receipt
            )

    def _prefetch_of(self, headers: dict[str, str]) -> int | None:
        """A SUBSCRIBE's prefetch (``prefetch-count`` or ActiveMQ's name); None: unbounded."""
        text = headers.get("prefetch-count") or headers.get("activemq.prefetchSize")
        if text is None:
            value = self._prefetch
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
            subscription.queue = f"{name}.stomp-{self._session_id}-{subscription.key}"
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
        if not self.subscriptions.is_open(subscription):
            return
        start = partial(self._start, subscription, consumer_filter)
        if receipt is None:
            start()
        else:
            self._after(None, receipt, then=start)

    def _start(self, subscription: Subscription, consumer_filter: str | None) -> None:
        if self._life.state is not _OPEN or not self.subscriptions.is_open(subscription):
            return  # unsubscribed, or the connection ends, while the receipt waited
        subscription.consumer.start(consumer_filter)

    def deliver(
        self, consumer: Consumer[Subscription], delivery_id: int, count: int, message: Message
    ) -> None:
        """A MESSAGE frame for what a subscription's consumer delivers: in STOMP 1.2, a
        message in memory as a head written from a template and its body."""
        subscription = consumer.tag
        large = message.large
        version = self.version or _V1_0
        if version is _V1_2 and large is None:
            head = message_head(subscription, delivery_id, count, message)
            if head is not None:
                self._emit_serialized(head, message.body)
                return
        elif version is not _V1_2 and subscription.ack is not _AUTO:
            subscription.by_message[message.id] = delivery_id
        if large is None:
            body = message.body
            self._emit(
                message_frame(
                    subscription, delivery_id, count, message, version, body=body, size=len(body)
                )
            )
        elif self._life.state is not _CLOSED:
            frame = message_frame(
                subscription, delivery_id, count, message, version, body=b"", size=large.size
            )
            self._transport.send_large(frame, large)

    def unsubscribe(self, frame: Frame, headers: dict[str, str]) -> None:
        """UNSUBSCRIBE: the consumer closes; with ``durable:true`` a durable
        subscription's queue goes too, open here or not."""
        sub_id = headers.get("id")
        if sub_id is None and self.version is Version.V1_0:
            sub_id = headers.get("destination")
        if sub_id is None:
            raise StompError("missing header", "UNSUBSCRIBE needs an 'id' header")
        receipt = headers.get("receipt")
        forget = names_durable(headers)
        subscription = self.subscriptions.get(sub_id)
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
        self.subscriptions.remove(subscription)
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
        subscription, deliveries = self.subscriptions.settling(command, headers, self.version)
        try:
            self._node.check(subscription.address, Permission.CONSUME, subscription.queue)
        except PermissionDenied as denied:
            raise StompError("permission denied", str(denied)) from None
        return subscription, deliveries

    def ack(self, frame: Frame, headers: dict[str, str]) -> None:
        """ACK: what it settles is acknowledged, in its transaction if it names one."""
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

    def nack(self, frame: Frame, headers: dict[str, str]) -> None:
        """NACK: what it settles goes back (or is dropped), at commit if in a
        transaction."""
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
        if not self.subscriptions.is_open(subscription):
            return  # unsubscribed since: its messages went back already
        subscription.settled(subscription.consumer.refuse(deliveries, requeue=requeue))
