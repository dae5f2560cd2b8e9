"""A target that refuses (a full address under FAIL, a wrong password, a missing
permission): the bridge shows why, retries with its back-off, and loses nothing."""

from __future__ import annotations

from pathlib import Path

import pytest_twisted
from twisted.internet import reactor

from bridge.forward.status import BridgeState
from tests.forward.conftest import Nodes, bridge_config, eventually
from tests.security.helpers import write_users

ANYCAST = {"address": [{"name": "orders", "routing": "anycast"}]}


@pytest_twisted.ensureDeferred
async def test_a_full_target_under_fail_is_retried_until_it_has_room(nodes: Nodes) -> None:
    b = await nodes(
        "b",
        address=[
            {
                "name": "orders",
                "routing": "anycast",
                "max-size-bytes": "16KiB",
                "address-full-policy": "FAIL",
            }
        ],
    )
    a = await nodes("a", **ANYCAST)
    producer = await nodes.client(a)
    total = 200
    for index in range(total):
        producer.send_nowait("orders", b"x" * 1000, {"n": index})
    bridges = a.start_bridges(bridge_config("a-to-b", "orders", b.url))
    await eventually(lambda: bridges.snapshots()[0].last_error is not None)
    error = bridges.snapshots()[0].last_error
    assert error is not None and "refused a message" in error and "FAIL" in error
    assert bridges.snapshots()[0].state is BridgeState.STARTED
    consumer = await (await nodes.client(b)).consumer("orders")
    numbers = []
    redelivered = set()
    while len(numbers) < total:
        message = await consumer.receive().addTimeout(30, reactor)
        message.ack()
        numbers.append(message.headers["n"])
        if message.redelivered:
            redelivered.add(message.headers["n"])
    assert sorted(numbers) == list(range(total))
    # A send refused (or cut off by a refusal before it) is sent again, marked as sent
    # before: the target delivers it as a redelivery. The first was confirmed at once.
    assert redelivered, "no resend was delivered as a redelivery"
    assert 0 not in redelivered
    await eventually(lambda: a.depth("orders") == 0)
    assert b.broker is not None and b.broker.queue("orders").waiting == 0, "a duplicate at B"
    await eventually(lambda: b.depth("orders") == 0)  # the consumer's last acks arrive


@pytest_twisted.ensureDeferred
async def test_a_refused_login_is_shown_and_retried(nodes: Nodes, tmp_path: Path) -> None:
    users = write_users(tmp_path / "users.toml", {"bridge": ("right", ["bridges"])})
    security = {
        "enabled": True,
        "users-file": str(users),
        "setting": [{"match": "#", "send": ["bridges"], "consume": ["bridges"]}],
    }
    b = await nodes("b", security=security, **ANYCAST)
    a = await nodes("a", **ANYCAST)
    producer = await nodes.client(a)
    await producer.send("orders", b"x")
    bridges = a.start_bridges(
        bridge_config("a-to-b", "orders", b.url, user="bridge", password="wrong")
    )
    await eventually(lambda: bridges.snapshots()[0].last_error is not None)
    snapshot = bridges.snapshots()[0]
    assert snapshot.state is BridgeState.STARTING
    assert "authentication failed" in (snapshot.last_error or "")
    assert a.depth("orders") == 1
    await bridges.stop("a-to-b")
    assert a.depth("orders") == 1


@pytest_twisted.ensureDeferred
async def test_a_missing_send_permission_is_shown_and_nothing_lost(
    nodes: Nodes, tmp_path: Path
) -> None:
    users = write_users(tmp_path / "users.toml", {"bridge": ("right", ["bridges"])})
    security = {
        "enabled": True,
        "users-file": str(users),
        "setting": [{"match": "#", "consume": ["bridges"]}],
    }
    b = await nodes("b", security=security, **ANYCAST)
    a = await nodes("a", **ANYCAST)
    producer = await nodes.client(a)
    for _ in range(3):
        await producer.send("orders", b"x")
    bridges = a.start_bridges(
        bridge_config("a-to-b", "orders", b.url, user="bridge", password="right")
    )
    await eventually(lambda: "send" in (bridges.snapshots()[0].last_error or ""))
    assert a.depth("orders") == 3
    assert b.depth("orders") == 0
