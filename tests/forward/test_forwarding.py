"""A bridge moves a queue's messages to another node: in order, each once, the source
acknowledged only after the target confirmed."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import pytest_twisted

from bridge.forward.status import BridgeState
from bridge.message import BRIDGE_DUPLICATE_ID, BRIDGE_PATH, Message
from tests.forward.conftest import Nodes, bridge_config, eventually, receive_all

ANYCAST = {"address": [{"name": "orders", "routing": "anycast"}]}


@pytest.mark.parametrize("durable", [True, False])
@pytest_twisted.ensureDeferred
async def test_messages_reach_the_target_in_order_and_leave_the_source(
    nodes: Nodes, durable: bool
) -> None:
    b = await nodes("b", **ANYCAST)
    a = await nodes("a", **ANYCAST)
    producer = await nodes.client(a)
    for index in range(200):
        await producer.send("orders", b"m%d" % index, {"n": index}, durable=durable)
    bridges = a.start_bridges(bridge_config("a-to-b", "orders", b.url))
    await eventually(lambda: a.depth("orders") == 0 and b.depth("orders") == 200)
    got = await receive_all(await nodes.client(b), "orders", 200)
    assert [m.headers["n"] for m in got] == list(range(200))
    assert [m.body for m in got] == [b"m%d" % i for i in range(200)]
    assert all(m.durable is durable for m in got)
    assert all(m.headers[BRIDGE_PATH] == "id-a" for m in got)
    assert len({m.headers[BRIDGE_DUPLICATE_ID] for m in got}) == 200
    (snapshot,) = bridges.snapshots()
    assert snapshot.state is BridgeState.STARTED
    assert snapshot.messages_forwarded == 200
    assert snapshot.pending_confirmations == 0
    assert snapshot.connected_to == str(b.url)
    assert snapshot.last_error is None


@pytest_twisted.ensureDeferred
async def test_messages_sent_while_running_are_forwarded(nodes: Nodes) -> None:
    b = await nodes("b", **ANYCAST)
    a = await nodes("a", **ANYCAST)
    a.start_bridges(bridge_config("a-to-b", "orders", b.url))
    await eventually(lambda: a.bridges is not None and _state(a) is BridgeState.STARTED)
    producer = await nodes.client(a)
    for index in range(50):
        producer.send_nowait("orders", b"x", {"n": index})
    got = await receive_all(await nodes.client(b), "orders", 50)
    assert [m.headers["n"] for m in got] == list(range(50))
    await eventually(lambda: a.depth("orders") == 0)


@pytest_twisted.ensureDeferred
async def test_forwarding_address_and_filter(nodes: Nodes) -> None:
    b = await nodes("b", address=[{"name": "archive", "routing": "anycast"}])
    a = await nodes("a", **ANYCAST)
    producer = await nodes.client(a)
    for index, region in enumerate(["eu", "us", "eu", "asia", "eu"]):
        await producer.send("orders", b"x", {"region": region, "n": index})
    a.start_bridges(
        bridge_config("eu", "orders", b.url, forwarding_address="archive", filter="region = 'eu'")
    )
    got = await receive_all(await nodes.client(b), "archive", 3)
    assert [m.headers["n"] for m in got] == [0, 2, 4]
    assert all(m.address == "archive" for m in got)
    await eventually(lambda: a.depth("orders") == 2)


def _upper(message: Message) -> Message | None:
    if message.headers.get("skip"):
        return None
    return attrs.evolve(message, body=message.body.upper())


@pytest_twisted.ensureDeferred
async def test_a_transformer_changes_or_drops_messages(nodes: Nodes) -> None:
    b = await nodes("b", **ANYCAST)
    a = await nodes("a", **ANYCAST)
    producer = await nodes.client(a)
    await producer.send("orders", b"keep", {"n": 1})
    await producer.send("orders", b"drop", {"n": 2, "skip": True})
    await producer.send("orders", b"also", {"n": 3})
    bridges = a.start_bridges(bridge_config("t", "orders", b.url, transformer=_upper))
    got = await receive_all(await nodes.client(b), "orders", 2)
    assert [m.body for m in got] == [b"KEEP", b"ALSO"]
    await eventually(lambda: a.depth("orders") == 0)
    assert bridges.snapshots()[0].messages_skipped == 1


@pytest_twisted.ensureDeferred
async def test_a_missing_queue_fails_the_bridge_naming_file_and_key(nodes: Nodes) -> None:
    b = await nodes("b", **ANYCAST)
    a = await nodes("a", **ANYCAST)
    bridges = a.start_bridges(
        bridge_config("nowhere", "no-such-queue", b.url),
        bridge_config("fine", "orders", b.url),
    )
    await eventually(lambda: {s.name: s.state for s in bridges.snapshots()}["fine"] == "STARTED")
    failed = {s.name: s for s in bridges.snapshots()}["nowhere"]
    assert failed.state is BridgeState.FAILED
    assert (
        failed.last_error == "bridges.toml: bridge[0].queue: no queue 'no-such-queue' on this node"
    )


def _state(node: Any) -> BridgeState:
    return node.bridges.snapshots()[0].state
