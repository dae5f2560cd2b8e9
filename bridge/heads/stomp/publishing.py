"""A STOMP connection's SENDs and receipts, in the order of their frames.

A SEND is checked and routed through the node's session layer (``bridge.node.addressing``
for its destination, ``bridge.node.sends`` for its place in line, ``bridge.node.large_sends``
for a streamed body). A RECEIPT is a confirmation: for a persistent SEND it goes once the
store holds the message, for a SEND in a transaction once the transaction is committed
(or aborted), for any other frame once every frame before it has had its effect; receipts
go out in the order of their frames. The client is paced by reading: reading pauses while
a SEND waits for room on an address full under BLOCK, while a non-persistent SEND waits
behind persistent ones still being stored, and while too many bytes wait for the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from bridge.config.node import Routing
from bridge.heads.stomp.destinations import Kind
from bridge.heads.stomp.frames import BodyChunk, Command, Frame, LargeFrame
from bridge.heads.stomp.headers import SEND_FRAME_HEADERS, SET_BY_NODE, StompError, destination_of
from bridge.heads.stomp.wire import ADDRESS_FULL, ORDER, STORE, Wire, refusal_error
from bridge.message import NO_HEADERS, ROUTING_TYPE, HeaderValue, Message, measured
from bridge.node.addressing import Addressing
from bridge.node.broker import (
    DUPLICATE_ID_HEADER,
    AddressFull,
    AddressNotFound,
    Broker,
    NodeError,
    Routed,
    Unsettled,
    refusal,
)
from bridge.node.large_sends import LargeSend
from bridge.node.local import LocalTransaction, LocalTransactions
from bridge.node.order import Place
from bridge.node.sends import Sends
from bridge.node.session import ServerSession, SessionState
from security.errors import PermissionDenied

log = Logger()

_OPEN, _CLOSED = SessionState.OPEN, SessionState.CLOSED
_AMQ_QUEUE, _TOPIC = Kind.AMQ_QUEUE, Kind.TOPIC
_ANYCAST, _MULTICAST = Routing.ANYCAST, Routing.MULTICAST
"""A send to ``/topic/`` states multicast where it must, any other anycast (an ``is`` test
per SEND: an enum member's hash is a Python call)."""


@attrs.define(eq=False)
class _LargeSend(LargeSend):
    """A SEND whose body is being streamed: where it goes once the body is in."""

    tx: StompTransaction | None = None
    receipt: str | None = None


@attrs.define
class _Resolved:
    """A SEND destination's header, resolved and checked: its address, the routing a
    send to it asks for, and whether the message states it (the address has both)."""

    text: str
    address: str
    routing: Routing
    states: bool


@attrs.define(eq=False)
class _Outstanding(Place):
    """A frame's effect in line (waiting for the store, or held); its receipt (if any)
    goes out in turn."""

    receipt: str | None
    close: bool = False
    then: Callable[[], None] | None = None
    """Run once the receipt has gone: a subscription starts delivering after it."""


def _silent_place() -> _Outstanding:
    """The entry of persistent SENDs without receipts: nothing to answer in its turn."""
    return _Outstanding(None)


@attrs.define(eq=False)
class StompTransaction(LocalTransaction):
    """A STOMP transaction: what a local transaction is, and its SENDs' receipts."""

    receipts: list[str] = attrs.Factory(list)
    """The receipts its SENDs asked for, sent at COMMIT (or ABORT), in order."""


def open_transaction(
    transactions: LocalTransactions[str, StompTransaction], name: str | None
) -> StompTransaction | None:
    """The open transaction a frame's ``transaction`` header names (None: none)."""
    if name is None:
        return None
    tx = transactions.get(name)
    if tx is None:
        raise StompError("no such transaction", f"transaction {name!r} is not open")
    return tx


class Publisher:
    """One STOMP connection's SENDs, and the line its receipts keep."""

    def __init__(
        self,
        broker: Broker,
        node: ServerSession,
        addressing: Addressing,
        transactions: LocalTransactions[str, StompTransaction],
        wire: Wire,
        *,
        max_unstored: int,
    ) -> None:
        self._broker = broker
        self._node = node
        self._life = node.life
        self._addressing = addressing
        self._transactions = transactions
        self._wire = wire
        self._sends: Sends[_Outstanding] = Sends(
            broker, self, max_unstored, _silent_place, numbered=True
        )
        self._large: _LargeSend | None = None
        """The SEND whose body is being streamed, between its head and its last chunk."""
        self._resolved: _Resolved | None = None
        """Where the SENDs of this read go, checked (``forget`` clears it)."""

    def forget(self) -> None:
        """A read ended, or a frame other than a SEND came: the next SEND's destination
        is resolved and checked again. Within a run of SENDs in one read nothing changes
        an address or a permission (a reload, an address deleted, are turns of their
        own), so a run to one destination is checked once, as the core head checks a
        SEND_MANY's address once."""
        self._resolved = None

    @property
    def large_receipt(self) -> str | None:
        """The receipt the SEND whose body is being streamed asked for, if any."""
        return self._large.receipt if self._large is not None else None

    def goodbye(self, receipt: str | None) -> None:
        """DISCONNECT: its receipt once every earlier frame's effect is stored, then
        the close."""
        self._sends.order.enter_done(_Outstanding(receipt, close=True))

    def close(self) -> None:
        """The connection is gone: a body being streamed and the SENDs held go (never
        published, a large body's file with them), nothing more is answered."""
        if self._large is not None:
            self._large.discard()
            self._large = None
        self._sends.close()

    # -- receipts ---------------------------------------------------------------------------

    def after(
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

    def after_each(self, work: Deferred[Any], receipts: list[str | None]) -> None:
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
            self._wire.transport.pause_reading(STORE)
        else:
            self._wire.transport.resume_reading(STORE)

    def _hold_in_order(self, message: Message, receipt: str | None) -> bool:
        """Keep a non-persistent SEND behind the frames before it that wait for the store
        to be queued (False if none does), and read nothing more meanwhile (so it is the only one
        held), as the core head holds such a send and Artemis keeps a session's sends in
        order."""
        if not self._sends.late or not self._sends.hold(_Outstanding(receipt, message=message)):
            return False
        self._wire.transport.pause_reading(ORDER)
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
        tx: StompTransaction | None,
        receipt: str | None,
        reason: str,
        due: bool = False,
    ) -> None:
        """Publish a SEND held while reading paused for ``reason``, then read on."""
        try:
            self._publish(message, tx, receipt, due)
        except StompError as error:
            self._wire.fail(error.message, error.detail, receipt)
        self._wire.transport.resume_reading(reason)

    def released(self, entry: _Outstanding) -> None:
        """Every frame before ``entry`` has had its effect and its receipt: its turn."""
        if entry.receipt is not None:
            self._wire.emit(Frame(Command.RECEIPT, (("receipt-id", entry.receipt),)))
        if entry.then is not None:
            entry.then()
        if entry.close:
            self._wire.closing()

    def failed(self, entry: _Outstanding, failure: Failure) -> bool:
        """A frame's effect could not be stored: an ERROR, and no receipt after it. One the
        node stopped serving before it was settled (``Unsettled``: its backup may hold it)
        was not refused: the ERROR says its outcome is unknown, for the client to send it
        again where it reconnects."""
        if self._life.state is _CLOSED:
            return False
        if failure.check(Unsettled):
            self._wire.fail(
                "outcome unknown",
                f"{failure.getErrorMessage()}: the frame may have been stored or not; send "
                "it again to the node that serves next (no receipt follows)",
            )
            return False
        if refusal(failure, "storing a STOMP frame") is not None:
            log.warn("a STOMP frame was not stored: {why}", why=failure.getErrorMessage())
        self._wire.fail("not stored", f"the node could not store it: {failure.getErrorMessage()}")
        return False

    # -- SEND frames ----------------------------------------------------------------------

    def send(self, frame: Frame, headers: dict[str, str]) -> None:
        message, tx, receipt, creating = self._send_message(headers, frame.body)
        if creating is None:
            self._publish(message, tx, receipt)
        else:
            self._wire.then(creating, lambda _: self._publish(message, tx, receipt), receipt)

    def large_frame(self, head: LargeFrame, headers: dict[str, str]) -> None:
        """A SEND whose body is streamed: checked now, as any SEND, before its body comes;
        the body goes to a file of the large-message store as it arrives (reading waits
        for a destination being created first)."""
        message, tx, receipt, creating = self._send_message(headers, b"")
        large = _LargeSend(message, head.length, tx, receipt)
        large.open(self._broker)
        if large.failure is not None:
            raise StompError("store failed", large.failure)
        self._large = large
        if creating is not None:
            self._wire.then(creating, lambda _: None, receipt)

    def body_chunk(self, chunk: BodyChunk) -> None:
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
    ) -> tuple[Message, StompTransaction | None, str | None, Deferred[Any] | None]:
        """A SEND's message, checked: its transaction, its receipt, and the creation of
        its destination to wait for, if any."""
        if not SET_BY_NODE.isdisjoint(headers):  # (one C call, not a loop per SEND)
            name = min(SET_BY_NODE.intersection(headers))
            raise StompError(
                "header not allowed",
                f"SEND may not set the {name!r} header: the node sets it on MESSAGE frames",
            )
        named = headers.get("transaction")
        tx = None if named is None else open_transaction(self._transactions, named)
        receipt = headers.get("receipt")
        resolved = self._resolved
        creating = None
        if resolved is None or headers.get("destination") != resolved.text:
            resolved, creating = self._resolve(headers)
        address, routing, states_routing = resolved.address, resolved.routing, resolved.states
        message_headers: Mapping[str, HeaderValue]
        if headers.keys() <= SEND_FRAME_HEADERS:
            # (most SENDs carry only the frame's own headers: no loop, and no dict of
            # their own while the message waits on its queue)
            message_headers = {ROUTING_TYPE: routing.value} if states_routing else NO_HEADERS
        else:
            own = {key: value for key, value in headers.items() if key not in SEND_FRAME_HEADERS}
            if states_routing:
                own[ROUTING_TYPE] = routing.value
            else:
                own.pop(ROUTING_TYPE, None)
            message_headers = own
        duplicate = message_headers.get(DUPLICATE_ID_HEADER)
        message = Message(
            self._broker.allocate_id(),  # (numbered here: published ``numbered``)
            address,
            headers.get("persistent") == "true",
            message_headers,
            body,
            duplicate.encode("utf-8") if isinstance(duplicate, str) else None,
        )
        return measured(message), tx, receipt, creating

    def _resolve(self, headers: dict[str, str]) -> tuple[_Resolved, Deferred[Any] | None]:
        """A SEND's destination, checked (and created if missing and allowed): kept for
        the SENDs after it in this read, unless its creation is to be waited for."""
        destination = destination_of(headers)
        name, kind = destination.name, destination.kind
        routing = _MULTICAST if kind is _TOPIC else _ANYCAST
        try:
            if kind is _AMQ_QUEUE:
                address, creating = self._addressing.send_to_queue(name), None
            else:
                address = name
                creating = self._addressing.send_to(name, routing)
        except (PermissionDenied, NodeError) as refused:
            raise refusal_error(refused, destination) from None
        states = self._addressing.states_routing(address)  # (``/topic/``: multicast)
        resolved = _Resolved(headers["destination"], address, routing, states)
        self._resolved = resolved if creating is None else None
        return resolved, creating

    def _publish(
        self, message: Message, tx: StompTransaction | None, receipt: str | None, due: bool = False
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
                # The hot path of persistent sends: no Deferred; without a receipt, one
                # of a run of such SENDs in line, else an entry of its own (in line
                # before publishing: the store may tell of its write before
                # ``publish_then`` returns).
                if receipt is None:
                    self._sends.publish_silent(message)
                else:
                    self._sends.publish(_Outstanding(receipt, size=len(message.body)), message)
                return
            routed = self._broker.publish(
                message, tx=tx.tx if tx is not None else None, numbered=True
            )
        except AddressNotFound as missing:
            raise StompError("no such destination", str(missing)) from None
        except AddressFull as full:  # (its address-full-policy is FAIL)
            raise StompError("address full", str(full)) from None
        except NodeError as refused:
            raise StompError("refused", str(refused)) from None
        if tx is not None:  # done at commit: so is its receipt
            if receipt is not None:
                tx.receipts.append(receipt)
            return
        if not isinstance(routed, Routed):  # (a Deferred: paged; not an ABC's slow test)
            self.after(routed, receipt, len(message.body))
        elif receipt is not None:
            self.after(None, receipt)

    def _hold(self, message: Message, tx: StompTransaction | None, receipt: str | None) -> None:
        """BLOCK: keep the SEND and stop reading this connection until the address has
        room, then publish it and read on. Only this connection waits, holding one
        message; its frames keep their order because nothing more is read meanwhile."""
        self._wire.transport.pause_reading(ADDRESS_FULL)

        def room() -> None:
            if self._life.state is not _CLOSED:
                self._publish_held(message, tx, receipt, ADDRESS_FULL)

        self._node.wait_for_room(message.address, room)
