"""What the core head asks of the node's cluster (docs/ha.md, "Clients that follow the
failover map"): the TOPOLOGY to give a client, where a store a client asks for is served,
and the members that announce themselves on a core connection. The node service's glue
(``bridge.ctl.members``) implements it; the head knows nothing of how the view is kept.
:class:`StoreRoute` is a session's answer to a CLUSTER_CONNECT: serve, redirect or hold.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure
from zope.interface import Attribute, Interface

from bridge.protocol import packets as p


class ICluster(Interface):
    """The node's view of its cluster, as its core head uses it."""

    hold_timeout = Attribute(
        "float: seconds a CLUSTER_CONNECT for a store that no member serves is held, waiting for "
        "a member to serve it, before the client is told to try again"
    )

    def topology() -> p.Topology:
        """The TOPOLOGY to send a client now."""

    def route(store: str) -> tuple[str, ...] | None:
        """None when this node serves ``store``; otherwise the URLs of the member that
        does (empty when no member is known to serve it now)."""

    def when_changed() -> Deferred[None]:
        """Fires at the next change of the view (cancel it to stop waiting)."""

    def linked(link: Hashable, announce: p.NodeAnnounce) -> None:
        """A member announced itself on the connection ``link``."""

    def unlinked(link: Hashable) -> None:
        """That connection is gone."""


class StoreRoute:
    """Where one CLUSTER_CONNECT's store is served, once its login was accepted: here
    (``open``), at another member (``redirect`` with its URLs), or, while no member serves
    it, nowhere yet: the connect is held until the view changes so that one does, at
    most ``hold_timeout``, after which ``redirect`` gets no URLs (the client tries its
    next node). Every wait is on the view's change or the timer."""

    def __init__(
        self,
        store: str,
        cluster: ICluster,
        clock: IReactorTime,
        *,
        open: Callable[[], None],
        redirect: Callable[[str, tuple[str, ...]], None],
    ) -> None:
        self.store = store
        self._cluster = cluster
        self._clock = clock
        self._open = open
        self._redirect = redirect
        self._holding: tuple[Deferred[None], IDelayedCall] | None = None

    @property
    def holding(self) -> bool:
        """The connect waits for a member to serve the store."""
        return self._holding is not None

    def start(self) -> None:
        urls = self._cluster.route(self.store)
        if urls is None:
            self._open()
        elif urls:
            self._redirect(self.store, urls)
        else:
            self._hold(self._clock.callLater(self._cluster.hold_timeout, self._timed_out))

    def stop(self) -> None:
        """The connection is gone: wait no more."""
        if self._holding is not None:
            changed, timer = self._holding
            self._holding = None
            if timer.active():
                timer.cancel()
            changed.cancel()

    def _hold(self, timer: IDelayedCall) -> None:
        changed = self._cluster.when_changed()
        self._holding = (changed, timer)
        changed.addCallbacks(lambda _: self._view_changed(), _cancelled)

    def _view_changed(self) -> None:
        if self._holding is None:
            return
        urls = self._cluster.route(self.store)
        if urls == ():
            self._hold(self._holding[1])  # still nobody: wait on
            return
        self.stop()
        if urls is None:
            self._open()
        else:
            self._redirect(self.store, urls)

    def _timed_out(self) -> None:
        if self._holding is not None:
            changed, _ = self._holding
            self._holding = None
            changed.cancel()
            self._redirect(self.store, ())


def _cancelled(failure: Failure) -> None:
    failure.trap(CancelledError)
