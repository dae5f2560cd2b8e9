"""What a STOMP session says back, and how it waits on the node: frames out while the
connection lives, an ERROR and then the close, reading paused while a step waits, and
the node's refusals worded as ERROR frames."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from bridge.heads.stomp.destinations import Destination
from bridge.heads.stomp.frames import Command, Frame
from bridge.heads.stomp.headers import StompError
from bridge.heads.stomp.interfaces import IStompTransport
from bridge.node.broker import (
    AddressNotFound,
    BadFilter,
    NodeError,
    QueueExists,
    WrongRouting,
    refusal,
)
from bridge.node.session import ServerSession, SessionState
from security.errors import PermissionDenied

BUSY = "session"
"""The reason the session gives when it pauses reading while a step waits on the node."""
STORE = "store"
"""The reason it gives while too many persistent sends wait for the store."""
ADDRESS_FULL = "address-full"
"""The reason it gives while a SEND waits for room on an address full under BLOCK."""
ORDER = "order"
"""The reason it gives while a non-persistent SEND waits for the persistent ones before
it to be stored and queued, so that it does not overtake them."""

_CLOSED = SessionState.CLOSED


class Wire:
    """One STOMP connection's way back to its client."""

    def __init__(self, transport: IStompTransport, node: ServerSession) -> None:
        self.transport = transport
        self._node = node
        self._life = node.life

    def emit(self, frame: Frame) -> None:
        """Send ``frame``, unless the connection is gone."""
        if self._life.state is not _CLOSED:
            self.transport.send(frame)

    def emit_serialized(self, head: bytes, body: bytes) -> None:
        """Send a frame already serialized (its head, blank line included, and its body),
        unless the connection is gone."""
        if self._life.state is not _CLOSED:
            self.transport.send_serialized(head, body)

    def fail(self, message: str, detail: str, receipt: str | None = None) -> None:
        """An ERROR frame, then the connection closes."""
        headers = [("message", message), ("content-type", "text/plain")]
        if receipt is not None:
            headers.append(("receipt-id", receipt))
        body = detail.encode("utf-8")
        headers.append(("content-length", str(len(body))))
        self.emit(Frame(Command.ERROR, tuple(headers), body))
        self.closing()

    def closing(self) -> None:
        """Nothing more is read; the connection closes once what is queued has gone."""
        self._node.close()
        self.transport.close()

    def then(
        self,
        work: Deferred[Any],
        done: Callable[[Any], None],
        receipt: str | None,
        failed: Callable[[Failure], None] | None = None,
    ) -> None:
        """Stop reading until ``work`` fires, then run ``done`` with its result (or
        ``failed``, by default an ERROR naming the failure)."""
        self.transport.pause_reading(BUSY)

        def succeeded(result: Any) -> None:
            if self._life.state is _CLOSED:
                return
            try:
                done(result)
            except StompError as error:
                self.fail(error.message, error.detail, receipt)
            self.transport.resume_reading(BUSY)

        def refused(failure: Failure) -> None:
            if self._life.state is _CLOSED:
                return
            if failed is not None:
                failed(failure)
            else:
                self.fail(*describe(failure), receipt)
            self.transport.resume_reading(BUSY)

        work.addCallbacks(succeeded, refused)


def refusal_error(refused: PermissionDenied | NodeError, destination: Destination) -> StompError:
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


def describe(failure: Failure) -> tuple[str, str]:
    """An ERROR's message and body for a step that failed on the node."""
    refused = refusal(failure, "a STOMP request")
    if isinstance(refused, AddressNotFound):
        return "no such destination", failure.getErrorMessage()
    if refused is not None:
        return "refused", failure.getErrorMessage()
    return "internal error", f"the node failed: {failure.getErrorMessage()}"
