"""What a core session answers when something is wrong: a broken session rule
(:class:`SessionError`: the connection ends), a request the node declines
(:class:`Refused`: FAILED or SEND_FAILED, the session goes on), and the codes those carry
for the node's refusals and faults."""

from __future__ import annotations

from twisted.python.failure import Failure

from bridge.node.broker import (
    AddressFull,
    AddressNotFound,
    NotStored,
    QueueExists,
    QueueNotFound,
    refusal,
)
from bridge.protocol import packets as p
from security.errors import PermissionDenied

REQUEST = "a core request"
"""What the log calls a request of a core client that failed."""


class SessionError(Exception):
    """The peer broke a session rule: the connection ends with this message."""


class Refused(Exception):
    """A request the node declines: answered FAILED/SEND_FAILED, the session goes on."""

    def __init__(self, code: p.ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def code(refused: Exception | None) -> p.ErrorCode:
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


def failed(request_id: int, failure: Failure) -> p.Failed:
    """FAILED for a request whose work failed."""
    return p.Failed(request_id, code(refusal(failure, REQUEST)), failure.getErrorMessage())


def send_failed(sequence: int, failure: Failure) -> p.SendFailed:
    """SEND_FAILED for a send whose write failed."""
    return p.SendFailed(sequence, code(refusal(failure, REQUEST)), failure.getErrorMessage())
