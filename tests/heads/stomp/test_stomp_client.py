"""stomp.py against the STOMP head: each version connects and disconnects with receipts,
queues and topics deliver, custom and non-ASCII headers and binary bodies survive."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from bridge.config.node import Routing
from bridge.heads.stomp import StompSettings
from bridge.heads.stomp.frames import Limits


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
    assert "redelivered" not in message.headers  # a first delivery (as ActiveMQ's)
    assert "delivery-count" not in message.headers
    assert message.headers["persistent"] == "true"
    await client.ack(message)
    await client.disconnect()
    assert "bye-" in client.listener.receipts[-1]
    assert stomp_node.broker.queue("orders").depth == 0


@pytest_twisted.ensureDeferred
async def test_a_topic_delivers_to_every_subscriber_and_a_queue_to_one(stomp_node):
    one, two = await stomp_node.client(), await stomp_node.client("1.1")
    for client in (one, two):
        await client.call("subscribe", "/topic/news", id="t", ack="auto", headers={"receipt": "t"})
        await client.call("subscribe", "/queue/work", id="q", ack="auto", headers={"receipt": "q"})
        await client.receipt("q")
    producer = await stomp_node.client()
    await producer.confirmed_send("/topic/news", b"flash", **{"x-tag": "1", "ключ": "値 ✓"})
    for n in range(4):
        await producer.confirmed_send("/queue/work", f"job {n}".encode())
    for client in (one, two):
        await client.listener.until(
            lambda c=client: any(m.body == b"flash" for m in c.listener.messages)
        )
        [flash] = [m for m in client.listener.messages if m.body == b"flash"]
        assert flash.headers["destination"] == "/topic/news"
        assert flash.headers["x-tag"] == "1"
        assert flash.headers["ключ"] == "値 ✓"
    await one.listener.until(
        lambda: sum(m.body.startswith(b"job") for c in (one, two) for m in c.listener.messages) == 4
    )
    jobs = sorted(m.body for c in (one, two) for m in c.listener.messages if m.body != b"flash")
    assert jobs == [b"job 0", b"job 1", b"job 2", b"job 3"]


@pytest.mark.parametrize("version", ["1.1", "1.2"])
@pytest_twisted.ensureDeferred
async def test_unacknowledged_messages_come_back_flagged_after_a_disconnect(stomp_node, version):
    producer = await stomp_node.client()
    for n in range(3):
        await producer.confirmed_send("/queue/jobs", f"{n}".encode(), persistent="true")
    first = await stomp_node.client(version)
    await first.call("subscribe", "/queue/jobs", id="1", ack="client")
    messages = await first.messages(3)
    assert [m.headers.get("redelivered") for m in messages] == [None] * 3
    await first.ack(messages[0])  # cumulative in client mode: only the first
    await first.disconnect()
    second = await stomp_node.client(version)
    await second.call("subscribe", "/queue/jobs", id="1", ack="client-individual")
    again = await second.messages(2)
    assert [m.body for m in again] == [b"1", b"2"]
    assert [m.headers["redelivered"] for m in again] == ["true", "true"]
    assert [m.headers["delivery-count"] for m in again] == ["2", "2"]
    assert again[0].headers["message-id"] == messages[1].headers["message-id"]
    for message in again:
        await second.ack(message)
    await second.disconnect()
    assert stomp_node.broker.queue("jobs").depth == 0


@pytest_twisted.ensureDeferred
async def test_client_mode_acks_cumulatively_and_client_individual_one_by_one(stomp_node):
    producer = await stomp_node.client()
    for n in range(4):
        await producer.confirmed_send("/queue/a", f"{n}".encode())
        await producer.confirmed_send("/queue/b", f"{n}".encode())
    client = await stomp_node.client()
    await client.call("subscribe", "/queue/a", id="a", ack="client")
    await client.call("subscribe", "/queue/b", id="b", ack="client-individual")
    await client.messages(8)
    a = [m for m in client.listener.messages if m.headers["subscription"] == "a"]
    b = [m for m in client.listener.messages if m.headers["subscription"] == "b"]
    await client.ack(a[2], receipt="ra")
    await client.ack(b[2], receipt="rb")
    await client.receipt("rb")
    assert stomp_node.broker.queue("a").depth == 1
    assert stomp_node.broker.queue("b").depth == 3


@pytest_twisted.ensureDeferred
async def test_nack_requeues_with_a_higher_count_or_drops_with_requeue_false(stomp_node):
    producer = await stomp_node.client()
    await producer.confirmed_send("/queue/n", b"again", persistent="true")
    await producer.confirmed_send("/queue/n", b"poison", persistent="true")
    client = await stomp_node.client()
    await client.call("subscribe", "/queue/n", id="s", ack="client-individual")
    again, poison = await client.messages(2)
    await client.nack(again)
    await client.nack(poison, requeue="false", receipt="dropped")
    await client.receipt("dropped")
    [_, _, redelivered] = await client.messages(3)
    assert redelivered.body == b"again"
    assert redelivered.headers["redelivered"] == "true"
    assert redelivered.headers["delivery-count"] == "2"
    await client.ack(redelivered, receipt="done")
    await client.receipt("done")
    queue = stomp_node.broker.queue("n")
    assert queue.depth == 0 and queue.dropped_total == 1


@pytest_twisted.ensureDeferred
async def test_transactions_commit_sends_and_acks_together_and_abort_undoes_them(stomp_node):
    producer = await stomp_node.client()
    await producer.confirmed_send("/queue/in", b"task", persistent="true")
    client = await stomp_node.client()
    await client.call("subscribe", "/queue/in", id="s", ack="client-individual")
    [task] = await client.messages(1)
    aborted = await client.call("begin")
    await client.call("send", "/queue/out", b"result", headers={"transaction": aborted})
    await client.ack(task, transaction=aborted)
    await client.call("abort", aborted, receipt="aborted")
    await client.receipt("aborted")
    assert stomp_node.broker.queue("out").depth == 0 if "out" in stomp_node.broker.queues else True
    [_, task_again] = await client.messages(2)
    assert task_again.headers["redelivered"] == "true"
    tx = await client.call("begin")
    await client.call(
        "send", "/queue/out", b"result", headers={"transaction": tx, "persistent": "true"}
    )
    await client.ack(task_again, transaction=tx)
    assert stomp_node.broker.queue("out").depth == 0  # not before the commit
    await client.call("commit", tx, receipt="committed")
    await client.receipt("committed")
    assert stomp_node.broker.queue("out").depth == 1
    assert stomp_node.broker.queue("in").depth == 0


@pytest_twisted.ensureDeferred
async def test_a_sixteen_mebibyte_body_goes_through(make_node):
    limits = Limits(max_body=17 * 1024 * 1024)
    node = await make_node(settings=StompSettings(limits=limits, ttl=None, heart_beat=None))
    body = bytes(range(256)) * (16 * 4096)
    client = await node.client()
    await client.call("subscribe", "/queue/big", id="s", ack="auto")
    await client.confirmed_send("/queue/big", body, persistent="true")
    [message] = await client.messages(1)
    assert message.body == body


@pytest_twisted.ensureDeferred
async def test_heart_beats_flow_both_ways(make_node):
    node = await make_node(settings=StompSettings(ttl=0.6, heart_beat=0.1))
    # stomp.py gives up on a node silent for 1.5 times the beat it asked for: asking for
    # one every 500 ms (not 100) leaves a loaded machine's reactor room to be late.
    client = node.stomp("1.2", heartbeats=(100, 500))
    await client.connect()
    raw = await node.raw()
    connected = await raw.connect(**{"heart-beat": "0,50"})
    assert connected.header("heart-beat") == "100,0"  # the client sends none: none asked
    await raw.until(lambda: raw.heart_beats >= 3, timeout=5)
    await deferLater(reactor, 0.8, lambda: None)  # beyond the TTL: stomp.py's beats keep it
    await client.confirmed_send("/queue/hb", b"alive")
    assert client.listener.heartbeat_timeouts == 0


@pytest_twisted.ensureDeferred
async def test_a_send_to_a_topic_nobody_subscribed_creates_its_multicast_address(stomp_node):
    assert stomp_node.broker.config.routing_for("prices") is Routing.ANYCAST
    producer = await stomp_node.client()
    await producer.confirmed_send("/topic/prices", b"unheard")
    address = stomp_node.broker.addresses["prices"]
    assert address.routing_types == {Routing.MULTICAST} and address.bindings == ()


@pytest_twisted.ensureDeferred
async def test_queue_and_topic_of_one_name_work_side_by_side(stomp_node):
    """``/queue/prices`` and ``/topic/prices`` name one address with both routing types:
    a queue send reaches one queue consumer, a topic send every topic subscriber, and
    neither reaches the other kind."""
    worker = await stomp_node.client()
    watcher = await stomp_node.client()
    await watcher.call("subscribe", "/topic/prices", id="t", headers={"receipt": "t"})
    await watcher.receipt("t")
    await worker.call("subscribe", "/queue/prices", id="q", headers={"receipt": "q"})
    await worker.receipt("q")
    address = stomp_node.broker.addresses["prices"]
    assert address.routing_types == {Routing.ANYCAST, Routing.MULTICAST}
    producer = await stomp_node.client()
    await producer.confirmed_send("/topic/prices", b"tick")
    await producer.confirmed_send("/queue/prices", b"order")
    [tick] = await watcher.messages(1)
    [order] = await worker.messages(1)
    assert (tick.body, tick.headers["destination"]) == (b"tick", "/topic/prices")
    assert (order.body, order.headers["destination"]) == (b"order", "/queue/prices")
    await producer.confirmed_send("/queue/prices", b"second order")
    await worker.messages(2)
    assert [m.body for m in watcher.listener.messages] == [b"tick"]
    assert [m.body for m in worker.listener.messages] == [b"order", b"second order"]


@pytest_twisted.ensureDeferred
async def test_the_other_prefix_is_refused_where_addresses_may_not_be_created(make_node):
    node = await make_node(extra={"address": [{"name": "private.prices"}]})
    producer = await node.client()
    await producer.send("/topic/private.prices", b"wrong kind")
    await producer.listener.until(lambda: bool(producer.listener.errors))
    [error] = producer.listener.errors
    assert error.headers["message"] == "wrong destination type"
    assert b"auto-create-addresses is off for it" in error.body
    assert node.broker.addresses["private.prices"].routing_types == {Routing.ANYCAST}
