"""Core and STOMP clients share the node: what one sends the other reads, with the header
and body mapping of docs/stomp.md, and both see a redelivery as one."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor

from bridge.client.api import connect
from bridge.message import BRIDGE_DUPLICATE_ID, BRIDGE_PATH, DELIVERY_COUNT

FRAME_OWN = {
    "subscription",
    "message-id",
    "destination",
    "ack",
    "content-length",
    "redelivered",
    "delivery-count",
    "persistent",
}


@pytest_twisted.ensureDeferred
async def test_a_core_producer_reaches_a_stomp_consumer(stomp_node):
    stomp = await stomp_node.client()
    await stomp.call("subscribe", "/queue/orders", id="s", ack="client-individual")
    core = await connect(reactor, stomp_node.core_url)
    headers = {"text": "été", "count": 3, "ratio": 0.5, "flag": True, "raw": b"\xffok"}
    await core.send("orders", b"\x00binary\x00", headers, durable=True)
    [message] = await stomp.messages(1)
    assert message.body == b"\x00binary\x00"
    assert message.headers["destination"] == "/queue/orders"
    assert message.headers["persistent"] == "true"
    assert message.headers["text"] == "été"
    assert (message.headers["count"], message.headers["ratio"]) == ("3", "0.5")
    assert (message.headers["flag"], message.headers["raw"]) == ("true", "\ufffdok")
    await core.close()


@pytest_twisted.ensureDeferred
async def test_a_stomp_producer_reaches_a_core_consumer_and_both_see_redelivery(stomp_node):
    stomp = await stomp_node.client()
    await stomp.confirmed_send(
        "/queue/orders",
        b"from stomp",
        persistent="true",
        **{"content-type": "text/plain", "x-region": "eu", "_TXB_DUP_ID": "order-1"},
    )
    await stomp.confirmed_send("/queue/orders", b"repeat", _TXB_DUP_ID="order-1")
    core = await connect(reactor, stomp_node.core_url)
    consumer = await core.consumer("orders")
    message = await consumer.receive()
    assert message.body == b"from stomp"
    assert message.durable and not message.redelivered
    assert message.duplicate_id == b"order-1"
    assert dict(message.headers) == {
        "content-type": "text/plain",
        "x-region": "eu",
        "_TXB_DUP_ID": "order-1",
    }
    await consumer.close()
    again = await core.consumer("orders")
    redelivered = await again.receive()
    assert redelivered.redelivered and redelivered.delivery_count == 2
    await redelivered.ack_durably()
    assert stomp_node.broker.queue("orders").depth == 0  # the repeat was dropped
    await core.close()


@pytest_twisted.ensureDeferred
async def test_a_bridged_message_reaches_a_stomp_consumer_without_the_bridges_bookkeeping(
    stomp_node,
):
    """A core bridge's duplicate id and path, and a drain's count of deliveries on the
    node a message left, are the nodes' own: a MESSAGE leaves them out (the count shows in
    ``delivery-count``), and keeps every header of the producer's, its duplicate id too."""
    stomp = await stomp_node.client()
    await stomp.call("subscribe", "/queue/orders", id="s", ack="client-individual")
    core = await connect(reactor, stomp_node.core_url)
    headers = {
        BRIDGE_DUPLICATE_ID: b"node-a:7",
        BRIDGE_PATH: "node-a",
        DELIVERY_COUNT: 2,
        "x-region": "eu",
        "_TXB_DUP_ID": "order-7",
    }
    await core.send("orders", b"bridged", headers, durable=True)
    [message] = await stomp.messages(1)
    own = {key: value for key, value in message.headers.items() if key not in FRAME_OWN}
    assert own == {"x-region": "eu", "_TXB_DUP_ID": "order-7"}
    assert (message.headers["delivery-count"], message.headers["redelivered"]) == ("3", "true")
    await core.close()
