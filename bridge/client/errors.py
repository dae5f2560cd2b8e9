"""What the client raises: one ``ClientError`` hierarchy, each error saying what happened.

A refusal by the node (FAILED, SEND_FAILED) becomes the ``Refused`` subclass of its
``ErrorCode``, carrying the code and the node's own words, which name the address, queue or
permission; the client prefixes what it had asked for.
"""

from __future__ import annotations

from bridge.protocol import ErrorCode


class ClientError(Exception):
    """Anything the client reports to the application."""


class Refused(ClientError):
    """The node refused a request or a send; ``code`` says why, ``reason`` in its words."""

    def __init__(self, what: str, code: ErrorCode, reason: str) -> None:
        super().__init__(f"{what} refused ({code.name}): {reason}")
        self.what = what
        self.code = code
        self.reason = reason


class AuthenticationFailed(Refused):
    """The node refused the login (credentials or certificate)."""


class PermissionDenied(Refused):
    """The user lacks the permission the node names."""


class NotFound(Refused):
    """No such queue, address, consumer or transaction on the node."""


class AlreadyExists(Refused):
    """The queue (or consumer or transaction id) exists already."""


class InvalidRequest(Refused):
    """Well-formed but meaningless: a bad filter, a large send whose size did not add up."""


class AddressFull(Refused):
    """The address is full and its address-full policy is FAIL."""


class UnsupportedVersion(Refused):
    """The node does not speak this client's protocol version."""


class NodeFailed(Refused):
    """The node failed (its store could not write); the request may be retried."""


_BY_CODE: dict[ErrorCode, type[Refused]] = {
    ErrorCode.AUTHENTICATION: AuthenticationFailed,
    ErrorCode.PERMISSION_DENIED: PermissionDenied,
    ErrorCode.NOT_FOUND: NotFound,
    ErrorCode.ALREADY_EXISTS: AlreadyExists,
    ErrorCode.INVALID: InvalidRequest,
    ErrorCode.ADDRESS_FULL: AddressFull,
    ErrorCode.UNSUPPORTED_VERSION: UnsupportedVersion,
    ErrorCode.INTERNAL: NodeFailed,
}


def refused(what: str, code: ErrorCode, reason: str) -> Refused:
    """The ``Refused`` subclass for ``code``."""
    return _BY_CODE[code](what, code, reason)


class ConnectionLost(ClientError):
    """The connection to the node is gone: a request's outcome is unknown, or no reconnect
    is left and nothing pending can complete.

    ``cause``, when known, is what the connection ran into (refused, dropped) without this
    client's reconnect policy: what a caller that retries by itself (a bridge) reports."""

    def __init__(self, message: str, cause: str | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class ClientClosed(ClientError):
    """The application closed the client (or the consumer) this operation needed."""


class NodeProtocolError(ClientError):
    """The node broke the core protocol's session rules; the client closed the connection."""


class StaleDelivery(ClientError):
    """An ack or nack of a message received on an earlier connection, or by a consumer
    closed since: the node takes it back and delivers it again."""


class NotAcknowledgeable(ClientError):
    """An ack or nack of a message from a browse-only consumer, or one already settled."""


class TransactionRolledBack(ClientError):
    """The transaction had sent or acknowledged something when its connection was lost
    (its node died, or failed over): the node rolled it back, so it is rollback-only. Its
    commit and every further send or ack in it raise this; roll it back (which succeeds)
    and run the work again in a new transaction (Artemis's
    ``TransactionRolledBackException``)."""
