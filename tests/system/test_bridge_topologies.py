"""Chains and cycles of bridges between real node processes (issue 6): a chain A -> B -> C
delivers every message at C once and in order, and a cycle A -> B -> A on a multicast
address delivers each message once to each node's subscribers and then stops, the
bridges' counters and queues going quiet (tests/forward/test_topologies.py checks the same
in one process)."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor

from bridge.client.api import connect
from bridge.protocol import Routing
from tests.system.bridges import (
    Collector,
    Producers,
    bridge_table,
    check_delivered,
    ctl,
    pause,
    wait_bridge,
    wait_queue_empty,
    write_bridges,
)
from tests.system.flow import status
from tests.system.nodes import NodeProcess, node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(150)]

CHAINED = 2000
"""Messages sent into the chain: two producers of 1,000."""
CYCLED = 500
"""Messages each node's producer sends into the cycle."""
QUIET = 1.0
"""Seconds a cycle must stay unchanged once delivered: a looping message would show."""


async def node_id(node: NodeProcess) -> str:
    document = await status(node)
    identity: str = document["node"]["id"]
    return identity


@pytest_twisted.ensureDeferred
async def test_a_chain_delivers_every_message_at_its_end_once_and_in_order(nodes):
    orders = [{"name": "orders"}]
    c = await nodes(node_document("c", address=orders), name="c").wait_started()
    b_document = node_document(
        "b", address=orders, bridge=[bridge_table("b-to-c", "orders", c.core_url)]
    )
    b = await nodes(b_document, name="b").wait_started()
    a_document = node_document(
        "a", address=orders, bridge=[bridge_table("a-to-b", "orders", b.core_url)]
    )
    a = await nodes(a_document, name="a").wait_started()
    for node, name in ((a, "a-to-b"), (b, "b-to-c")):
        await wait_bridge(node, name, lambda e: e["state"] == "STARTED", "starts")

    collector = Collector(lambda: c.core_url, "orders").start()
    producers = Producers(lambda: a.core_url, "orders", producers=2, count=CHAINED // 2)
    await producers.start().done(timeout=60)
    assert producers.total_confirmed == CHAINED
    await collector.until(lambda: collector.distinct() >= CHAINED, "reached C", 60)
    for node in (a, b, c):
        await wait_queue_empty(node, "orders")
    await collector.stop()

    check_delivered(producers, collector)
    assert collector.received == CHAINED
    for name in producers.names:
        assert collector.order[name] == list(range(CHAINED // 2)), f"{name} out of order"
    path = f"{await node_id(a)},{await node_id(b)}"
    assert dict(collector.paths) == {path: CHAINED}
    for node, name in ((a, "a-to-b"), (b, "b-to-c")):
        entry = await wait_bridge(node, name, lambda e: True, "status")
        assert entry["messages_forwarded"] == CHAINED, entry
        assert entry["messages_skipped"] == 0 and entry["pending_confirmations"] == 0, entry


async def counters(a: NodeProcess, b: NodeProcess) -> dict[str, Any]:
    """What a running cycle would change: each bridge's counts, each queue's depth."""
    seen: dict[str, Any] = {}
    for node, bridge in ((a, "a-to-b"), (b, "b-to-a")):
        document = await status(node)
        for entry in document["bridges"]:
            if entry["name"] == bridge:
                seen[bridge] = (
                    entry["messages_forwarded"],
                    entry["messages_skipped"],
                    entry["pending_confirmations"],
                )
        for queue in document["queues"]:
            seen[f"{document['node']['name']}/{queue['name']}"] = (
                queue["depth"],
                queue["in_flight"],
            )
    return seen


@pytest_twisted.ensureDeferred
async def test_a_cycle_on_a_multicast_address_delivers_once_per_node_and_goes_quiet(nodes):
    started = {}
    for name in ("a", "b"):
        document = node_document(name, address=[{"name": "news", "routing": "multicast"}])
        document["node"]["bridges-dir"] = "bridges.d"
        (nodes.tmp_path / name / "bridges.d").mkdir(parents=True)
        started[name] = await nodes(document, name=name).wait_started()
    a, b = started["a"], started["b"]
    for node, peer in ((a, "b"), (b, "a")):
        client = await connect(reactor, node.core_url)
        await client.create_queue(f"to-{peer}", "news", routing=Routing.MULTICAST)
        await client.create_queue("readers", "news", routing=Routing.MULTICAST)
        await client.close()
    # Each node learns the other's port from its start-up line, so the bridges come by
    # reload once both run.
    for node, peer, name in ((a, b, "a-to-b"), (b, a, "b-to-a")):
        write_bridges(
            node.directory / "bridges.d",
            "cycle.toml",
            bridge_table(name, f"to-{peer.directory.name}", peer.core_url),
        )
        done = await ctl(node, "reload")
        assert done.returncode == 0, done.stderr
        await wait_bridge(node, name, lambda e: e["state"] == "STARTED", "starts on reload")

    readers = {
        node.directory.name: Collector(lambda node=node: node.core_url, "readers").start()
        for node in (a, b)
    }
    producers = {
        node.directory.name: Producers(
            lambda node=node: node.core_url,
            "news",
            producers=1,
            count=CYCLED,
            prefix=f"from-{node.directory.name}-",
        ).start()
        for node in (a, b)
    }
    for each in producers.values():
        await each.done(timeout=60)
        assert each.total_confirmed == CYCLED
    for reader in readers.values():
        await reader.until(lambda reader=reader: reader.distinct() >= 2 * CYCLED, "read", 60)
    for node, queue in ((a, "to-b"), (b, "to-a"), (a, "readers"), (b, "readers")):
        await wait_queue_empty(node, queue)

    before = await counters(a, b)
    received = {name: reader.received for name, reader in readers.items()}
    await pause(QUIET)
    assert await counters(a, b) == before, "the cycle did not go quiet"
    assert {name: reader.received for name, reader in readers.items()} == received
    for reader in readers.values():
        await reader.stop()

    ids = {name: await node_id(node) for name, node in (("a", a), ("b", b))}
    for here, there in (("a", "b"), ("b", "a")):
        reader = readers[here]
        for each in producers.values():
            check_delivered(each, reader)
        assert reader.received == 2 * CYCLED, f"{here}: each message once"
        assert reader.order[f"from-{here}-0"] == list(range(CYCLED))
        assert reader.order[f"from-{there}-0"] == list(range(CYCLED))
        assert dict(reader.paths) == {"": CYCLED, ids[there]: CYCLED}, here
    assert before["a-to-b"] == (CYCLED, CYCLED, 0), before
    assert before["b-to-a"] == (CYCLED, CYCLED, 0), before
