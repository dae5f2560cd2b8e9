"""STOMP across a core bridge, on real node processes: stomp.py sends persistent messages
with custom headers to node A, A's ``[[bridge]]`` forwards its queue to node B over the
core protocol, and stomp.py consumes them on B: every message once, in order, with its
headers and persistence as sent, and none of the bridge's own."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet.threads import deferToThread

from bridge.message import BRIDGE_HEADERS
from tests.system.bridges import bridge_table, wait_bridge, wait_queue_empty
from tests.system.flow import poll, queue_of
from tests.system.nodes import node_document
from tests.system.test_stomp_flow import connect, take

COUNT = 200
STOMP = {"name": "stomp", "url": "tcp://127.0.0.1:0", "protocols": ["stomp"]}
CORE = {"name": "core", "url": "tcp://127.0.0.1:0", "protocols": ["core"]}
ORDERS = [{"name": "orders", "routing": "anycast"}]
CUSTOM = {"x-trace": "naïve café ✓", "x-colon": "a:b", "content-type": "text/plain"}


def produce(port: int) -> None:
    conn, listener = connect(port)
    for n in range(COUNT):
        headers = {"persistent": "true", "seq": str(n), **CUSTOM}
        if n == COUNT - 1:
            headers["receipt"] = "last"
        conn.send("/queue/orders", f"order {n}".encode(), headers=headers)
    listener.wait(lambda: "last" in listener.receipts, "the last send's receipt")
    conn.disconnect(receipt="bye")


def consume(port: int) -> list[dict[str, str]]:
    return [{"body": m.body.decode(), **m.headers} for m in take(port, "orders", COUNT)]


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_a_stomp_producer_reaches_a_stomp_consumer_on_another_node_by_bridge(nodes):
    b = await nodes(
        node_document("b", acceptor=[CORE, STOMP], address=ORDERS), name="b"
    ).wait_started()
    bridge = bridge_table("to-b", "orders", b.core_url)
    a = await nodes(
        node_document("a", acceptor=[CORE, STOMP], address=ORDERS, bridge=[bridge]), name="a"
    ).wait_started()
    await wait_bridge(a, "to-b", lambda entry: entry["state"] == "STARTED", "started")
    await deferToThread(produce, a.ports["stomp"])
    await wait_queue_empty(a, "orders")
    received = await deferToThread(consume, b.ports["stomp"])
    assert [m["seq"] for m in received] == [str(n) for n in range(COUNT)]
    assert [m["body"] for m in received] == [f"order {n}" for n in range(COUNT)]
    for message in received:
        assert {key: message[key] for key in CUSTOM} == CUSTOM
        assert message["persistent"] == "true" and "redelivered" not in message
        assert message["destination"] == "/queue/orders"
        assert not BRIDGE_HEADERS & message.keys()  # the bridge's bookkeeping: the nodes'
    assert len({m["message-id"] for m in received}) == COUNT
    on_b = queue_of(await poll(b, lambda d: True, "status"), "orders")
    assert (on_b["messages_added"], on_b["depth"]) == (COUNT, 0)  # each once, none left
    forwarded = await wait_bridge(a, "to-b", lambda entry: True, "read")
    assert forwarded["messages_forwarded"] == COUNT
