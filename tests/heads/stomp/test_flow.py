"""Flow control on the STOMP head: a subscription's prefetch bounds what it holds
unacknowledged; deliveries stop while the client's connection is not writable and go on
when it drains; reading pauses while persistent sends wait for the store; silent peers
are dropped by the connection TTL and heart-beats."""

from __future__ import annotations

import pytest
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


async def _eventually(test, timeout=5.0):
    """Wait (bounded) for a condition of the node no client frame announces."""
    waited = 0.0
    while not test():
        assert waited < timeout, "not within the time allowed"
        await deferLater(reactor, 0.01, lambda: None)
        waited += 0.01


BLOCKED = {
    "address-setting": [
        {"match": "blocked", "max-size-bytes": "16KiB", "address-full-policy": "BLOCK"},
    ]
}


@pytest_twisted.ensureDeferred
async def test_a_producer_over_a_full_block_address_is_not_read_until_there_is_room(make_node):
    node = await make_node(extra=BLOCKED)
    body = b"b" * 4096
    producer = await _connected(node)
    [connection] = node.head._live
    for n in range(12):  # 48 KiB for a 16 KiB address
        producer.send(
            "SEND", {"destination": "/queue/blocked", "receipt": str(n), "seq": str(n)}, body
        )
    await producer.receipt("3")  # 16 KiB: full
    await _eventually(lambda: connection.blocked)
    memory = node.broker.addresses["blocked"].memory
    assert node.head.producers_blocked == 1
    assert memory.size <= memory.max_size + len(body)
    assert len(producer.of("RECEIPT")) == 4
    other = await _connected(node)  # another connection is read as ever
    other.send("SEND", {"destination": "/queue/elsewhere", "receipt": "free"}, body)
    await other.receipt("free")
    consumer = await _connected(node)
    consumer.send(
        "SUBSCRIBE", {"id": "c", "destination": "/queue/blocked", "ack": "client-individual"}
    )
    seen = 0
    while seen < 12:
        await consumer.next("MESSAGE", seen + 1)
        assert memory.size <= memory.max_size + len(body)
        consumer.send("ACK", {"id": consumer.of("MESSAGE")[seen].header("ack")})
        seen += 1
    await producer.receipt("11")
    assert [f.header("seq") for f in consumer.of("MESSAGE")] == [str(n) for n in range(12)]
    assert [f.header("receipt-id") for f in producer.of("RECEIPT")] == [str(n) for n in range(12)]
    assert not connection.blocked and node.head.producers_blocked == 0
    assert node.broker.addresses["blocked"].memory.waiters == []


@pytest_twisted.ensureDeferred
async def test_a_blocked_producer_that_went_away_is_cleaned_up_once_there_is_room(make_node):
    """The node does not read a blocked connection, so it learns that the peer left only
    once the address has room: what the peer sent before leaving is taken then."""
    node = await make_node(extra=BLOCKED)
    producer = await _connected(node)
    [connection] = node.head._live
    for n in range(6):
        headers = {"destination": "/queue/blocked", "seq": str(n), "receipt": str(n)}
        producer.send("SEND", headers, b"b" * 4096)
    await producer.receipt("3")
    await _eventually(lambda: connection.blocked)
    memory = node.broker.addresses["blocked"].memory
    assert len(memory.waiters) == 1
    await producer.close()
    consumer = await _connected(node)
    consumer.send("SUBSCRIBE", {"id": "c", "destination": "/queue/blocked", "ack": "auto"})
    await consumer.next("MESSAGE", 6)
    await connection.finished
    assert memory.waiters == [] and node.head.producers_blocked == 0
    assert [f.header("seq") for f in consumer.of("MESSAGE")] == [str(n) for n in range(6)]


FAILING = {
    "address-setting": [
        {"match": "failing", "max-size-bytes": "8KiB", "address-full-policy": "FAIL"},
    ]
}


@pytest.mark.parametrize("persistent", [True, False])
@pytest_twisted.ensureDeferred
async def test_a_send_to_a_full_fail_address_is_an_error_naming_the_address(make_node, persistent):
    """Artemis's FAIL: the send is refused with an ERROR that says why (the address, its
    limit), only that connection closes, and what was queued before stays."""
    node = await make_node(extra=FAILING)
    producer = await _connected(node)
    bystander = await _connected(node)
    headers = {"destination": "/queue/failing"} | ({"persistent": "true"} if persistent else {})
    for n in range(4):  # 16 KiB for an 8 KiB address
        producer.send("SEND", headers | {"receipt": str(n)}, b"b" * 4096)
    await producer.until(lambda: producer.lost.called)
    [error] = producer.of("ERROR")
    assert error.header("message") == "address full"
    assert error.header("receipt-id") == "2"
    assert b"'failing' is full" in error.body and b"FAIL" in error.body
    await _eventually(lambda: node.broker.queue("failing").depth == 2)
    bystander.send("SEND", {"destination": "/queue/elsewhere", "receipt": "free"}, b"x")
    await bystander.receipt("free")


@pytest_twisted.ensureDeferred
async def test_a_send_to_a_full_drop_address_is_dropped_and_its_receipt_still_comes(make_node):
    dropping = {
        "address-setting": [FAILING["address-setting"][0] | {"address-full-policy": "DROP"}]
    }
    node = await make_node(extra=dropping)
    producer = await _connected(node)
    for n in range(4):
        headers = {"destination": "/queue/failing", "persistent": "true", "receipt": str(n)}
        producer.send("SEND", headers, b"b" * 4096)
    await producer.receipt("3")
    assert producer.of("ERROR") == []
    assert node.broker.queue("failing").depth == 2
    assert node.broker.addresses["failing"].memory.dropped_total == 2
