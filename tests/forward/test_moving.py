"""A drain's bridge (``Bridge(moving=True)``) between two real nodes: a durable message
delivered on the source before arrives as a redelivery, a non-durable one delivered
before is not moved (delivered once only), and a message with its producer's duplicate id
is not doubled by the producer's own resend to the target (tests/system/test_drain.py
drains whole node processes)."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor

from bridge.forward.bridge import Bridge
from bridge.forward.forwarded import Origin
from bridge.forward.manager import client_connector
from bridge.node.queue import Delivery
from tests.forward.conftest import Nodes, bridge_config, eventually, receive_all

ANYCAST = {"address": [{"name": "orders", "routing": "anycast"}]}


@pytest_twisted.ensureDeferred
async def test_a_drains_bridge_moves_redeliveries_flagged_and_non_durable_ones_once(
    nodes: Nodes,
) -> None:
    a = await nodes("a", **ANYCAST)
    b = await nodes("b", **ANYCAST)
    assert a.broker is not None and b.broker is not None
    for n in range(4):  # 0, 2 durable; 1, 3 not
        await a.broker.send("orders", b"x", {"n": n}, durable=n % 2 == 0)
    await a.broker.send("orders", b"x", {"n": 4}, durable=True, duplicate_id=b"p-4")
    # A consumer takes them all and goes without acknowledging them: back on the queue.
    deliveries: list[Delivery] = []
    a.broker.consume("orders", 99, deliveries.append)
    await eventually(lambda: len(deliveries) == 5)
    await a.broker.close_consumer("orders", 99)
    for n in (5, 6):  # never delivered: 5 not durable, 6 durable
        await a.broker.send("orders", b"x", {"n": n}, durable=n == 6)
    # The producer's resend of 4 reached b too (its confirmation from a was lost).
    await b.broker.send("orders", b"x", {"n": 4}, durable=True, duplicate_id=b"p-4")

    config = bridge_config("drain orders", "orders", b.url)
    bridge = Bridge(
        config,
        a.broker,
        Origin("id-a", "run"),
        reactor,
        client_connector(reactor, "a"),
        moving=True,
    )
    await bridge.start()
    await bridge.when_empty()
    assert a.depth("orders") == 0
    assert bridge.snapshot().messages_skipped == 2  # 1 and 3: non-durable, delivered
    assert b.depth("orders") == 5  # 4 once: the moved copy was a repeat of b's

    got = await receive_all(await nodes.client(b), "orders", 5)
    assert sorted((m.headers["n"], m.redelivered) for m in got) == [
        (0, True),
        (2, True),
        (4, False),
        (5, False),
        (6, False),
    ]
    await bridge.stop()
