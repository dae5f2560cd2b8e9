"""A client session's requests to the node (queues, consumers, transactions, acks with
an answer, queries): each kind, what is kept of one until the node answers, and which
answer each kind gets."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from bridge.client.events import Settle
from bridge.protocol import AddressInfo as AddressInfoPacket
from bridge.protocol import Packet, Reattached

Frame = tuple[int, bytes]
"""A frame to write: its type and its payload (what ``data_to_send`` gives)."""


class RequestKind:
    """What a request asks for, which decides what a lost connection does to it."""

    QUEUE = "queue"
    CREATE_CONSUMER = "create-consumer"
    REATTACH = "reattach-consumer"
    CLOSE_CONSUMER = "close-consumer"
    TX_BEGIN = "tx-begin"
    COMMIT = "commit"
    ROLLBACK = "rollback"
    ACK = "ack"
    ADDRESS = "address"


@attrs.define
class Request:
    """A request until the node answers it: ``frame`` is sent (again, for some kinds,
    after a drop); ``subject`` is the consumer or transaction it is about."""

    kind: str
    what: str
    callback: Settle | None
    frame: Frame
    subject: int = 0
    sent: bool = False
    answer: Callable[[AddressInfoPacket], object] | None = None
    """For a query: what to do with its answer."""


ANSWERS: dict[str, type[Packet]] = {
    RequestKind.ADDRESS: AddressInfoPacket,
    RequestKind.REATTACH: Reattached,
}
"""The answer each kind of request gets when it succeeds, if not OK."""
