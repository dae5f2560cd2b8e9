"""A core connection's sends: SEND, SEND_MANY and large sends in, checked and routed
through the node's session layer (``bridge.node.sends``, ``bridge.node.large_sends``);
SEND_CONFIRMED, SEND_FAILED and PRODUCER_CREDITS out.

Sequences increase, and a large send's chunks come before any other send (a session
rule: :class:`SessionError`). Confirmations are batched: the sends of one reactor turn
that are done (durable ones once their group commit fired) are confirmed by one
SEND_CONFIRMED at the end of the turn. The bytes of every send are granted back to the
producer as PRODUCER_CREDITS at the end of the turn it was handled in, except to an
address full under the BLOCK policy, whose grants wait for room
(``bridge.node.credits``).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from bridge.heads.core.errors import Refused, SessionError, code, send_failed
from bridge.message import Message
from bridge.node.broker import (
    DUPLICATE_ID_HEADER,
    AddressNotFound,
    Broker,
    NodeError,
    NotStored,
    Routed,
    Transaction,
    Unsettled,
    duplicate_id,
)
from bridge.node.credits import ProducerCredits
from bridge.node.large_sends import LargeSend
from bridge.node.local import LocalTransaction, LocalTransactions
from bridge.node.order import Place
from bridge.node.sends import Sends
from bridge.node.session import ServerSession, SessionState
from bridge.protocol import packets as p
from security.errors import PermissionDenied
from security.permissions import Permission

_OPEN, _CLOSED = SessionState.OPEN, SessionState.CLOSED
_SEND = Permission.SEND


def open_transaction(
    transactions: LocalTransactions[int, LocalTransaction], tx_id: int | None
) -> Transaction | None:
    """The open transaction ``tx_id`` names (None: none); Refused if none is open."""
    if tx_id is None:
        return None
    local = transactions.get(tx_id)
    if local is None:
        raise Refused(p.ErrorCode.NOT_FOUND, f"no open transaction {tx_id}")
    return local.tx


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


class Producer:
    """What one core connection sends to the node."""

    def __init__(
        self,
        broker: Broker,
        node: ServerSession,
        transactions: LocalTransactions[int, LocalTransaction],
        *,
        clock: IReactorTime,
        emit: Callable[[p.Packet], None],
        abort: Callable[[str], None],
        producer_window_size: int,
    ) -> None:
        self._broker = broker
        self._node = node
        self._life = node.life
        self._transactions = transactions
        self._clock = clock
        self._emit = emit
        self._abort = abort
        self._producer_window = producer_window_size
        self._credits: ProducerCredits | None = None
        """Producer credit given back, once logged in."""
        self._last_sequence = 0
        self._sends: Sends[_Pending] = Sends(broker, self)
        self._confirmable = 0
        self._confirmed = 0
        self._confirm_call: IDelayedCall | None = None
        self._large: _LargeSend | None = None
        self._in_packet = False
        self._checked: str | None = None
        """The address checked last in the SEND_MANY being handled (None outside one)."""

    def logged_in(self) -> None:
        self._credits = ProducerCredits(self._node, self._give)

    def close(self) -> None:
        """The connection is gone: nothing more is confirmed, held sends and a large send
        under way are let go (and the references back to this producer with them)."""
        if self._confirm_call is not None and self._confirm_call.active():
            self._confirm_call.cancel()
        self._sends.close()  # held sends were never routed, nor confirmed
        if self._large is not None:
            self._large.discard()
            self._large = None
        self._credits = None

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

    def send(self, packet: p.Send) -> None:
        self._send_one(packet.sequence, packet.tx_id, packet.message)

    def send_many(self, packet: p.SendMany) -> None:
        """Each message as a SEND of its own, in order (one may end the session). Sends
        outside a transaction to the address the one before was let send to are not
        checked again: nothing changes a permission within a turn."""
        sequence, tx_id = packet.first_sequence, packet.tx_id
        self._in_packet = True
        try:
            for message in packet.messages:
                if self._life.state is not _OPEN:
                    return
                self._send_one(sequence, tx_id, message)
                sequence += 1
        finally:
            self._in_packet = False
            self._checked = None

    def _send_one(self, sequence: int, tx_id: int | None, message: Message) -> None:
        self._sequence(sequence)
        credit = message.size if self._producer_window != p.UNLIMITED else 0
        held = self._route(sequence, tx_id, message, credit)
        if credit and not held:
            self._grant(message.address, credit)

    def _check_send(self, tx_id: int | None, address: str) -> Transaction | None:
        """The send's transaction; Refused if it may not be sent."""
        tx = None if tx_id is None else open_transaction(self._transactions, tx_id)
        try:
            if not self._broker.has_address(address):
                self._node.check_address(address)
            self._node.check(address, _SEND)
        except (PermissionDenied, NodeError) as refused:
            raise Refused(code(refused), str(refused)) from None
        return tx

    def _route(self, sequence: int, tx_id: int | None, message: Message, credit: int = 0) -> bool:
        """Route a send, or hold a non-durable one behind earlier sends that wait for the
        store (True: its ``credit`` is given back once it is routed)."""
        address = message.address
        if tx_id is not None or address != self._checked:
            try:
                tx = self._check_send(tx_id, address)
            except Refused as refused:
                self._broker.discard(message)
                self._refuse(sequence, refused.code, str(refused))
                return False
            if tx_id is None and self._in_packet:
                self._checked = address
        else:
            tx = None
        if message.duplicate_id is None and DUPLICATE_ID_HEADER in message.headers:
            found = duplicate_id(message)  # (the header's: nearly no send has it)
            if found is not None:
                message = attrs.evolve(message, duplicate_id=found)
        if tx is not None:
            self._route_in(tx, sequence, message)
            return False
        sends = self._sends
        if (
            not message.durable
            and sends.waiting
            and sends.hold(_Pending(sequence, credit, message=message))
        ):
            # Routed now, it would reach its queue before the earlier sends queued only
            # once written: held behind them.
            return True
        pending = _Pending(sequence)
        try:
            sends.publish(pending, message)
        except NodeError as refused:
            self._send_refused(pending, message, refused)
        return False

    def _send_refused(self, pending: _Pending, message: Message, refused: NodeError) -> None:
        """SEND_FAILED for a send outside a transaction the node refused; the
        confirmations pass over it in its turn."""
        if isinstance(refused, AddressNotFound):
            self._broker.discard(message)
        self._emit(p.SendFailed(pending.sequence, code(refused), str(refused)))
        self._sends.written(pending)

    def due(self, pending: _Pending) -> None:
        """A held send's turn came: route it, and give its producer credit back."""
        message, pending.message = pending.message, None
        assert message is not None
        try:
            self._sends.route(pending, message)
        except NodeError as refused:
            self._send_refused(pending, message, refused)
        if pending.grant:
            self._grant(message.address, pending.grant)

    def _route_in(self, tx: Transaction, sequence: int, message: Message) -> None:
        """A send in a transaction: it takes effect when the transaction commits."""
        try:
            routed = self._broker.publish(message, tx=tx)
        except NodeError as refused:
            if isinstance(refused, AddressNotFound):
                self._broker.discard(message)
            self._refuse(sequence, code(refused), str(refused))
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
        """A send's write failed: SEND_FAILED, and the confirmations pass over it. A send
        the node stopped serving before it was settled (``Unsettled``: the backup may hold
        it) is neither: the connection ends, nothing after it is confirmed, and the client
        sends it again where it goes next (Artemis's resend after a failover)."""
        if failure.check(Unsettled):
            self._abort(failure.getErrorMessage())
            return False
        if self._life.state is not _CLOSED:
            self._emit(send_failed(pending.sequence, failure))
        return True

    def busy(self, busy: bool) -> None:
        """(Producer credits pace a core client: its sends' bytes are not counted.)"""

    def released(self, pending: _Pending) -> None:
        """Every send up to ``pending`` is done: confirm them at the end of this turn."""
        self._confirmable = pending.sequence
        if self._confirm_call is None:  # (once a turn: not a call per send)
            self._end_of_turn()

    def _end_of_turn(self) -> None:
        """Confirm, and give credits back, at the end of this turn (not yet called)."""
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
        if self._confirm_call is None:
            self._end_of_turn()

    def _give(self, address: str, credits: int) -> None:
        if self._life.state is _OPEN:
            self._emit(p.ProducerCredits(address, credits))

    # -- large sends ----------------------------------------------------------------------

    def send_large_begin(self, packet: p.SendLargeBegin) -> None:
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

    def send_large_chunk(self, packet: p.SendLargeChunk) -> None:
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
