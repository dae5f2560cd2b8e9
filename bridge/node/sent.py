"""The values routing, paging and local transactions hand each other for a send: where
it went (``Routed``) and the transaction it belongs to, if any (``Transaction``)."""

from __future__ import annotations

import attrs
from twisted.internet.defer import Deferred

from bridge.message import Message
from bridge.node.address import Binding
from bridge.node.queue import Entry
from bridge.store.records import TxId


@attrs.frozen
class Routed:
    """Where a send went: the queues it reached, or that it was a duplicate, or dropped by
    a full address's DROP policy."""

    queues: tuple[str, ...]
    duplicate: bool = False
    dropped: bool = False


@attrs.define(eq=False)
class Transaction:
    """A local transaction: its sends reach their queues, and its acknowledgements take
    effect, together at commit, or never."""

    store_tx: TxId
    sends: list[tuple[Message, list[Binding], frozenset[str] | None]] = attrs.Factory(list)
    """Each send, its bindings and, for a paged one, the queues that have it stored."""
    acknowledged: list[tuple[str, Entry]] = attrs.Factory(list)
    writes: list[Deferred[None]] = attrs.Factory(list)
    repeats: list[tuple[Message, Deferred[bool]]] = attrs.Factory(list)
    """Sends whose duplicate id's first send was still being written: at commit, each is
    a duplicate if that send committed, and one of the transaction's sends if it failed."""
