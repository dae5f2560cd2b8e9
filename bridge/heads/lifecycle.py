"""What every protocol head of a node does alike: log in through the node's one
:class:`~bridge.logins.Logins`, know its live connections (to count them, and their
producers blocked on full addresses), and end them all when the node stops, returning
once each connection's session gave back what it held."""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from twisted.internet.defer import Deferred

from bridge.logins import Logins
from bridge.node.broker import Broker
from security import SecurityStore
from security.auth import SecurityAuth
from security.subject import Subject


class HeadConnection(Protocol):
    """One connection of a head, as the head sees it."""

    finished: Deferred[None]
    """Fires once the connection is gone and its session gave back what it held
    (deliveries to their queues, open transactions rolled back)."""

    @property
    def producers_blocked(self) -> int:
        """How many of its producers wait for room on an address full under BLOCK."""

    def end(self, reason: str) -> None:
        """The node stops: tell the peer ``reason`` in the protocol's words, then close."""


Connection = TypeVar("Connection", bound=HeadConnection)


class Head(Generic[Connection]):
    """The lifecycle a head shares with the others; a head adds how it listens and what
    a connection is (a ``HeadConnection``)."""

    def __init__(
        self,
        broker: Broker,
        security: SecurityStore,
        *,
        reactor: Any,
        logins: Logins | None = None,
    ) -> None:
        self.broker = broker
        self.security = security
        self.logins = logins if logins is not None else Logins(reactor, security)
        self.reactor = reactor
        self._live: set[Connection] = set()
        self._cleanups: set[Deferred[None]] = set()

    @property
    def connections(self) -> int:
        return len(self._live)

    @property
    def producers_blocked(self) -> int:
        """Producers of every connection waiting for room on a full address."""
        return sum(connection.producers_blocked for connection in self._live)

    def authenticate(self, auth: SecurityAuth) -> Deferred[Subject]:
        """Log in through the node's :class:`Logins` (bounded hashing off the reactor)."""
        return self.logins.authenticate(auth)

    def opened(self, connection: Connection) -> None:
        self._live.add(connection)

    def closed(self, connection: Connection, cleanup: Deferred[None]) -> None:
        """``connection`` is gone; its ``finished`` fires once ``cleanup`` (its session
        giving back what it held) has."""
        self._live.discard(connection)
        self._cleanups.add(cleanup)
        cleanup.addBoth(lambda _: self._cleanups.discard(cleanup))
        cleanup.chainDeferred(connection.finished)

    async def close_connections(self, reason: str) -> None:
        """End every connection with ``reason``; returns once their sessions gave back
        what they held."""
        live = list(self._live)
        for connection in live:
            connection.end(reason)
        for connection in live:
            await connection.finished
        for cleanup in list(self._cleanups):
            await cleanup
