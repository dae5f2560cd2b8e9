"""Flow control on the STOMP head: a subscription's prefetch bounds what it holds
unacknowledged; deliveries stop while the client's connection is not writable and go on
when it drains; reading pauses while persistent sends wait for the store; silent peers
are dropped by the connection TTL and heart-beats."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from bridge.heads.stomp import StompSettings


async def _connected(node, **headers):
    client = await node.raw()
    frame = await client.connect(**headers)
    assert frame.command == "CONNECTED"
    return client


@pytest_twisted.ensureDeferred
async def test_prefetch_count_bounds_the_unacknowledged_messages(make_node):
    node = await make_node(settings=StompSettings(ttl=None, heart_beat=None, prefetch=3))
    producer = await _connected(node)
    for n in range(8):
        producer.send("SEND", {"destination": "/queue/p", "receipt": str(n)}, str(n).encode())
    await producer.receipt("7")
    windowed = await _connected(node)
    windowed.send(
        "SUBSCRIBE",
        {"id": "w", "destination": "/queue/p", "ack": "client-individual", "prefetch-count": "2"},
    )
    await windowed.next("MESSAGE", 2)
    default = await _connected(node)
    default.send("SUBSCRIBE", {"id": "d", "destination": "/queue/p", "ack": "client"})
    await default.next("MESSAGE", 3)
    windowed.send("SEND", {"destination": "/queue/other", "receipt": "x"})
    await windowed.receipt("x")
    assert (len(windowed.of("MESSAGE")), len(default.of("MESSAGE"))) == (2, 3)
    queue = node.broker.queue("p")
    assert (queue.in_flight, queue.waiting) == (5, 3)
    first = windowed.of("MESSAGE")[0]
    windowed.send("ACK", {"id": first.header("ack")})
    await windowed.next("MESSAGE", 3)
    last = default.of("MESSAGE")[-1]
    default.send("ACK", {"id": last.header("ack")})  # cumulative: all three
    await default.until(lambda: len(default.of("MESSAGE")) + len(windowed.of("MESSAGE")) == 8)


@pytest_twisted.ensureDeferred
async def test_deliveries_stop_while_the_client_does_not_read(stomp_node):
    chunk = b"x" * (64 * 1024)
    count = 512  # 32 MiB: more than loopback's socket buffers can hide
    reader = await _connected(stomp_node)
    reader.send("SUBSCRIBE", {"id": "s", "destination": "/queue/flood", "ack": "auto"})
    reader.send("SEND", {"destination": "/queue/none", "receipt": "subscribed"})
    await reader.receipt("subscribed")
    reader.transport.pauseProducing()  # the client stops reading its socket
    producer = await _connected(stomp_node)
    for _ in range(count):
        producer.send("SEND", {"destination": "/queue/flood"}, chunk)
    producer.send("SEND", {"destination": "/queue/none", "receipt": "all"})
    await producer.receipt("all")
    queue = stomp_node.broker.queue("flood")
    assert queue.waiting > 0, "every message was handed to a client that does not read"
    for live in stomp_node.head._live:
        assert live._out.queued <= live.settings.high_water + len(chunk) + 1024
    reader.transport.resumeProducing()
    await reader.until(lambda: len(reader.of("MESSAGE")) == count, timeout=30)
    assert queue.depth == 0


@pytest_twisted.ensureDeferred
async def test_reading_pauses_while_persistent_sends_wait_for_the_store(make_node):
    node = await make_node(settings=StompSettings(ttl=None, heart_beat=None, max_unstored=4096))
    client = await _connected(node)
    [connection] = node.head._live
    pauses = []
    pause = connection.pause_reading
    connection.pause_reading = lambda reason: (pauses.append(reason), pause(reason))
    data = b"".join(
        f"SEND\ndestination:/queue/slow\npersistent:true\nreceipt:{n}\n\n".encode()
        + b"y" * 3000
        + b"\x00"
        for n in range(20)
    )
    client.write(data)
    await client.receipt("19")
    receipts = [f.header("receipt-id") for f in client.of("RECEIPT")]
    assert receipts == [str(n) for n in range(20)]  # in order, each once stored
    assert "store" in pauses
    assert node.broker.queue("slow").depth == 20


@pytest_twisted.ensureDeferred
async def test_silent_peers_are_dropped_by_the_ttl_and_heart_beats(make_node):
    node = await make_node(settings=StompSettings(ttl=0.3, heart_beat=0.1))
    never_connects = await node.raw()
    promises_beats = await _connected(node, **{"heart-beat": "100,0"})
    sends_none = await _connected(node, **{"heart-beat": "0,0"})
    await never_connects.until(lambda: never_connects.lost.called, timeout=5)
    await promises_beats.until(lambda: promises_beats.lost.called, timeout=5)
    assert promises_beats.of("ERROR") == []  # dropped, as a dead peer, without a word
    await deferLater(reactor, 0.5, lambda: None)
    sends_none.send("SEND", {"destination": "/queue/q", "receipt": "alive"})
    await sends_none.receipt("alive")  # a client without heart-beats is not timed out
