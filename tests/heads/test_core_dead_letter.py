"""Dead letters over the core head (they are the node's, whatever the protocol): a core
consumer NACKing a message up to ``max-delivery-attempts`` sends it to the
``dead-letter-address``, where another core consumer reads where it came from."""

from __future__ import annotations

import pytest_twisted

from bridge.protocol import packets as p
from tests.heads.test_core_consume import fill

SETTINGS = {
    "address-setting": [
        {"match": "orders", "max-delivery-attempts": 2, "dead-letter-address": "DLQ"}
    ]
}


@pytest_twisted.ensureDeferred
async def test_a_core_consumer_s_nacks_send_a_message_to_the_dead_letter_address(node):
    node.extra = SETTINGS
    await node.restart()
    producer = await node.peer()
    await fill(producer, "orders", b"poison", kind="bad")
    consumer = await node.peer()
    consumer.send(p.CreateConsumer(1, 1, "orders", None, False, -1))
    first = await consumer.next(p.Deliver)
    consumer.send(p.Nack(1, first.delivery_id, True))
    second = await consumer.next(p.Deliver, 2)
    assert second.delivery_count == 2
    consumer.send(p.Nack(1, second.delivery_id, True))
    reader = await node.peer()
    reader.send(p.CreateConsumer(2, 2, "DLQ", None, False, -1))
    dead = await reader.next(p.Deliver)
    assert dead.message.body == b"poison" and dead.delivery_count == 1
    headers = dead.message.headers
    assert (headers["kind"], headers["_TXB_ORIG_ADDRESS"], headers["_TXB_ORIG_QUEUE"]) == (
        "bad",
        "orders",
        "orders",
    )
    assert len(consumer.of(p.Deliver)) == 2
    assert node.broker.queue("orders").depth == 0
