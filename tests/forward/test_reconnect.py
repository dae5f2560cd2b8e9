"""A bridge whose target is down, drops or moves: it reconnects with its back-off, fails
over through its URLs, and loses and duplicates nothing."""

from __future__ import annotations

import socket

import pytest_twisted

from bridge.forward.status import BridgeState
from tests.forward.conftest import Nodes, bridge_config, eventually, receive_all
from transport.urls import URL, parse_url

ANYCAST = {"address": [{"name": "orders", "routing": "anycast"}]}


def _free_url() -> tuple[int, URL]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    return port, parse_url(f"tcp://127.0.0.1:{port}")


@pytest_twisted.ensureDeferred
async def test_a_target_down_at_start_is_drained_once_it_comes_up(nodes: Nodes) -> None:
    a = await nodes("a", **ANYCAST)
    producer = await nodes.client(a)
    for index in range(20):
        await producer.send("orders", b"x", {"n": index})
    port, url = _free_url()
    bridges = a.start_bridges(bridge_config("a-to-b", "orders", url))
    await eventually(lambda: bridges.snapshots()[0].last_error is not None)
    snapshot = bridges.snapshots()[0]
    assert snapshot.state is BridgeState.STARTING
    assert snapshot.last_error is not None and "cannot connect" in snapshot.last_error
    assert a.depth("orders") == 20
    b = await nodes("b", port=port, **ANYCAST)
    got = await receive_all(await nodes.client(b), "orders", 20)
    assert [m.headers["n"] for m in got] == list(range(20))
    await eventually(lambda: a.depth("orders") == 0)
    assert bridges.snapshots()[0].state is BridgeState.STARTED
    assert bridges.snapshots()[0].last_error is None


@pytest_twisted.ensureDeferred
async def test_dropped_connections_lose_and_duplicate_nothing(nodes: Nodes) -> None:
    b = await nodes("b", **ANYCAST)
    a = await nodes("a", **ANYCAST)
    bridges = a.start_bridges(bridge_config("a-to-b", "orders", b.url))
    producer = await nodes.client(a)
    total = 3000
    for index in range(total):
        producer.send_nowait("orders", b"x" * 100, {"n": index})
    for drop in range(1, 4):
        await eventually(
            lambda drop=drop: (
                bridges.snapshots()[0].messages_forwarded >= drop * 500
                and bridges.snapshots()[0].state is BridgeState.STARTED
            ),
            30,
        )
        await b.drop_connections()
        await eventually(lambda drop=drop: bridges.snapshots()[0].reconnects == drop)
    await eventually(lambda: a.depth("orders") == 0 and producer.unconfirmed == 0, 30)
    got = await receive_all(await nodes.client(b), "orders", total, timeout=30)
    numbers = [m.headers["n"] for m in got]
    assert sorted(numbers) == list(range(total))
    assert len(set(numbers)) == total
    assert bridges.snapshots()[0].reconnects >= 3
    assert b.depth("orders") == 0


@pytest_twisted.ensureDeferred
async def test_fails_over_to_the_next_url_and_back(nodes: Nodes) -> None:
    _, dead = _free_url()
    b = await nodes("b", **ANYCAST)
    a = await nodes("a", **ANYCAST)
    bridges = a.start_bridges(bridge_config("a-to-b", "orders", dead, b.url))
    await eventually(lambda: bridges.snapshots()[0].state is BridgeState.STARTED)
    assert bridges.snapshots()[0].connected_to == str(b.url)
    producer = await nodes.client(a)
    await producer.send("orders", b"x")
    await eventually(lambda: b.depth("orders") == 1)


@pytest_twisted.ensureDeferred
async def test_exhausted_reconnect_attempts_fail_the_bridge_with_the_reason(nodes: Nodes) -> None:
    a = await nodes("a", **ANYCAST)
    _, dead = _free_url()
    bridges = a.start_bridges(bridge_config("a-to-b", "orders", dead, reconnect_attempts=2))
    await eventually(lambda: bridges.snapshots()[0].state is BridgeState.FAILED)
    error = bridges.snapshots()[0].last_error
    assert error is not None
    assert error.startswith("gave up after 2 reconnect attempts: cannot connect to")
