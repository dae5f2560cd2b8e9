"""The errors the node raises to its heads and bridges, each saying why in words, and
which failures of a client's request are such refusals (``refusal``)."""

from __future__ import annotations

from twisted.logger import Logger
from twisted.python.failure import Failure

from bridge.selector import SelectorError
from bridge.store.errors import StoreError

log = Logger()


class NodeError(Exception):
    """An operation the node refuses, with the reason in words."""


class AddressNotFound(NodeError):
    """The address does not exist and may not be created on first use."""


class QueueNotFound(NodeError):
    """No queue of that name."""


class AddressFull(NodeError):
    """The address is full and its address-full policy is FAIL."""


class NotStored(NodeError):
    """The store could not write an operation (a full disk, say): the node undid what it
    had done in memory, and the message says what state things are in. It may be retried."""


class QueueExists(NodeError):
    """A queue of that name exists already (or, for a durable subscription, one that is
    not it)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"queue {name!r} already exists")
        self.name = name


class QueueInUse(NodeError):
    """The queue has consumers, so it is not deleted."""

    def __init__(self, name: str, consumers: int) -> None:
        super().__init__(f"queue {name!r} has {consumers} consumer(s)")
        self.name = name
        self.consumers = consumers


class BadFilter(NodeError):
    """A filter (a selector) that does not parse: ``text``, and ``reason``."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"bad filter {text!r}: {reason}")
        self.text = text
        self.reason = reason


class WrongRouting(NodeError):
    """The address exists without the routing type asked for, and may not be given it
    (auto-create-addresses is off for it): ``multicast`` says what it is."""

    def __init__(self, name: str, multicast: bool) -> None:
        what = "multicast" if multicast else "anycast"
        super().__init__(f"address {name!r} is {what} and auto-create-addresses is off for it")
        self.name = name
        self.multicast = multicast


def refusal(failure: Failure, what: str) -> NodeError | None:
    """The node's refusal a client's request failed with, to tell the client as it is
    (a filter found bad only when the queue is made is one too). None for a fault, which
    is logged: the store's (a full disk, say: an operational fault, not a bug, and the
    error names the file and the cause: one line, no traceback), or anything else (with
    its traceback). ``what`` names the request for the log."""
    error = failure.value
    if isinstance(error, NodeError):
        return error
    if isinstance(error, SelectorError):
        return NodeError(str(error))
    if isinstance(error, StoreError):
        log.warn("{what} failed: {why}", what=what, why=failure.getErrorMessage())
        return None
    log.failure("{what} failed", failure, what=what)
    return None
