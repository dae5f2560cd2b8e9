"""The core head in a cluster (bridge/heads/core/cluster.py): TOPOLOGY to a client that
connected with CLUSTER_CONNECT (and none to an older one), at once and at every change; a
CLUSTER_CONNECT for a store served elsewhere redirected; one for a store nobody serves yet
held until a member serves it, or told to try again after the hold; members announcing
themselves. The cluster here is a stand-in for bridge.ctl.members, whose view the system
tests run with real members."""

from __future__ import annotations

from collections.abc import Hashable

import pytest_twisted
from twisted.internet.defer import Deferred
from zope.interface import implementer

from bridge.heads.core.cluster import ICluster
from bridge.protocol import packets as p
from tests.heads.conftest import eventually

A = p.TopologyMember("a", "h1", ("tcp://127.0.0.1:1",), ("a",), ("b",))
B = p.TopologyMember("b", "h2", ("tcp://127.0.0.1:2",), ("b",), ("a",))


@implementer(ICluster)
class Cluster:
    """Serves ``served`` here; ``elsewhere`` maps stores to the URLs serving them."""

    def __init__(self, hold_timeout: float = 30.0) -> None:
        self.hold_timeout = hold_timeout
        self.members: tuple[p.TopologyMember, ...] = (A,)
        self.served = {"a"}
        self.elsewhere: dict[str, tuple[str, ...]] = {}
        self.waiters: list[Deferred[None]] = []
        self.links: dict[Hashable, p.NodeAnnounce] = {}

    def topology(self) -> p.Topology:
        return p.Topology(self.members)

    def route(self, store: str) -> tuple[str, ...] | None:
        return None if store in self.served else self.elsewhere.get(store, ())

    def when_changed(self) -> Deferred[None]:
        waiter: Deferred[None] = Deferred(self.waiters.remove)
        self.waiters.append(waiter)
        return waiter

    def change(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            waiter.callback(None)

    def linked(self, link: Hashable, announce: p.NodeAnnounce) -> None:
        self.links[link] = announce

    def unlinked(self, link: Hashable) -> None:
        del self.links[link]


def cluster_connect(store: str = "", version: int = p.PROTOCOL_VERSION) -> p.ClusterConnect:
    return p.ClusterConnect(version, "follower", None, None, 1 << 20, 1 << 20, store)


@pytest_twisted.ensureDeferred
async def test_a_cluster_client_gets_the_topology_after_connected_and_at_every_change(node):
    node.head.cluster = cluster = Cluster()
    follower = await node.peer(connect_as=None)
    follower.send(cluster_connect())
    await follower.next(p.Topology)
    assert [type(each) for each in follower.received] == [p.Connected, p.Topology]
    assert follower.of(p.Topology) == [p.Topology((A,))]
    older = await node.peer()  # CONNECT: an older client, or one that does not follow
    cluster.members = (A, B)
    node.head.topology_changed()
    assert await follower.next(p.Topology, 2) == p.Topology((A, B))
    assert older.of(p.Topology) == []


@pytest_twisted.ensureDeferred
async def test_a_cluster_connect_of_an_older_version_is_refused(node):
    node.head.cluster = Cluster()
    peer = await node.peer(connect_as=None)
    peer.send(cluster_connect(version=3))
    await peer.lost
    [failed] = peer.of(p.Failed)
    assert failed.code is p.ErrorCode.UNSUPPORTED_VERSION


@pytest_twisted.ensureDeferred
async def test_a_store_served_elsewhere_is_redirected_there(node):
    node.head.cluster = cluster = Cluster()
    cluster.elsewhere["c"] = ("tcp://127.0.0.1:3",)
    peer = await node.peer(connect_as=None)
    peer.send(cluster_connect("c"))
    await peer.lost
    assert peer.received == [p.Redirect("c", ("tcp://127.0.0.1:3",))]


@pytest_twisted.ensureDeferred
async def test_a_store_this_node_serves_opens_the_session(node):
    node.head.cluster = Cluster()
    peer = await node.peer(connect_as=None)
    peer.send(cluster_connect("a"))
    await peer.next(p.Topology)
    assert [type(each) for each in peer.received] == [p.Connected, p.Topology]


@pytest_twisted.ensureDeferred
async def test_a_store_nobody_serves_is_held_until_a_member_serves_it(node):
    node.head.cluster = cluster = Cluster()
    taken_here = await node.peer(connect_as=None)
    taken_here.send(cluster_connect("c"))
    taken_elsewhere = await node.peer(connect_as=None)
    taken_elsewhere.send(cluster_connect("d"))
    await eventually(lambda: len(cluster.waiters) == 2)
    assert taken_here.received == [] and taken_elsewhere.received == []
    cluster.change()  # a change that serves neither: both still held
    await eventually(lambda: len(cluster.waiters) == 2)
    assert taken_here.received == [] and taken_elsewhere.received == []
    cluster.served.add("c")
    cluster.elsewhere["d"] = ("tcp://127.0.0.1:4",)
    cluster.change()
    await taken_here.next(p.Topology)
    assert [type(each) for each in taken_here.received] == [p.Connected, p.Topology]
    await taken_elsewhere.lost
    assert taken_elsewhere.received == [p.Redirect("d", ("tcp://127.0.0.1:4",))]


@pytest_twisted.ensureDeferred
async def test_after_the_hold_the_client_is_told_to_try_again(node):
    node.head.cluster = cluster = Cluster(hold_timeout=0.05)
    peer = await node.peer(connect_as=None)
    peer.send(cluster_connect("c"))
    await peer.lost
    assert peer.received == [p.Redirect("c", ())]
    assert cluster.waiters == []  # the hold stopped waiting


@pytest_twisted.ensureDeferred
async def test_a_held_client_that_sends_is_a_protocol_error(node):
    node.head.cluster = cluster = Cluster()
    peer = await node.peer(connect_as=None)
    peer.send(cluster_connect("c"))
    await eventually(lambda: len(cluster.waiters) == 1)
    peer.send(p.QueryAddress(1, "orders"))
    reason = await peer.lost
    assert "before CONNECTED" in str(reason)
    assert cluster.waiters == []


@pytest_twisted.ensureDeferred
async def test_a_member_announces_itself_and_gets_the_topology(node):
    node.head.cluster = cluster = Cluster()
    member = await node.peer()
    announce = p.NodeAnnounce("b", "h2", ("tcp://127.0.0.1:2",), ("b",))
    member.send(announce)
    assert await member.next(p.Topology) == p.Topology((A,))
    assert list(cluster.links.values()) == [announce]
    await member.close()
    await eventually(lambda: not cluster.links)


@pytest_twisted.ensureDeferred
async def test_a_node_without_a_cluster_refuses_an_announce(node):
    member = await node.peer()
    member.send(p.NodeAnnounce("b", "h2", (), ()))
    await member.lost
    [failed] = member.of(p.Failed)
    assert (failed.request_id, failed.code) == (0, p.ErrorCode.INVALID)
