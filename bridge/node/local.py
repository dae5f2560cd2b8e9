"""A connection's local transactions, by the names its client gives them, for every head.

A client opens a transaction under a name of its own (a core tx id, a STOMP
``transaction`` header); the sends and acknowledgements made in it take effect together
at commit, or never (``bridge.node.broker``'s ``begin``, ``commit``, ``rollback``). An
effect a head can only take at commit (a STOMP NACK in a transaction) waits in
``at_commit``. The connection going rolls back what is still open. Heads subclass
:class:`LocalTransaction` with what only they answer (STOMP's receipts).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import attrs
from twisted.internet.defer import Deferred

from bridge.node.broker import Broker, Transaction


@attrs.define(eq=False)
class LocalTransaction:
    """One open transaction, and what it does at commit before its writes."""

    tx: Transaction
    at_commit: list[Callable[[], None]] = attrs.Factory(list)


K = TypeVar("K", bound=Hashable)
L = TypeVar("L", bound=LocalTransaction)


class LocalTransactions(Generic[K, L]):
    """The open transactions of one connection, by the client's names for them."""

    def __init__(self, broker: Broker, make: Callable[[Transaction], L]) -> None:
        """``make`` wraps the broker's transaction in the head's kind of it."""
        self._broker = broker
        self._make = make
        self._open: dict[K, L] = {}

    def begin(self, name: K) -> bool:
        """Open a transaction named ``name``; False if one is open under it already."""
        if name in self._open:
            return False
        self._open[name] = self._make(self._broker.begin())
        return True

    def get(self, name: K) -> L | None:
        """The open transaction named ``name``, if any."""
        return self._open.get(name)

    def end(self, name: K) -> L | None:
        """The open transaction named ``name``, no longer open (to commit or roll back)."""
        return self._open.pop(name, None)

    def commit(self, local: L) -> Deferred[None]:
        """Take what waited for the commit, then commit; fires once stored."""
        for effect in local.at_commit:
            effect()
        return Deferred.fromCoroutine(self._broker.commit(local.tx))

    def rollback(self, local: L) -> Deferred[None]:
        return Deferred.fromCoroutine(self._broker.rollback(local.tx))

    def close(self) -> list[L]:
        """The connection is gone: the transactions still open, to roll back."""
        open_ones = list(self._open.values())
        self._open.clear()
        return open_ones
