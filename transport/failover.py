"""One client endpoint over a list of them, for a client given the URLs of a live node and
its backups: each attempt goes where the last one succeeded, and after
``attempts_per_endpoint`` failures in a row there, to the next in the list (wrapping).

An attempt succeeds when the layer above says so (``established``: its login was
accepted), not when TCP connects: a connection lost before that (something else answers
at the address, a node closing, a partition's leaked route) is a failure (``failed``), or
a client would keep going back to an address that accepts and never serves.

ClientService drives it as it drives one endpoint, so the reconnect policy (the waits, the
attempts before giving up) counts attempts across the whole list. With shared-store high
availability only the live node accepts connections, so trying a backup is harmless: it
refuses until it has taken over.

A client that knows its cluster's failover map reorders the list (``follow``): its own
node first, for as many attempts in a row as it allows a glitch, then its failover nodes
one attempt each; and a node's redirect sends the next attempt elsewhere once
(``redirect``).
"""

from __future__ import annotations

from collections.abc import Sequence

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IProtocol, IProtocolFactory, IStreamClientEndpoint
from twisted.python.failure import Failure
from zope.interface import implementer


@implementer(IStreamClientEndpoint)
class FailoverEndpoint:
    """Connects through ``endpoints`` in turn, as the module docstring says."""

    def __init__(
        self, endpoints: Sequence[IStreamClientEndpoint], attempts_per_endpoint: int = 1
    ) -> None:
        if not endpoints:
            raise ValueError("a failover endpoint needs at least one endpoint")
        if attempts_per_endpoint < 1:
            raise ValueError(
                f"attempts per endpoint must be at least 1, got {attempts_per_endpoint}"
            )
        self._endpoints = tuple(endpoints)
        self._attempts = (attempts_per_endpoint,) * len(self._endpoints)
        self.current = 0
        """The index of the endpoint the next attempt goes to (the last that connected,
        while it still has attempts left)."""
        self._failures = 0
        self.detour: IStreamClientEndpoint | None = None
        """Where the next attempt goes instead, once (``redirect``)."""

    def follow(self, endpoints: Sequence[IStreamClientEndpoint], first_attempts: int) -> None:
        """Try ``endpoints`` from now on, from the first: it for ``first_attempts``
        failures in a row, each other one once, then the first again."""
        if not endpoints or first_attempts < 1:
            raise ValueError("follow: at least one endpoint, and one attempt at the first")
        self._endpoints = tuple(endpoints)
        self._attempts = (first_attempts,) + (1,) * (len(self._endpoints) - 1)
        self.current = 0
        self._failures = 0
        self.detour = None

    def redirect(self, endpoint: IStreamClientEndpoint) -> None:
        """The next attempt goes to ``endpoint``; if it fails, the order goes on as if
        the endpoint that redirected had failed."""
        self.detour = endpoint

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        where = self.detour if self.detour is not None else self._endpoints[self.current]
        attempt = where.connect(protocolFactory)
        return attempt.addErrback(self._not_connected)

    def established(self) -> None:
        """The last connection did what it was for (the node accepted the login): its
        endpoint's failures start again from none."""
        self._failures = 0

    def failed(self) -> None:
        """An attempt failed: not connected, or lost before it was established."""
        self.detour = None
        self._failures += 1
        if self._failures >= self._attempts[self.current]:
            self._failures = 0
            self.current = (self.current + 1) % len(self._endpoints)

    def _not_connected(self, failure: Failure) -> Failure:
        self.failed()
        return failure

    def __repr__(self) -> str:
        return f"<FailoverEndpoint {self.current} of {list(self._endpoints)}>"
