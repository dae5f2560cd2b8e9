"""Chains and cycles: a chained message goes on, a cycled one stops after one round."""

from __future__ import annotations

import pytest_twisted

from bridge.message import BRIDGE_PATH
from bridge.protocol import Routing
from tests.forward.conftest import Nodes, bridge_config, eventually, receive_all

ANYCAST = {"address": [{"name": "orders", "routing": "anycast"}]}
NEWS = {"address": [{"name": "news", "routing": "multicast"}]}


@pytest_twisted.ensureDeferred
async def test_a_chain_forwards_through_every_node(nodes: Nodes) -> None:
    c = await nodes("c", **ANYCAST)
    b = await nodes("b", **ANYCAST)
    a = await nodes("a", **ANYCAST)
    b.start_bridges(bridge_config("b-to-c", "orders", c.url))
    a.start_bridges(bridge_config("a-to-b", "orders", b.url))
    producer = await nodes.client(a)
    for index in range(30):
        await producer.send("orders", b"x", {"n": index})
    got = await receive_all(await nodes.client(c), "orders", 30)
    assert [m.headers["n"] for m in got] == list(range(30))
    assert {m.headers[BRIDGE_PATH] for m in got} == {"id-a,id-b"}
    await eventually(lambda: a.depth("orders") == 0 and b.depth("orders") == 0)


@pytest_twisted.ensureDeferred
async def test_a_cycle_on_a_multicast_address_delivers_each_message_once_per_node(
    nodes: Nodes,
) -> None:
    a = await nodes("a", **NEWS)
    b = await nodes("b", **NEWS)
    clients = {}
    for node, peer in ((a, "b"), (b, "a")):
        client = clients[node.name] = await nodes.client(node)
        await client.create_queue(f"to-{peer}", "news", routing=Routing.MULTICAST)
        await client.create_queue("readers", "news", routing=Routing.MULTICAST)
    a.start_bridges(bridge_config("a-to-b", "to-b", b.url))
    b.start_bridges(bridge_config("b-to-a", "to-a", a.url))
    for index in range(10):
        await clients["a"].send("news", b"from a", {"n": index})
        await clients["b"].send("news", b"from b", {"n": index})
    for node in (a, b):
        got = await receive_all(await nodes.client(node), "readers", 20)
        assert sorted((m.body, m.headers["n"]) for m in got) == sorted(
            [(b"from a", n) for n in range(10)] + [(b"from b", n) for n in range(10)]
        )
    await eventually(
        lambda: all(
            node.depth(queue) == 0
            for node in (a, b)
            for queue in ("to-a", "to-b")
            if node.broker is not None and queue in node.broker.queues
        )
    )
    assert a.bridges is not None and b.bridges is not None
    skipped = [node.snapshots()[0].messages_skipped for node in (a.bridges, b.bridges)]
    assert sum(skipped) == 20
    for node in (a, b):
        assert node.depth("readers") == 0
