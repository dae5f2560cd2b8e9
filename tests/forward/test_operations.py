"""Pause, resume, stop and start: the state machine as an operator drives it."""

from __future__ import annotations

import pytest
import pytest_twisted

from bridge.forward.bridge import BridgeStateError
from bridge.forward.interfaces import UnknownBridge
from bridge.forward.status import BridgeState
from tests.forward.conftest import Nodes, bridge_config, eventually, receive_all

ANYCAST = {"address": [{"name": "orders", "routing": "anycast"}]}


@pytest_twisted.ensureDeferred
async def test_pause_keeps_messages_at_the_source_and_resume_forwards_them(nodes: Nodes) -> None:
    b = await nodes("b", **ANYCAST)
    a = await nodes("a", **ANYCAST)
    bridges = a.start_bridges(bridge_config("a-to-b", "orders", b.url))
    await eventually(lambda: bridges.snapshots()[0].state is BridgeState.STARTED)
    await bridges.pause("a-to-b")
    assert bridges.snapshots()[0].state is BridgeState.PAUSED
    assert bridges.snapshots()[0].connected_to == str(b.url)
    producer = await nodes.client(a)
    for index in range(10):
        await producer.send("orders", b"x", {"n": index})
    assert a.depth("orders") == 10 and b.depth("orders") == 0
    await bridges.resume("a-to-b")
    got = await receive_all(await nodes.client(b), "orders", 10)
    assert [m.headers["n"] for m in got] == list(range(10))
    assert bridges.snapshots()[0].state is BridgeState.STARTED


@pytest_twisted.ensureDeferred
async def test_pause_while_forwarding_loses_and_repeats_nothing(nodes: Nodes) -> None:
    b = await nodes("b", **ANYCAST)
    a = await nodes("a", **ANYCAST)
    bridges = a.start_bridges(bridge_config("a-to-b", "orders", b.url))
    producer = await nodes.client(a)
    for index in range(2000):
        producer.send_nowait("orders", b"x" * 200, {"n": index})
    await eventually(lambda: bridges.snapshots()[0].messages_forwarded > 0)
    await bridges.pause("a-to-b")
    snapshot = bridges.snapshots()[0]
    assert snapshot.pending_confirmations == 0
    assert a.depth("orders") + b.depth("orders") >= 2000 - producer.unconfirmed
    await bridges.resume("a-to-b")
    got = await receive_all(await nodes.client(b), "orders", 2000, timeout=30)
    assert [m.headers["n"] for m in got] == list(range(2000))


@pytest_twisted.ensureDeferred
async def test_stop_and_start_again(nodes: Nodes) -> None:
    b = await nodes("b", **ANYCAST)
    a = await nodes("a", **ANYCAST)
    bridges = a.start_bridges(bridge_config("a-to-b", "orders", b.url))
    await eventually(lambda: bridges.snapshots()[0].state is BridgeState.STARTED)
    await bridges.stop("a-to-b")
    snapshot = bridges.snapshots()[0]
    assert snapshot.state is BridgeState.STOPPED
    assert snapshot.connected_to is None
    producer = await nodes.client(a)
    await producer.send("orders", b"while stopped")
    assert b.depth("orders") == 0
    with pytest.raises(BridgeStateError, match="STOPPED: cannot pause"):
        await bridges.pause("a-to-b")
    await bridges.start("a-to-b")
    got = await receive_all(await nodes.client(b), "orders", 1)
    assert got[0].body == b"while stopped"


@pytest_twisted.ensureDeferred
async def test_unknown_bridges_are_named(nodes: Nodes) -> None:
    a = await nodes("a", **ANYCAST)
    bridges = a.start_bridges()
    for operation in (bridges.pause, bridges.resume, bridges.stop, bridges.start):
        with pytest.raises(UnknownBridge, match="nope"):
            await operation("nope")
