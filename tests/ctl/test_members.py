"""The members' links (bridge/ctl/members.py), in one process over loopback TCP: serving
members link with every static member, learn each other (announce one way, TOPOLOGY the
other), drop the link to themselves, push the view to their clients, and forget a member
whose links are gone; a draining member tells its clients it serves nothing."""

from __future__ import annotations

from pathlib import Path

import pytest_twisted
from twisted.internet import reactor

from bridge.config.cluster import ClusterSettings
from bridge.ctl.members import ClusterMembers
from bridge.ha.failover import RingPolicy
from bridge.protocol import packets as p
from tests.heads.conftest import Node, eventually
from transport.urls import parse_url


def view(members: ClusterMembers) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    return [(m.node_id, m.serves, m.failover) for m in members.topology().members]


@pytest_twisted.ensureDeferred
async def test_members_learn_each_other_and_forget_one_that_stops(tmp_path: Path):
    nodes = {}
    for name in "ab":
        nodes[name] = await Node(tmp_path / name, name=name).start()
    urls = {name: f"tcp://127.0.0.1:{node.port.getHost().port}" for name, node in nodes.items()}
    members: dict[str, ClusterMembers] = {}
    for name, host in (("a", "h1"), ("b", "h2")):
        settings = ClusterSettings(
            "t",
            "cluster",
            tuple(parse_url(url) for url in urls.values()),
            RingPolicy(),
            host_id=host,
            retry_interval=0.05,
        )
        head = nodes[name].head
        members[name] = head.cluster = ClusterMembers(
            name, settings, f"store-{name}", (urls[name],), head=head, reactor=reactor
        )
    follower = await nodes["a"].peer(connect_as=None)
    follower.send(p.ClusterConnect(p.PROTOCOL_VERSION, "f", None, None, 1 << 20, 1 << 20, ""))
    await follower.next(p.Topology)
    try:
        for each in members.values():
            each.start()
        both = [("a", ("store-a",), ("b",)), ("b", ("store-b",), ("a",))]
        await eventually(lambda: view(members["a"]) == both and view(members["b"]) == both)
        assert members["a"].route("store-a") is None
        assert members["a"].route("store-b") == (urls["b"],)
        assert members["a"].route("store-x") == ()
        # the client heard of the change
        await follower.until(
            lambda: [m.node_id for m in follower.of(p.Topology)[-1].members] == ["a", "b"]
        )
        await members["b"].stop()
        await nodes.pop("b").stop()
        await eventually(lambda: view(members["a"]) == [("a", ("store-a",), ())])
    finally:
        for each in members.values():
            await each.stop()
        for node in nodes.values():
            await node.stop()


@pytest_twisted.ensureDeferred
async def test_a_member_that_drains_tells_its_clients_it_serves_nothing(tmp_path: Path):
    node = await Node(tmp_path / "a", name="a").start()
    url = f"tcp://127.0.0.1:{node.port.getHost().port}"
    settings = ClusterSettings("t", "cluster", (parse_url(url),), RingPolicy(), host_id="h1")
    members = node.head.cluster = ClusterMembers(
        "a", settings, "store-a", (url,), head=node.head, reactor=reactor
    )
    follower = await node.peer(connect_as=None)
    follower.send(p.ClusterConnect(p.PROTOCOL_VERSION, "f", None, None, 1 << 20, 1 << 20, ""))
    await follower.next(p.Topology)
    changed = members.when_changed()
    try:
        members.serve_nothing()
        assert changed.called
        assert view(members) == [("a", (), ())]
        await follower.until(lambda: follower.of(p.Topology)[-1].members[0].serves == ())
        assert members.route("store-a") == ()  # nobody serves it now
    finally:
        await members.stop()
        await node.stop()
