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
        self._per_endpoint = attempts_per_endpoint
        self.current = 0
        """The index of the endpoint the next attempt goes to (the last that connected,
        while it still has attempts left)."""
        self._failures = 0

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        attempt = self._endpoints[self.current].connect(protocolFactory)
        return attempt.addErrback(self._not_connected)

    def established(self) -> None:
        """The last connection did what it was for (the node accepted the login): its
        endpoint's failures start again from none."""
        self._failures = 0

    def failed(self) -> None:
        """An attempt failed: not connected, or lost before it was established."""
        self._failures += 1
        if self._failures >= self._per_endpoint:
            self._failures = 0
            self.current = (self.current + 1) % len(self._endpoints)

    def _not_connected(self, failure: Failure) -> Failure:
        self.failed()
        return failure

    def __repr__(self) -> str:
        return f"<FailoverEndpoint {self.current} of {list(self._endpoints)}>"
