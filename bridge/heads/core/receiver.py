"""The core head's Twisted glue: frames in, packets to the session, packets out as frames.

A frame that does not decode, or a packet that breaks a session rule, ends that connection
with a transport ERROR frame naming the fault; every other connection goes on. Logins go
through the node's :class:`~bridge.logins.Logins` (a password hash takes a fraction of a
second and 128 MiB: at most a few run at once, off the reactor).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IListeningPort
from twisted.logger import Logger
from zope.interface import implementer

from bridge.heads.core.cluster import ICluster
from bridge.heads.core.errors import SessionError
from bridge.heads.core.session import CoreSession
from bridge.heads.lifecycle import Head
from bridge.logins import Logins
from bridge.node.broker import Broker
from bridge.protocol import PACKET_TYPES, PacketFormatError, decode_packet, encode_packet
from bridge.protocol import packets as p
from bridge.replication.interfaces import IReplicaLink, IReplicationSource, IVoter
from security import SecurityStore
from security.auth import SecurityAuth
from security.subject import Subject
from transport.endpoints import listen
from transport.frames import Frame
from transport.interfaces import IFrameConnection, IFrameReceiver
from transport.settings import ConnectionSettings
from transport.tls import TLSConfig
from transport.urls import URL

log = Logger()


class CoreHead(Head["CoreReceiver"]):
    """The core protocol on one node: builds a receiver per connection (the shared
    lifecycle, ``bridge.heads.lifecycle``, knows the live ones)."""

    def __init__(
        self,
        broker: Broker,
        security: SecurityStore,
        *,
        node_name: str,
        node_id: str,
        reactor: Any,
        logins: Logins | None = None,
    ) -> None:
        super().__init__(broker, security, reactor=reactor, logins=logins)
        self.node_name = node_name
        self.node_id = node_id
        self.replication: IReplicationSource | None = None
        """With HA replication, on the live node: where an announced backup goes."""
        self.cluster: ICluster | None = None
        """With ``[cluster]``: the node's view, its TOPOLOGY and where stores are served."""
        self.voter: IVoter | None = None
        """With ``[cluster]``: the node's vote in the quorum of replication pairs."""

    def topology_changed(self) -> None:
        """The cluster's view changed: every open session of protocol 4 hears of it."""
        for receiver in list(self._live):
            receiver.topology_changed()

    def receiver(self, producer_window_size: int = p.UNLIMITED) -> CoreReceiver:
        return CoreReceiver(self, producer_window_size)

    def listen(
        self,
        url: str | URL,
        *,
        settings: ConnectionSettings | None = None,
        tls: TLSConfig | None = None,
        producer_window_size: int = p.UNLIMITED,
    ) -> Deferred[IListeningPort]:
        """Accept core-protocol connections at ``url``, granting each producer
        ``producer_window_size`` bytes of credit per address (-1: no producer flow
        control)."""
        return listen(
            self.reactor,
            url,
            lambda: self.receiver(producer_window_size),
            settings=settings,
            accepted_types=PACKET_TYPES,
            tls=tls,
        )


@implementer(IFrameReceiver)
class CoreReceiver:
    """One connection of the core head."""

    def __init__(self, head: CoreHead, producer_window_size: int = p.UNLIMITED) -> None:
        self._head = head
        self._producer_window = producer_window_size
        self._connection: IFrameConnection | None = None
        self._session: CoreSession | None = None
        self._replica: IReplicaLink | None = None
        self._member = False
        """A member announced itself on this connection (NODE_ANNOUNCE)."""
        self.finished: Deferred[None] = Deferred()
        """Fires once the connection is gone and its session gave back what it held."""

    def connection_made(self, connection: IFrameConnection) -> None:
        head = self._head
        self._connection = connection
        self._session = CoreSession(
            head.broker,
            head.security,
            node_name=head.node_name,
            node_id=head.node_id,
            clock=head.reactor,
            emit=self._emit,
            abort=self._abort,
            authenticate=self._authenticate,
            producer_window_size=self._producer_window,
            is_writable=lambda: connection.is_writable,
            max_frame_size=connection.max_frame_size,
            before_flush=connection.call_before_flush,
            cluster=head.cluster,
        )
        connection.add_writability_listener(self._session.writability_changed)
        head.opened(self)

    def frame_received(self, frame: Frame) -> None:
        assert self._connection is not None and self._session is not None
        try:
            packet = decode_packet(frame.type, frame.payload)
            if self._replica is not None:
                self._replica.received(packet)
            elif isinstance(packet, p.ReplicaAnnounce):
                self._announced(packet)
            elif isinstance(packet, p.NodeAnnounce):
                self._member_announced(packet)
            elif isinstance(packet, p.VoteRequest):
                self._vote(packet)
            else:
                self._session.packet_received(packet)
        except (PacketFormatError, SessionError) as error:
            log.info(
                "closing core connection from {peer}: {error}",
                peer=self._connection.peer,
                error=error,
            )
            self._connection.close(str(error))

    @property
    def producers_blocked(self) -> int:
        return 0 if self._session is None else self._session.producers_blocked

    def _cluster_only(
        self, packet: p.Packet, missing: str | None, action: str
    ) -> tuple[p.ErrorCode, str] | None:
        """Why this connection may not ``action`` (send ``packet``), which only the cluster
        user may, with the code to refuse it with (None: it may). ``missing`` says what
        this node lacks to answer it."""
        assert self._session is not None
        subject = self._session.subject
        if subject is None:
            raise SessionError(f"{packet.TYPE.name} before the login was accepted")
        if missing is not None:
            return p.ErrorCode.INVALID, missing
        if self._head.security.enabled and not subject.internal:
            return p.ErrorCode.PERMISSION_DENIED, f"only the cluster user may {action}"
        return None

    def _refuse(self, what: str, refusal: tuple[p.ErrorCode, str]) -> None:
        assert self._connection is not None
        code, why = refusal
        log.info(
            "refused {what} from {peer}: {why}", what=what, peer=self._connection.peer, why=why
        )
        self._emit(p.Failed(0, code, why))
        self._connection.close()

    def _announced(self, announce: p.ReplicaAnnounce) -> None:
        """A backup asks for the store: hand the connection to replication, or refuse."""
        assert self._connection is not None
        source = self._head.replication
        refusal = self._cluster_only(
            announce,
            None if source is not None else "this node is not a live node that replicates",
            "replicate",
        )
        if refusal is None and source is not None:
            try:
                self._replica = source.announced(self._connection, announce)
                return
            except ValueError as error:
                refusal = (p.ErrorCode.INVALID, str(error))
        assert refusal is not None
        self._refuse(f"replication to {announce.node_name}", refusal)

    def _member_announced(self, announce: p.NodeAnnounce) -> None:
        """A member links with this node: known while the connection lasts, answered with
        this node's TOPOLOGY (which names this node, so the link knows it too)."""
        cluster = self._head.cluster
        refusal = self._cluster_only(
            announce,
            None if cluster is not None else "this node is not a member of a cluster",
            "announce a node",
        )
        if refusal is None and cluster is not None:
            self._member = True
            cluster.linked(self, announce)
            self._emit(cluster.topology())
            return
        assert refusal is not None
        self._refuse(f"the member {announce.node_id}", refusal)

    def _vote(self, request: p.VoteRequest) -> None:
        """A node of a replication pair asks for this node's vote: answer, or refuse."""
        voter = self._head.voter
        refusal = self._cluster_only(
            request,
            None if voter is not None else "this node has no vote: it has no [cluster]",
            "ask for a vote",
        )
        if refusal is None and voter is not None:
            voter.answer(request).addCallback(self._voted, request)
            return
        assert refusal is not None
        self._refuse(f"a vote to {request.node_name}", refusal)

    def _voted(self, reply: p.VoteReply, request: p.VoteRequest) -> None:
        log.info(
            "vote for {node} (sequence {sequence}, about {about}): {vote}, {why}",
            node=request.node_name,
            sequence=request.sequence,
            about=request.about or "itself",
            vote="granted" if reply.granted else "refused",
            why=reply.reason,
        )
        self._emit(reply)

    def topology_changed(self) -> None:
        if self._session is not None:
            self._session.push_topology()

    def connection_lost(self, reason: BaseException) -> None:
        assert self._session is not None
        if self._replica is not None:
            self._replica.lost(reason)
        if self._member and self._head.cluster is not None:
            self._member = False
            self._head.cluster.unlinked(self)
        self._head.closed(self, self._session.connection_lost())
        # Break the receiver <-> connection <-> session cycles: all three (and what the
        # connection buffered) are freed as soon as the session's cleanup ends.
        self._session = None
        self._connection = None

    def end(self, reason: str) -> None:
        """Close with a transport ERROR giving ``reason`` (the node stops)."""
        if self._connection is not None:
            self._connection.close(reason)

    def _emit(self, packet: p.Packet) -> None:
        if self._connection is not None:  # (a gone connection sends nothing)
            self._connection.send(*encode_packet(packet))

    def _abort(self, reason: str) -> None:
        if self._connection is not None:
            self._connection.close(reason or None)

    def _authenticate(self, connect: p.Connect | p.ClusterConnect) -> Deferred[Subject]:
        assert self._connection is not None
        auth = SecurityAuth(
            user=connect.user,
            password=connect.password,
            peer_certificates=tuple(self._connection.peer_certificates()),
            remote_address=self._connection.peer,
            protocol="core",
        )
        return self._head.authenticate(auth).addCallback(self._logged_in)

    def _logged_in(self, subject: Subject) -> Subject:
        """Frames up to the acceptor's max-frame-size from now on (before: a CONNECT's)."""
        if self._connection is not None:
            self._connection.logged_in()
        return subject


def listen_core(
    reactor: Any,
    url: str | URL,
    broker: Broker,
    security: SecurityStore,
    *,
    node_name: str,
    node_id: str,
    settings: ConnectionSettings | None = None,
    tls: TLSConfig | None = None,
    producer_window_size: int = p.UNLIMITED,
) -> Deferred[IListeningPort]:
    """Accept core-protocol connections at ``url`` for ``broker``."""
    head = CoreHead(broker, security, node_name=node_name, node_id=node_id, reactor=reactor)
    return head.listen(url, settings=settings, tls=tls, producer_window_size=producer_window_size)
