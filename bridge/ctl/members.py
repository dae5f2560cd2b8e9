"""The node's side of ``[cluster]`` while it serves: its topology (``bridge.ha.topology``),
kept from its links with the other members, pushed to its core clients, and where the
store a client asks for is served (``bridge.heads.core.cluster.ICluster``).

A serving node links with every static member (``[cluster] members``): it logs in there as
the cluster user, announces itself (NODE_ANNOUNCE) and learns that member from the
TOPOLOGY it answers; the member learns this node from the announce. Each link reconnects
every ``retry-interval`` for as long as the node serves, so a member that comes up (a
backup that took over) is known within one interval, and at once where it links first.
A link that reaches this node itself is dropped for good.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from functools import partial
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from zope.interface import implementer

from bridge.config.cluster import ClusterSettings
from bridge.ha.topology import Topology
from bridge.ha.view import Member
from bridge.heads.core import CoreHead
from bridge.heads.core.cluster import ICluster
from bridge.protocol import PACKET_TYPES, PROTOCOL_VERSION, decode_packet, encode_packet
from bridge.protocol import packets as p
from transport.connection import FrameFactory
from transport.endpoints import client_endpoint
from transport.frames import Frame
from transport.interfaces import IFrameConnection, IFrameReceiver
from transport.reconnect import Reconnector, ReconnectPolicy
from transport.urls import URL

log = Logger()


@implementer(ICluster)
class ClusterMembers:
    """The topology of node ``name`` serving ``store``, reached at ``urls``."""

    def __init__(
        self,
        name: str,
        settings: ClusterSettings,
        store: str,
        urls: Sequence[str],
        *,
        head: CoreHead,
        reactor: Any,
    ) -> None:
        self.name = name
        self.settings = settings
        self.hold_timeout = settings.hold_timeout
        self._head = head
        self._reactor = reactor
        own = Member(name, tuple(urls), settings.own_host_id())
        self._topology = Topology(own, (store,), settings.failover_policy)
        self._waiters: list[Deferred[None]] = []
        self._links: dict[int, Reconnector] = {}
        """By the member's place in ``[cluster] members``."""

    # -- the links ----------------------------------------------------------------------
    def start(self) -> None:
        """Link with every static member."""
        interval = self.settings.retry_interval
        policy = ReconnectPolicy(interval, 1.0, interval, -1)
        for index, url in enumerate(self.settings.members):
            factory = FrameFactory(
                partial(_Link, self, index, url), self._reactor, None, PACKET_TYPES, True
            )
            endpoint = client_endpoint(self._reactor, url)
            link = self._links[index] = Reconnector(endpoint, factory, policy, self._reactor)
            link.start()

    async def stop(self) -> None:
        """Stop linking (the head closes the inbound links with its connections)."""
        links, self._links = self._links, {}
        for link in links.values():
            await link.stop()
        for waiter in list(self._waiters):
            waiter.cancel()  # (its canceller takes it off the list)

    def _itself(self, index: int) -> None:
        """The member ``index`` is this node: no link there."""
        link = self._links.pop(index, None)
        if link is not None:
            self._reactor.callLater(0, link.stop)

    @property
    def topology_now(self) -> Topology:
        return self._topology

    def serve_nothing(self) -> None:
        """The node drains: from now on its TOPOLOGY says it serves nothing, pushed at once
        to its core clients (and the members linked in), so that when the drain closes
        their connections they go straight to its failover nodes."""
        if self._topology.serve_nothing():
            self._changed()

    # -- ICluster -----------------------------------------------------------------------
    def topology(self) -> p.Topology:
        return p.Topology(
            tuple(
                p.TopologyMember(
                    entry.member.node_id,
                    entry.member.host_id,
                    entry.member.urls,
                    entry.serves,
                    entry.failover,
                )
                for entry in self._topology.entries
            )
        )

    def route(self, store: str) -> tuple[str, ...] | None:
        if self._topology.serves(store):
            return None
        member = self._topology.server_of(store)
        return () if member is None else member.urls

    def when_changed(self) -> Deferred[None]:
        waiter: Deferred[None] = Deferred(self._waiters.remove)
        self._waiters.append(waiter)
        return waiter

    def linked(self, link: Hashable, announce: p.NodeAnnounce) -> None:
        member = Member(announce.node_id, announce.urls, announce.host_id)
        self.learned(link, member, announce.serves)

    def unlinked(self, link: Hashable) -> None:
        if self._topology.unlinked(link):
            self._changed()

    def learned(self, link: Hashable, member: Member, serves: tuple[str, ...]) -> None:
        """A link with ``member`` is up."""
        if self._topology.linked(link, member, serves):
            self._changed()

    def _changed(self) -> None:
        entries = self._topology.entries
        log.info(
            "node {name}: cluster view {view}",
            name=self.name,
            view=", ".join(
                f"{e.member.node_id} (serves {', '.join(e.serves) or 'nothing'}; "
                f"fails over to {', '.join(e.failover) or 'nobody'})"
                for e in entries
            ),
        )
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(None)
        self._head.topology_changed()


@implementer(IFrameReceiver)
class _Link:
    """One connection to a member: log in as the cluster user, announce this node, learn
    the member from its answer."""

    def __init__(self, members: ClusterMembers, index: int, url: URL) -> None:
        self._members = members
        self._index = index
        self._url = url
        self._connection: IFrameConnection | None = None
        self._peer = ""

    def connection_made(self, connection: IFrameConnection) -> None:
        self._connection = connection
        settings = self._members.settings
        connect = p.Connect(
            PROTOCOL_VERSION,
            f"member link of node {self._members.name}",
            settings.user,
            settings.password,
            0,
            connection.max_frame_size,
        )
        connection.send(*encode_packet(connect))

    def frame_received(self, frame: Frame) -> None:
        connection = self._connection
        assert connection is not None
        try:
            packet = decode_packet(frame.type, frame.payload)
        except ValueError as error:
            connection.close(str(error))
            return
        members = self._members
        if isinstance(packet, p.Connected):
            connection.logged_in()
            self._peer = packet.node_name
            if packet.node_name == members.name:
                members._itself(self._index)
                connection.close()
                return
            own = members.topology_now.own
            announce = p.NodeAnnounce(
                own.member.node_id, own.member.host_id, own.member.urls, own.serves
            )
            connection.send(*encode_packet(announce))
        elif isinstance(packet, p.Topology):
            for entry in packet.members:
                if entry.node_id == self._peer:
                    member = Member(entry.node_id, entry.urls, entry.host_id)
                    members.learned(self, member, entry.serves)
        elif isinstance(packet, p.Failed):
            log.warn(
                "node {name}: the member at {url} refused the link: {why}",
                name=members.name,
                url=str(self._url),
                why=packet.message,
            )
            connection.close()

    def connection_lost(self, reason: BaseException) -> None:
        self._connection = None
        self._members.unlinked(self)
