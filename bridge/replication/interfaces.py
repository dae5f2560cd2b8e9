"""The seams between the core head and replication: on a live node, a backup that logged in
as the cluster user and sent REPLICA_ANNOUNCE is handed over, and from then on its
connection carries replication only; on any node with a voter, the cluster user's
VOTE_REQUEST is answered (docs/ha.md, "Quorum vote")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zope.interface import Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from bridge.protocol.packets import Packet, ReplicaAnnounce, VoteReply, VoteRequest
    from transport.interfaces import IFrameConnection


class IReplicaLink(Interface):
    """One backup's connection, as the head passes it on."""

    def received(packet: Packet) -> None:
        """A packet from the backup (REPLICA_SYNCED, REPLICA_ACK); any other ends the link."""

    def lost(reason: BaseException) -> None:
        """The connection is gone."""


class IReplicationSource(Interface):
    """A live node's store, offered to backups."""

    def announced(connection: IFrameConnection, announce: ReplicaAnnounce) -> IReplicaLink:
        """A backup asks for a copy: start it over ``connection``. Raises ``ValueError``
        naming why it cannot be (not live, versions differ, another backup in sync)."""


class IVoter(Interface):
    """A node's vote in the quorum of replication pairs without a lease."""

    def answer(request: VoteRequest) -> Deferred[VoteReply]:
        """The vote on ``request``: a backup's takeover is granted only if this node cannot
        reach the live node itself, a live node's going on alone unless its sequence was
        granted already; each sequence once."""
