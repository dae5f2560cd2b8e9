"""Core and STOMP clients share the node: what one sends the other reads, with the header
and body mapping of docs/stomp.md, and both see a redelivery as one."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor

from bridge.client.api import connect


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
