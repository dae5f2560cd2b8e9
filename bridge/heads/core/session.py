"""One core-protocol connection's session: packets in, calls of the node's session layer
(``bridge.node.session`` and its neighbours), packets out.

The session knows no sockets: it is fed decoded packets and writability changes, and it
answers through two callables, ``emit`` (queue a packet) and ``abort`` (a session rule was
broken: end the connection with that reason). docs/protocol.md's session rules are
enforced here; a packet that breaks one raises :class:`SessionError`, and the receiver
closes that connection only.

Security: the subject from CONNECT is checked for every operation's permission (send,
consume, browse, create/delete of queues and addresses; an address query needs send); a
denial is a FAILED or SEND_FAILED naming the permission and address, and the session goes
on.

Sends, their confirmations and producer credits are the :class:`Producer`'s
(``bridge.heads.core.producing``); what goes out, deliveries gathered into DELIVER_MANY
runs and large ones in chunks, the :class:`Outbox`'s (``bridge.heads.core.outbox``). A
large delivery's chunks are read from the store only while the connection is writable
and the consumer has credit (``bridge.node.consumer``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from bridge.config.node import Routing as ConfigRouting
from bridge.heads.core.cluster import ICluster, StoreRoute
from bridge.heads.core.errors import Refused, SessionError, code, failed
from bridge.heads.core.outbox import BeforeFlush, Emit, Outbox
from bridge.heads.core.producing import Producer, open_transaction
from bridge.node.addressing import Addressing, matcher
from bridge.node.broker import (
    Broker,
    NodeError,
    QueueError,
    Unsettled,
)
from bridge.node.consumer import Consumer, settle_failed
from bridge.node.give_back import give_back
from bridge.node.local import LocalTransaction, LocalTransactions
from bridge.node.session import ServerSession, SessionState
from bridge.protocol import packets as p
from security import SecurityStore
from security.errors import PermissionDenied
from security.permissions import Permission
from security.subject import Subject

log = Logger()

Authenticate = Callable[[p.Connect | p.ClusterConnect], "Deferred[Subject]"]


# Enum members read on every packet, kept as module constants: Python 3.11 takes about
# 220 ns to read a member off its class (``SessionState.OPEN``), 45 ns to read a global.
_OPEN, _CONNECTED = SessionState.OPEN, SessionState.CONNECTED
_SEND = Permission.SEND


class CoreSession:
    """The node's side of one core-protocol connection."""

    def __init__(
        self,
        broker: Broker,
        security: SecurityStore,
        *,
        node_name: str,
        node_id: str,
        clock: IReactorTime,
        emit: Emit,
        abort: Callable[[str], None],
        authenticate: Authenticate,
        producer_window_size: int = p.UNLIMITED,
        is_writable: Callable[[], bool] | None = None,
        max_frame_size: int = p.FRAME_SIZE_UNSTATED,
        before_flush: BeforeFlush | None = None,
        cluster: ICluster | None = None,
    ) -> None:
        self._broker = broker
        self._clock = clock
        self._cluster = cluster
        self._wanted: str | None = None
        """The store a CLUSTER_CONNECT asked for."""
        self._follows = False
        """The client connected with CLUSTER_CONNECT: it gets TOPOLOGY."""
        self._route: StoreRoute | None = None
        """Where a CLUSTER_CONNECT's store is served: held while no member serves it."""
        self._node_name = node_name
        self._node_id = node_id
        self._out = Outbox(emit, abort, before_flush)
        self._emit = self._out.emit
        self._max_frame_size = max_frame_size
        self._abort = abort
        self._authenticate = authenticate
        self._producer_window = producer_window_size
        self._writable = True
        self._is_writable = is_writable or (lambda: self._writable)
        self._node = ServerSession(broker, security, clock, self)
        """The node's side of this connection: its login and what it may do."""
        self._life = self._node.life
        """Where the connection is in its life (read on every frame)."""
        self.client_id = ""
        self.protocol_version = p.PROTOCOL_VERSION
        """The version the client speaks (one of ``SUPPORTED_VERSIONS``)."""
        self._consumers: dict[int, Consumer[int]] = {}
        """The node's consumers by the client's ids (their tags)."""
        self._transactions: LocalTransactions[int, LocalTransaction] = LocalTransactions(
            broker, LocalTransaction
        )
        self._addressing = Addressing(self._node)
        producer = self._producer = Producer(
            broker,
            self._node,
            self._transactions,
            clock=clock,
            emit=self._emit,
            abort=abort,
            producer_window_size=producer_window_size,
        )
        self._handlers: dict[type, Callable[[p.Packet], None]] = {
            p.CreateQueue: self._create_queue,  # type: ignore[dict-item]
            p.DeleteQueue: self._delete_queue,  # type: ignore[dict-item]
            p.Send: producer.send,  # type: ignore[dict-item]
            p.SendMany: producer.send_many,  # type: ignore[dict-item]
            p.SendLargeBegin: producer.send_large_begin,  # type: ignore[dict-item]
            p.SendLargeChunk: producer.send_large_chunk,  # type: ignore[dict-item]
            p.CreateConsumer: self._create_consumer,  # type: ignore[dict-item]
            p.ReattachConsumer: self._reattach_consumer,  # type: ignore[dict-item]
            p.CloseConsumer: self._close_consumer,  # type: ignore[dict-item]
            p.ConsumerCredits: self._consumer_credits,  # type: ignore[dict-item]
            p.Ack: self._ack,  # type: ignore[dict-item]
            p.Nack: self._nack,  # type: ignore[dict-item]
            p.TxBegin: self._tx_begin,  # type: ignore[dict-item]
            p.TxCommit: self._tx_commit,  # type: ignore[dict-item]
            p.TxRollback: self._tx_rollback,  # type: ignore[dict-item]
            p.QueryAddress: self._query_address,  # type: ignore[dict-item]
        }

    # -- input ----------------------------------------------------------------------------

    def packet_received(self, packet: p.Packet) -> None:
        """Act on one packet; SessionError if it breaks a session rule."""
        state = self._life.state
        if state is _OPEN:
            if self._route is not None and self._route.holding:
                raise SessionError(f"{packet.TYPE.name} before CONNECTED: wait for the answer")
            handler = self._handlers.get(type(packet))
            if handler is None:
                raise SessionError(f"{packet.TYPE.name} is not sent by a client")
            handler(packet)
        elif state is _CONNECTED:
            if not isinstance(packet, (p.Connect, p.ClusterConnect)):
                raise SessionError(f"{packet.TYPE.name} before CONNECT: connect first")
            self._connect(packet)
        elif state is SessionState.LOGGING_IN:
            raise SessionError(f"{packet.TYPE.name} before CONNECTED: wait for the answer")

    def writability_changed(self, writable: bool) -> None:
        """The connection can take more (True) or should not be given more."""
        self._writable = writable
        for consumer in list(self._consumers.values()):
            consumer.writability_changed(writable)

    @property
    def subject(self) -> Subject | None:
        """Who logged in on the connection (None until then)."""
        return self._node.subject

    @property
    def producers_blocked(self) -> int:
        """Addresses whose credit grants this connection's producer waits for."""
        return self._node.blocked

    def connection_lost(self) -> Deferred[None]:
        """Give back what the connection held: unsettled deliveries return to their queues,
        open transactions roll back, its non-durable queues go. Fires when stored."""
        self._node.lost()
        if self._route is not None:
            self._route.stop()
        self._out.close()
        self._producer.close()
        consumers = list(self._consumers.values())
        self._consumers.clear()
        self._handlers.clear()  # (its bound methods refer back to the session)
        return Deferred.fromCoroutine(
            give_back(self._transactions, consumers, self._addressing, "a closed core session")
        )

    # -- connecting -----------------------------------------------------------------------

    def _connect(self, packet: p.Connect | p.ClusterConnect) -> None:
        supported = p.SUPPORTED_VERSIONS
        if isinstance(packet, p.ClusterConnect):
            supported = frozenset(v for v in supported if v >= p.TOPOLOGY_VERSION)
            self._follows = True
            self._wanted = packet.store or None
        if packet.protocol_version not in supported:
            *earlier, last = (str(version) for version in sorted(p.SUPPORTED_VERSIONS))
            spoken = f"{', '.join(earlier)} and {last}"
            self._emit(
                p.Failed(
                    0,
                    p.ErrorCode.UNSUPPORTED_VERSION,
                    f"protocol version {packet.protocol_version} is not supported; "
                    f"this node speaks {spoken}",
                )
            )
            self._abort("")
            return
        self.protocol_version = packet.protocol_version
        self.client_id = packet.client_id
        self._out.run_limit = min(p.BATCH_BYTES, packet.max_frame_size - p.DELIVER_MANY_OVERHEAD)
        self._out.chunk_size = p.large_chunk_size(packet.max_frame_size)
        self._node.log_in(self._authenticate(packet))

    def logged_in(self, subject: Subject) -> None:
        if self._wanted is not None and self._cluster is not None:
            self._route = StoreRoute(
                self._wanted, self._cluster, self._clock, open=self._open, redirect=self._redirect
            )
            self._route.start()
        else:
            self._open()

    def _open(self) -> None:
        self._producer.logged_in()
        self._emit(
            p.Connected(
                self._node_name,
                self._node_id,
                self.protocol_version,
                self._producer_window,
                self._max_frame_size,
            )
        )
        self.push_topology()

    def push_topology(self) -> None:
        """Send the cluster's TOPOLOGY to a client that connected with CLUSTER_CONNECT,
        once its session is open (after CONNECTED, and at every change of the view)."""
        cluster = self._cluster
        if (
            cluster is not None
            and self._follows
            and self._life.state is _OPEN
            and (self._route is None or not self._route.holding)
        ):
            self._emit(cluster.topology())

    def _redirect(self, store: str, urls: tuple[str, ...]) -> None:
        log.info(
            "node {node}: client {client} asks for store {store}: {where}",
            node=self._node_name,
            client=self.client_id,
            store=store,
            where=f"redirected to {urls[0]}" if urls else "no member serves it, try again",
        )
        self._emit(p.Redirect(store, urls))
        self._abort("")

    def login_refused(self, reason: str) -> None:
        self._emit(p.Failed(0, p.ErrorCode.AUTHENTICATION, reason))
        self._abort("")

    # -- requests -------------------------------------------------------------------------

    def _answer(self, request_id: int, work: Callable[[], Deferred[Any] | None]) -> None:
        """Run a request: OK when it (and its store writes) succeeded, FAILED otherwise."""
        try:
            result = work()
        except (PermissionDenied, NodeError) as refused:
            self._emit(p.Failed(request_id, code(refused), str(refused)))
            return
        if result is None:
            self._emit(p.Ok(request_id))
            return
        result.addCallbacks(
            lambda _: self._reply(p.Ok(request_id)), lambda f: self._failed(request_id, f)
        )

    def _failed(self, request_id: int, failure: Failure) -> None:
        """FAILED, unless the node stopped serving before the request's writes were
        settled (``Unsettled``: its backup may hold them): then neither answer would be
        true, and the connection ends, leaving the outcome to the node the client goes to
        next (a commit or a durable ack is then of unknown outcome, as after a crash)."""
        if failure.check(Unsettled):
            self._abort(failure.getErrorMessage())
        else:
            self._reply(failed(request_id, failure))

    def _reply(self, packet: p.Packet) -> None:
        if self._life.state is _OPEN:
            self._emit(packet)

    def _create_queue(self, packet: p.CreateQueue) -> None:
        routing = ConfigRouting(packet.routing.name.lower())
        self._answer(
            packet.request_id,
            lambda: self._addressing.create_queue(
                packet.name,
                packet.address,
                durable=packet.durable,
                filter=packet.filter,
                routing=routing,
            ),
        )

    def _delete_queue(self, packet: p.DeleteQueue) -> None:
        self._answer(packet.request_id, lambda: self._addressing.delete_queue(packet.name))

    def _query_address(self, packet: p.QueryAddress) -> None:
        """ADDRESS_INFO: the address's routing and settings, or for a missing one those it
        would be created with; asking needs the send permission and creates nothing."""
        name = packet.address
        try:
            self._node.check(name, _SEND)
        except PermissionDenied as denied:
            self._emit(p.Failed(packet.request_id, p.ErrorCode.PERMISSION_DENIED, str(denied)))
            return
        view = self._node.describe(name)
        settings = view.settings
        self._emit(
            p.AddressInfo(
                packet.request_id,
                view.exists,
                view.auto_create,
                self._stated_routing(view.routing),
                settings.max_size_bytes,
                p.AddressFullPolicy[settings.address_full_policy.name],
                settings.id_cache_size,
            )
        )

    def _stated_routing(self, routing: frozenset[ConfigRouting]) -> p.Routing | None:
        """Routing types as ADDRESS_INFO states them: BOTH, for a version 2 client the
        routing its sends get (anycast)."""
        if not routing:
            return None
        if len(routing) > 1:
            return p.Routing.BOTH if self.protocol_version >= 3 else p.Routing.ANYCAST
        (only,) = routing
        return p.Routing[only.name]

    # -- consuming ------------------------------------------------------------------------

    def _reattach_consumer(self, packet: p.ReattachConsumer) -> None:
        """A consumer created again after a reconnection, claiming the messages its client
        still holds: answered REATTACHED, naming the claimed and the unclaimed, before
        anything is delivered to it."""
        if self.protocol_version < p.REATTACH_VERSION:
            raise SessionError(
                f"REATTACH_CONSUMER on protocol {self.protocol_version}: it needs "
                f"{p.REATTACH_VERSION}"
            )
        if len(packet.claim) > p.CLAIM_LIMIT:
            raise SessionError(
                f"REATTACH_CONSUMER claims {len(packet.claim)} messages, at most "
                f"{p.CLAIM_LIMIT} may be claimed at once"
            )
        if packet.browse_only:
            raise SessionError("REATTACH_CONSUMER of a browse-only consumer, which holds nothing")
        self._create_consumer(packet)

    def _create_consumer(self, packet: p.CreateConsumer | p.ReattachConsumer) -> None:
        if packet.consumer_id in self._consumers:
            self._emit(
                p.Failed(
                    packet.request_id,
                    p.ErrorCode.ALREADY_EXISTS,
                    f"consumer id {packet.consumer_id} is in use",
                )
            )
            return
        try:
            queue = self._addressing.consume(packet.queue, packet.browse_only)
            matches = matcher(packet.filter)
        except (PermissionDenied, NodeError) as refused:
            self._emit(p.Failed(packet.request_id, code(refused), str(refused)))
            return
        consumer = Consumer(
            self._broker,
            packet.queue,
            self._out,
            packet.consumer_id,
            writable=self._writable,
            is_writable=self._is_writable,
            window=packet.window_size,
            streamer=self._out,
        )
        self._consumers[packet.consumer_id] = consumer
        if isinstance(packet, p.ReattachConsumer):
            request_id = packet.request_id
            consumer.start(
                packet.filter,
                claim=packet.claim,
                claimed=lambda answer: self._emit(
                    p.Reattached(
                        request_id,
                        tuple(p.ClaimedDelivery(m, d) for m, d in answer.claimed),
                        answer.unclaimed,
                    )
                ),
            )
            return
        self._emit(p.Ok(packet.request_id))
        if packet.browse_only:
            entries = queue.browse()
            consumer.browse(e for e in entries if matches is None or matches(e.message.headers))
        else:
            consumer.start(packet.filter)

    def _consumer(self, consumer_id: int, what: str) -> Consumer[int]:
        consumer = self._consumers.get(consumer_id)
        if consumer is None:
            raise SessionError(f"{what} for consumer {consumer_id}, which is not open")
        return consumer

    def _consumer_credits(self, packet: p.ConsumerCredits) -> None:
        self._consumer(packet.consumer_id, "CONSUMER_CREDITS").add_credits(packet.credits)

    def _close_consumer(self, packet: p.CloseConsumer) -> None:
        consumer = self._consumers.pop(packet.consumer_id, None)
        if consumer is None:
            self._emit(
                p.Failed(
                    packet.request_id,
                    p.ErrorCode.NOT_FOUND,
                    f"no open consumer {packet.consumer_id}",
                )
            )
            return
        self._answer(packet.request_id, consumer.close)

    def _settle(self, consumer_id: int, what: str) -> Consumer[int]:
        consumer = self._consumer(consumer_id, what)
        if consumer.browsing:
            raise SessionError(f"{what} for browse-only consumer {consumer_id}")
        return consumer

    def _ack(self, packet: p.Ack) -> None:
        consumer = self._settle(packet.consumer_id, "ACK")
        try:
            tx = open_transaction(self._transactions, packet.tx_id)
        except Refused as refused:
            if packet.request_id is None:
                raise SessionError(
                    f"ACK in transaction {packet.tx_id}, which is not open"
                ) from None
            self._emit(p.Failed(packet.request_id, refused.code, str(refused)))
            return
        try:
            done = consumer.acknowledge(packet.delivery_id, cumulative=packet.cumulative, tx=tx)
        except QueueError:
            raise SessionError(
                f"ACK of delivery {packet.delivery_id} of consumer {packet.consumer_id}, "
                "which is not unsettled"
            ) from None
        if packet.request_id is not None:
            self._answer(packet.request_id, lambda: done)
        else:
            done.addErrback(settle_failed)

    def _nack(self, packet: p.Nack) -> None:
        consumer = self._settle(packet.consumer_id, "NACK")
        try:
            done = consumer.nack(packet.delivery_id, requeue=packet.requeue)
        except QueueError:
            raise SessionError(
                f"NACK of delivery {packet.delivery_id} of consumer {packet.consumer_id}, "
                "which is not unsettled"
            ) from None
        done.addErrback(settle_failed)

    # -- transactions ---------------------------------------------------------------------

    def _tx_begin(self, packet: p.TxBegin) -> None:
        if self._transactions.begin(packet.tx_id):
            self._emit(p.Ok(packet.request_id))
            return
        self._emit(
            p.Failed(
                packet.request_id,
                p.ErrorCode.ALREADY_EXISTS,
                f"transaction {packet.tx_id} is open",
            )
        )

    def _tx_end(self, request_id: int, tx_id: int) -> LocalTransaction | None:
        local = self._transactions.end(tx_id)
        if local is None:
            self._emit(p.Failed(request_id, p.ErrorCode.NOT_FOUND, f"no open transaction {tx_id}"))
        return local

    def _tx_commit(self, packet: p.TxCommit) -> None:
        local = self._tx_end(packet.request_id, packet.tx_id)
        if local is not None:
            self._answer(packet.request_id, lambda: self._transactions.commit(local))

    def _tx_rollback(self, packet: p.TxRollback) -> None:
        local = self._tx_end(packet.request_id, packet.tx_id)
        if local is not None:
            self._answer(packet.request_id, lambda: self._transactions.rollback(local))
