"""What the core head asks of the node's cluster (docs/ha.md, "Clients that follow the
failover map"): the TOPOLOGY to give a client, where a store a client asks for is served,
and the members that announce themselves on a core connection. The node service's glue
(``bridge.ctl.members``) implements it; the head knows nothing of how the view is kept.
"""

from __future__ import annotations

from collections.abc import Hashable

from twisted.internet.defer import Deferred
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
