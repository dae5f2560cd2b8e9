"""The errors the node raises to its heads and bridges, each saying why in words."""

from __future__ import annotations


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
