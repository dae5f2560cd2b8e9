"""Durable topic subscriptions: RabbitMQ's ``durable:true`` (or ``persistent:true``) with an
``id``, and ActiveMQ's ``activemq.subscriptionName`` with a ``client-id``, keep messages while
the client is away and across a node restart; UNSUBSCRIBE with the same header removes
them. A plain topic subscription lives as long as its SUBSCRIBE."""

from __future__ import annotations

import pytest
import pytest_twisted


@pytest.mark.parametrize(
    ("connect", "subscribe", "queue"),
    [
        ({}, {"durable": "true"}, "audit"),
        ({}, {"persistent": "true"}, "audit"),
        ({"client-id": "app"}, {"activemq.subscriptionName": "trail"}, "app.trail"),
        ({"client-id": "app"}, {"durable": "true"}, "app.audit"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_a_durable_subscription_keeps_messages_while_away_and_across_a_restart(
    stomp_node, connect, subscribe, queue
):
    client = await stomp_node.client(headers=connect)
    await client.call(
        "subscribe",
        "/topic/news",
        id="audit",
        ack="client-individual",
        headers={**subscribe, "receipt": "subscribed"},
    )
    await client.receipt("subscribed")
    producer = await stomp_node.client()
    await producer.confirmed_send("/topic/news", b"first", persistent="true")
    [first] = await client.messages(1)
    await client.ack(first, receipt="acked")
    await client.receipt("acked")
    await client.disconnect()
    await producer.confirmed_send("/topic/news", b"while away", persistent="true")
    await producer.confirmed_send("/topic/news", b"gone at restart")  # not persistent
    assert stomp_node.broker.is_durable(queue)
    node = await stomp_node.restart()
    back = await node.client(headers=connect)
    await back.call(
        "subscribe", "/topic/news", id="audit", ack="client-individual", headers=subscribe
    )
    [kept] = await back.messages(1)
    assert kept.body == b"while away"
    assert "redelivered" not in kept.headers
    await back.ack(kept)
    await back.call("unsubscribe", "audit", headers={**subscribe, "receipt": "removed"})
    await back.receipt("removed")
    assert queue not in node.broker.queues


@pytest_twisted.ensureDeferred
async def test_a_plain_topic_subscription_ends_with_its_unsubscribe_or_connection(stomp_node):
    client = await stomp_node.client()
    await client.call("subscribe", "/topic/news", id="1", headers={"receipt": "s1"})
    await client.call("subscribe", "/topic/news", id="2", headers={"receipt": "s2"})
    await client.receipt("s2")
    bound = [b.queue.name for b in stomp_node.broker.addresses["news"].bindings]
    assert len(bound) == 2 and not any(stomp_node.broker.is_durable(name) for name in bound)
    await client.call("unsubscribe", "1", headers={"receipt": "u1"})
    await client.receipt("u1")
    assert len(stomp_node.broker.addresses["news"].bindings) == 1
    await client.disconnect()
    await client.listener.until(lambda: not stomp_node.broker.addresses["news"].bindings)


@pytest_twisted.ensureDeferred
async def test_a_durable_subscription_can_be_removed_from_another_connection(stomp_node):
    client = await stomp_node.client(headers={"client-id": "c"})
    await client.call(
        "subscribe", "/topic/news", id="keep", headers={"durable": "true", "receipt": "s"}
    )
    await client.receipt("s")
    await client.disconnect()
    assert "c.keep" in stomp_node.broker.queues
    later = await stomp_node.client(headers={"client-id": "c"})
    await later.call("unsubscribe", "keep", headers={"durable": "true", "receipt": "r"})
    await later.receipt("r")
    assert "c.keep" not in stomp_node.broker.queues


@pytest_twisted.ensureDeferred
async def test_a_subscription_name_taken_by_another_queue_is_refused(stomp_node):
    raw = await stomp_node.raw()
    await raw.connect()
    raw.send("SUBSCRIBE", {"id": "orders", "destination": "/topic/news", "durable": "true"})
    error = await raw.error()
    assert error.header("message") == "subscription name in use"
    assert b"queue 'orders' exists and is not a durable subscription of /topic/news" in error.body
