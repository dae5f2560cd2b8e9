"""Messages a consumer holds unacknowledged across a reconnection, on real node processes:
after (a) its connection is cut by a proxy and (b) its node is killed with -9 and the
backup takes the store over, the client claims them (REATTACH_CONSUMER) and acknowledges
them through the application's own copies: no StaleDelivery, none delivered to it twice,
the queue empty afterwards."""

from __future__ import annotations

import signal
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import gatherResults

from bridge.client.api import Client, ReceivedMessage, connect
from tests.forward.conftest import eventually
from tests.ha.proxy import Cuttable
from tests.postgresql import schema_url
from tests.system.bridges import free_port
from tests.system.flow import poll, queue_of
from tests.system.ha import PING, REAP, SLACK, ha_node
from tests.system.nodes import node_document
from transport.reconnect import ReconnectPolicy

HELD = 25
QUICK = ReconnectPolicy(retry_interval=0.1, retry_interval_multiplier=1.0, max_retry_interval=0.1)


async def hold(client: Client, node: Any) -> list[ReceivedMessage]:
    """``HELD`` durable messages sent and taken by a consumer of ``client``, none
    acknowledged: every message the consumer is handed, from now on too."""
    await gatherResults(
        [client.send("orders", b"%d" % n, {"n": n}, duplicate_id=b"n-%d" % n) for n in range(HELD)]
    )
    handed: list[ReceivedMessage] = []
    await client.consumer("orders", on_message=handed.append)
    await eventually(lambda: len(handed) == HELD, timeout=60)
    await poll(node, lambda s: queue_of(s, "orders")["in_flight"] == HELD, "all held")
    return handed


async def settle_all(held: list[ReceivedMessage], node: Any) -> None:
    """Acknowledge the held messages durably (each waits for its claim), then the queue
    is empty."""
    await gatherResults([message.ack_durably() for message in held]).addTimeout(120, reactor)
    await poll(node, lambda s: queue_of(s, "orders")["depth"] == 0, "the queue is empty", 60)


@pytest.mark.system
@pytest.mark.timeout(240)
@pytest_twisted.ensureDeferred
async def test_held_messages_are_acknowledged_after_a_proxy_drops_the_connection(nodes):
    node = await nodes(
        node_document(address=[{"name": "orders", "routing": "anycast"}])
    ).wait_started()
    proxy = Cuttable("127.0.0.1", node.ports["core"])
    port = reactor.listenTCP(0, proxy, interface="127.0.0.1")
    number = port.getHost().port
    client = await connect(reactor, f"tcp://127.0.0.1:{number}", reconnect=QUICK)
    try:
        handed = await hold(client, node)
        held = list(handed)
        # The proxy stops taking connections and drops the client's; it listens again once
        # the node has seen the drop (its consumer gone, the messages back on the queue).
        await port.stopListening()
        proxy.cut()
        await poll(
            node,
            lambda s: (
                queue_of(s, "orders")["consumers"] == 0 and queue_of(s, "orders")["in_flight"] == 0
            ),
            "the node saw the drop",
        )
        port = reactor.listenTCP(number, proxy, interface="127.0.0.1")
        await settle_all(held, node)
        assert handed == held  # nothing delivered to it a second time
    finally:
        await client.close()
        await port.stopListening()


@pytest.mark.system
@pytest.mark.timeout(300)
@pytest_twisted.ensureDeferred
async def test_held_messages_are_acknowledged_on_the_backup_after_a_kill_9(pg_schema, nodes):
    url = schema_url(pg_schema)
    ports = {"a": free_port(), "b": free_port()}
    processes = {}
    for name, role in (("a", "primary"), ("b", "backup")):
        document = ha_node(name, url, f"shared-store-{role}")
        document["acceptor"][0]["url"] = f"tcp://127.0.0.1:{ports[name]}"
        processes[name] = nodes(document, name=name)
        if name == "a":
            await processes["a"].wait_for(r"node a: LIVE, epoch 1", SLACK)
    a, b = processes["a"], processes["b"]
    await b.wait_for(r"node b: live is a, epoch 1", SLACK)
    await a.wait_started(SLACK)
    client = await connect(
        reactor, [f"tcp://127.0.0.1:{ports[name]}" for name in ("a", "b")], reconnect=QUICK
    )
    try:
        handed = await hold(client, a)
        held = list(handed)
        live = b.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK)
        await a.stop(signal.SIGKILL)
        await live
        await b.wait_started(SLACK)
        await settle_all(held, b)
        assert handed == held
        assert client.url == client.urls[1]
    finally:
        await client.close()
