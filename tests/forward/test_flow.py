"""Flow: a bridge stops taking when the target withholds credits or its connection is
full, resumes when they come back, and streams large messages from the source's file."""

from __future__ import annotations

import hashlib
import io
import os

import pytest_twisted
from twisted.internet import reactor

from bridge.forward.status import BridgeState
from tests.forward.conftest import Nodes, bridge_config, eventually, receive_all

ANYCAST = {"address": [{"name": "orders", "routing": "anycast"}]}


@pytest_twisted.ensureDeferred
async def test_a_blocked_target_stalls_the_bridge_on_credits_then_it_drains(nodes: Nodes) -> None:
    b = await nodes(
        "b",
        address=[
            {
                "name": "orders",
                "routing": "anycast",
                "max-size-bytes": "8KiB",
                "address-full-policy": "BLOCK",
            }
        ],
        **{"producer-window-size": 2048},
    )
    a = await nodes("a", **ANYCAST)
    producer = await nodes.client(a)
    total = 100
    for index in range(total):
        producer.send_nowait("orders", b"x" * 1000, {"n": index})
    bridges = a.start_bridges(
        bridge_config("a-to-b", "orders", b.url, confirmation_window_size=8192)
    )
    await eventually(lambda: bridges.snapshots()[0].paused_credits_seconds > 0.05)
    snapshot = bridges.snapshots()[0]
    assert snapshot.messages_forwarded < total
    assert b.broker is not None
    assert b.broker.addresses["orders"].memory.size <= 8192 + 2048 + 1200
    got = await receive_all(await nodes.client(b), "orders", total, timeout=30)
    assert [m.headers["n"] for m in got] == list(range(total))
    await eventually(lambda: a.depth("orders") == 0)


@pytest_twisted.ensureDeferred
async def test_large_messages_stream_from_the_source_file(nodes: Nodes) -> None:
    b = await nodes("b", **ANYCAST)
    a = await nodes("a", **ANYCAST)
    producer = await nodes.client(a)
    bodies = [os.urandom(300 * 1024 + index) for index in range(3)]
    for index, body in enumerate(bodies):
        await producer.send("orders", io.BytesIO(body), {"n": index})
    assert a.broker is not None
    large_dir = a.path / "data" / "large-messages"
    assert len(list(large_dir.iterdir())) == 3
    bridges = a.start_bridges(bridge_config("a-to-b", "orders", b.url))
    consumer = await (await nodes.client(b)).consumer("orders")
    for index, body in enumerate(bodies):
        message = await consumer.receive().addTimeout(30, reactor)
        assert message.is_large
        assert message.headers["n"] == index
        assert hashlib.sha256(message.body).digest() == hashlib.sha256(body).digest()
        message.ack()
    await eventually(lambda: a.depth("orders") == 0 and not list(large_dir.iterdir()))
    assert bridges.snapshots()[0].bytes_forwarded >= sum(map(len, bodies))


@pytest_twisted.ensureDeferred
async def test_a_window_above_a_blocking_targets_limit_fails_with_file_and_key(
    nodes: Nodes,
) -> None:
    b = await nodes(
        "b",
        address=[
            {
                "name": "orders",
                "routing": "anycast",
                "max-size-bytes": "64KiB",
                "address-full-policy": "BLOCK",
            }
        ],
    )
    a = await nodes("a", **ANYCAST)
    producer = await nodes.client(a)
    await producer.send("orders", b"x")
    bridges = a.start_bridges(
        bridge_config("a-to-b", "orders", b.url),
        bridge_config("small-window", "orders", b.url, confirmation_window_size=65536),
    )
    await eventually(lambda: bridges.snapshots()[0].state is BridgeState.FAILED)
    failed, fine = bridges.snapshots()
    assert failed.last_error == (
        "bridges.toml: bridge[0].confirmation-window-size: 1MiB is more than the target's "
        "address 'orders' may hold under its BLOCK policy (max-size-bytes 64KiB); a window "
        "above it could wait on confirmations the target cannot give while it withholds "
        "credits: set confirmation-window-size to at most that"
    )
    await eventually(lambda: b.depth("orders") == 1)
    assert fine.name == "small-window"
