"""One core-protocol connection's session on the node: packets in, broker calls and
packets out.

The session knows no sockets: it is fed decoded packets and writability changes, and it
answers through two callables, ``emit`` (queue a packet) and ``abort`` (a session rule was
broken: end the connection with that reason). docs/protocol.md's session rules are
enforced here; a packet that breaks one raises :class:`SessionError`, and the receiver
closes that connection only.

Security: the subject from CONNECT is checked for every operation's permission (send,
consume, browse, create/delete of queues and addresses; an address query needs send); a
denial is a FAILED or SEND_FAILED naming the permission and address, and the session goes
on.

Confirmations are batched: the sends of one reactor turn that are done (durable ones once
their group commit fired) are confirmed by one SEND_CONFIRMED at the end of the turn.

Flow control (docs/protocol.md rules 4, 5 and 8): the bytes of every send are granted back
to the producer as PRODUCER_CREDITS at the end of the turn it was handled in, except to an
address full under the BLOCK policy, whose grants wait for room. A large send's chunks go
straight to its body file; a large delivery's chunks are read from that file only while
the connection is writable and the consumer has credit, resuming on the writability
listener or the credit grant; the consumer takes nothing else meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from bridge.config.node import Routing as ConfigRouting
from bridge.heads.core.outbox import BeforeFlush, Emit, Outbox
from bridge.message import Message
from bridge.node.addressing import Addressing, matcher
from bridge.node.broker import (
    AddressFull,
    AddressNotFound,
    Broker,
    NodeError,
    NotStored,
    QueueError,
    QueueExists,
    QueueNotFound,
    Routed,
    Transaction,
    duplicate_id,
    refusal,
)
from bridge.node.consumer import Consumer, settle_failed
from bridge.node.credits import ProducerCredits
from bridge.node.give_back import give_back
from bridge.node.large_sends import LargeSend
from bridge.node.local import LocalTransaction, LocalTransactions
from bridge.node.order import Place
from bridge.node.sends import Sends
from bridge.node.session import ServerSession, SessionState
from bridge.protocol import packets as p
from security import SecurityStore
from security.errors import PermissionDenied
from security.permissions import Permission
from security.subject import Subject

log = Logger()


class SessionError(Exception):
    """The peer broke a session rule: the connection ends with this message."""


class Refused(Exception):
    """A request the node declines: answered FAILED/SEND_FAILED, the session goes on."""

    def __init__(self, code: p.ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


Authenticate = Callable[[p.Connect], "Deferred[Subject]"]


# Enum members read on every packet, kept as module constants: Python 3.11 takes about
# 220 ns to read a member off its class (``SessionState.OPEN``), 45 ns to read a global.
_OPEN, _CLOSED = SessionState.OPEN, SessionState.CLOSED
_CONNECTED = SessionState.CONNECTED
_SEND = Permission.SEND
_REQUEST = "a core request"
"""What the log calls a request of a core client that failed."""


@attrs.define(eq=False)
class _LargeSend(LargeSend):
    """A large send between its SEND_LARGE_BEGIN and its last chunk (``refused``: its
    chunks are counted, not kept)."""

    sequence: int = 0
    tx_id: int | None = None
    refused: Refused | None = None


@attrs.define(eq=False)
class _Pending(Place):
    """A send in line for its confirmation; a held one (``message``) is routed when its
    turn comes, then its ``grant`` of producer credit goes back."""

    sequence: int
    grant: int = 0


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
    ) -> None:
        self._broker = broker
        self._node_name = node_name
        self._node_id = node_id
        self._clock = clock
        self._out = Outbox(emit, abort, before_flush)
        self._emit = self._out.emit
        self._max_frame_size = max_frame_size
        self._abort = abort
        self._authenticate = authenticate
        self._producer_window = producer_window_size
        self._writable = True
        self._is_writable = is_writable or (lambda: self._writable)
        self._credits: ProducerCredits | None = None
        """Producer credit given back, once logged in."""
        self._node = ServerSession(broker, security, clock, self)
        """The node's side of this connection: its login and what it may do."""
        self._life = self._node.life
        """Where the connection is in its life (read on every frame)."""
        self.client_id = ""
        self.protocol_version = p.PROTOCOL_VERSION
        """The version the client speaks (one of ``SUPPORTED_VERSIONS``)."""
        self._last_sequence = 0
        self._sends: Sends[_Pending] = Sends(broker, self)
        self._confirmable = 0
        self._confirmed = 0
        self._confirm_call: IDelayedCall | None = None
        self._large: _LargeSend | None = None
        self._consumers: dict[int, Consumer[int]] = {}
        """The node's consumers by the client's ids (their tags)."""
        self._transactions: LocalTransactions[int, LocalTransaction] = LocalTransactions(
            broker, LocalTransaction
        )
        self._addressing = Addressing(self._node)
        self._handlers: dict[type, Callable[[p.Packet], None]] = {
            p.CreateQueue: self._create_queue,  # type: ignore[dict-item]
            p.DeleteQueue: self._delete_queue,  # type: ignore[dict-item]
            p.Send: self._send,  # type: ignore[dict-item]
            p.SendMany: self._send_many,  # type: ignore[dict-item]
            p.SendLargeBegin: self._send_large_begin,  # type: ignore[dict-item]
            p.SendLargeChunk: self._send_large_chunk,  # type: ignore[dict-item]
            p.CreateConsumer: self._create_consumer,  # type: ignore[dict-item]
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
            handler = self._handlers.get(type(packet))
            if handler is None:
                raise SessionError(f"{packet.TYPE.name} is not sent by a client")
            handler(packet)
        elif state is _CONNECTED:
            if not isinstance(packet, p.Connect):
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
        self._out.close()
        if self._confirm_call is not None and self._confirm_call.active():
            self._confirm_call.cancel()
        self._sends.close()  # held sends were never routed, nor confirmed
        if self._large is not None:
            self._large.discard()
            self._large = None
        self._credits = None  # (it refers back to the session)
        consumers = list(self._consumers.values())
        self._consumers.clear()
        self._handlers.clear()  # (its bound methods refer back to the session)
        return Deferred.fromCoroutine(
            give_back(self._transactions, consumers, self._addressing, "a closed core session")
        )

    # -- connecting -----------------------------------------------------------------------

    def _connect(self, packet: p.Connect) -> None:
        if packet.protocol_version not in p.SUPPORTED_VERSIONS:
            spoken = " and ".join(str(version) for version in sorted(p.SUPPORTED_VERSIONS))
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
        self._node.log_in(self._authenticate(packet))

    def logged_in(self, subject: Subject) -> None:
        self._credits = ProducerCredits(self._node, self._give)
        self._emit(
            p.Connected(
                self._node_name,
                self._node_id,
                self.protocol_version,
                self._producer_window,
                self._max_frame_size,
            )
        )

    def login_refused(self, reason: str) -> None:
        self._emit(p.Failed(0, p.ErrorCode.AUTHENTICATION, reason))
        self._abort("")

    # -- requests -------------------------------------------------------------------------

    def _answer(self, request_id: int, work: Callable[[], Deferred[Any] | None]) -> None:
        """Run a request: OK when it (and its store writes) succeeded, FAILED otherwise."""
        try:
            result = work()
        except (PermissionDenied, NodeError) as refused:
            self._emit(p.Failed(request_id, _code(refused), str(refused)))
            return
        if result is None:
            self._emit(p.Ok(request_id))
            return
        result.addCallbacks(
            lambda _: self._reply(p.Ok(request_id)),
            lambda failure: self._reply(_failed(request_id, failure)),
        )

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

    # -- sending --------------------------------------------------------------------------

    def _sequence(self, sequence: int) -> None:
        if self._large is not None:
            raise SessionError(
                f"send {sequence} while the large send {self._large.sequence} is unfinished"
            )
        if sequence <= self._last_sequence:
            raise SessionError(
                f"send sequence {sequence} does not follow {self._last_sequence}: "
                "sequences increase"
            )
        self._last_sequence = sequence

    def _send(self, packet: p.Send) -> None:
        self._send_one(packet.sequence, packet.tx_id, packet.message)

    def _send_many(self, packet: p.SendMany) -> None:
        """Each message as a SEND of its own, in order (one may end the session)."""
        sequence, tx_id = packet.first_sequence, packet.tx_id
        for message in packet.messages:
            if self._life.state is not _OPEN:
                return
            self._send_one(sequence, tx_id, message)
            sequence += 1

    def _send_one(self, sequence: int, tx_id: int | None, message: Message) -> None:
        self._sequence(sequence)
        credit = message.size if self._producer_window != p.UNLIMITED else 0
        held = self._route(sequence, tx_id, message, credit)
        if credit and not held:
            self._grant(message.address, credit)

    def _check_send(self, tx_id: int | None, address: str) -> Transaction | None:
        """The send's transaction; Refused if it may not be sent."""
        tx = None if tx_id is None else self._transaction(tx_id)
        try:
            if not self._broker.has_address(address):
                self._node.check_address(address)
            self._node.check(address, _SEND)
        except (PermissionDenied, NodeError) as refused:
            raise Refused(_code(refused), str(refused)) from None
        return tx

    def _route(self, sequence: int, tx_id: int | None, message: Message, credit: int = 0) -> bool:
        """Route a send, or hold a non-durable one behind earlier sends that wait for the
        store (True: its ``credit`` is given back once it is routed)."""
        try:
            tx = self._check_send(tx_id, message.address)
        except Refused as refused:
            self._broker.discard(message)
            self._refuse(sequence, refused.code, str(refused))
            return False
        found = duplicate_id(message)
        if found != message.duplicate_id:
            message = attrs.evolve(message, duplicate_id=found)
        if tx is not None:
            self._route_in(tx, sequence, message)
            return False
        sends = self._sends
        if not message.durable and sends.waiting:
            # Routed now, it would reach its queue before the earlier sends that wait for
            # their writes (a durable one is queued after its write, behind those).
            return sends.hold(_Pending(sequence, credit, message=message))
        pending = _Pending(sequence)
        sends.track(pending)
        self._publish(pending, message)
        return False

    def _publish(self, pending: _Pending, message: Message) -> None:
        """Route a send outside a transaction, ``pending`` in line: it is written once it
        may be confirmed: at once (routed, or refused with SEND_FAILED), else when its
        write ends."""
        try:
            self._sends.route(pending, message)
        except NodeError as refused:
            if isinstance(refused, AddressNotFound):
                self._broker.discard(message)
            self._emit(p.SendFailed(pending.sequence, _code(refused), str(refused)))
            self._sends.written(pending)

    def due(self, pending: _Pending) -> None:
        """A held send's turn came: route it, and give its producer credit back."""
        message, pending.message = pending.message, None
        assert message is not None
        self._publish(pending, message)
        if pending.grant:
            self._grant(message.address, pending.grant)

    def _route_in(self, tx: Transaction, sequence: int, message: Message) -> None:
        """A send in a transaction: it takes effect when the transaction commits."""
        try:
            routed = self._broker.publish(message, tx=tx)
        except NodeError as refused:
            if isinstance(refused, AddressNotFound):
                self._broker.discard(message)
            self._refuse(sequence, _code(refused), str(refused))
            return
        if isinstance(routed, Routed):  # (cheaper than isinstance of Deferred, an ABC)
            self._sends.order.enter_done(_Pending(sequence))
        else:
            self._sends.wait(_Pending(sequence), routed)

    def _refuse(self, sequence: int, code: p.ErrorCode, message: str) -> None:
        """SEND_FAILED now; the confirmation range passes over it in its turn."""
        self._emit(p.SendFailed(sequence, code, message))
        self._sends.order.enter_done(_Pending(sequence))

    def failed(self, pending: _Pending, failure: Failure) -> bool:
        """A send's write failed: SEND_FAILED, and the confirmations pass over it."""
        if self._life.state is not _CLOSED:
            self._emit(_send_failed(pending.sequence, failure))
        return True

    def busy(self, busy: bool) -> None:
        """(Producer credits pace a core client: its sends' bytes are not counted.)"""

    def released(self, pending: _Pending) -> None:
        """Every send up to ``pending`` is done: confirm them at the end of this turn."""
        self._confirmable = pending.sequence
        self._end_of_turn()

    def _end_of_turn(self) -> None:
        if self._confirm_call is None:
            self._confirm_call = self._clock.callLater(0, self._confirm)

    def _confirm(self) -> None:
        self._confirm_call = None
        if self._life.state is not _OPEN:
            return
        if self._confirmable > self._confirmed:
            self._confirmed = self._confirmable
            self._emit(p.SendConfirmed(self._confirmed))
        credits = self._credits
        if credits is not None and credits.gathered:
            credits.flush()

    # -- producer credits -----------------------------------------------------------------

    def _grant(self, address: str, credits: int) -> None:
        """Give ``credits`` back to ``address``'s producer at the end of this turn."""
        assert self._credits is not None
        self._credits.grant(address, credits)
        self._end_of_turn()

    def _give(self, address: str, credits: int) -> None:
        if self._life.state is _OPEN:
            self._emit(p.ProducerCredits(address, credits))

    # -- large sends ----------------------------------------------------------------------

    def _send_large_begin(self, packet: p.SendLargeBegin) -> None:
        self._sequence(packet.sequence)
        header = packet.message
        if self._producer_window != p.UNLIMITED:
            self._grant(header.address, header.size)
        message = header.with_id(self._broker.allocate_id())
        large = _LargeSend(message, packet.total_size, packet.sequence, packet.tx_id)
        self._large = large
        try:
            self._check_send(packet.tx_id, header.address)
        except Refused as refused:
            large.refused = refused
            return
        large.open(self._broker)

    def _send_large_chunk(self, packet: p.SendLargeChunk) -> None:
        large = self._large
        if large is None or packet.sequence != large.sequence:
            raise SessionError(f"SEND_LARGE_CHUNK of send {packet.sequence}, which is not open")
        data = packet.data
        large.write(data)
        if self._producer_window != p.UNLIMITED:
            self._grant(large.message.address, len(data))
        if not packet.last:
            return
        self._large = None
        if large.refused is not None:
            self._refuse(large.sequence, large.refused.code, str(large.refused))
            return
        try:
            message = large.finish()
        except NotStored as failed:  # its body could not be written: the session goes on
            self._refuse(large.sequence, p.ErrorCode.INTERNAL, str(failed))
        except NodeError as invalid:
            self._refuse(
                large.sequence, p.ErrorCode.INVALID, f"large send {large.sequence} {invalid}"
            )
        else:
            self._route(large.sequence, large.tx_id, message)

    def _transaction(self, tx_id: int | None) -> Transaction | None:
        if tx_id is None:
            return None
        local = self._transactions.get(tx_id)
        if local is None:
            raise Refused(p.ErrorCode.NOT_FOUND, f"no open transaction {tx_id}")
        return local.tx

    # -- consuming ------------------------------------------------------------------------

    def _create_consumer(self, packet: p.CreateConsumer) -> None:
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
            self._emit(p.Failed(packet.request_id, _code(refused), str(refused)))
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
            tx = self._transaction(packet.tx_id)
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


def _code(refused: Exception | None) -> p.ErrorCode:
    """FAILED's or SEND_FAILED's code for what the node refused (None: a fault)."""
    if isinstance(refused, PermissionDenied):
        return p.ErrorCode.PERMISSION_DENIED
    if isinstance(refused, QueueExists):
        return p.ErrorCode.ALREADY_EXISTS
    if isinstance(refused, (AddressNotFound, QueueNotFound)):
        return p.ErrorCode.NOT_FOUND
    if isinstance(refused, AddressFull):
        return p.ErrorCode.ADDRESS_FULL
    if refused is None or isinstance(refused, NotStored):
        return p.ErrorCode.INTERNAL  # (NotStored: the broker put things back, logged why)
    return p.ErrorCode.INVALID  # a bad filter, a queue in use, a routing type naming none


def _failed(request_id: int, failure: Failure) -> p.Failed:
    return p.Failed(request_id, _code(refusal(failure, _REQUEST)), failure.getErrorMessage())


def _send_failed(sequence: int, failure: Failure) -> p.SendFailed:
    return p.SendFailed(sequence, _code(refusal(failure, _REQUEST)), failure.getErrorMessage())
