"""Consumer flow control on a real node process (issue 5): a consumer that takes nothing
(so grants no credit back) stops receiving after its window, and starts again when it
takes; a consumer whose socket stops reading stops the node's deliveries to it, without
the node's memory growing, while a consumer on another queue is served."""

from __future__ import annotations

import socket

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from bridge.client.api import Client, connect
from bridge.message import Message
from bridge.protocol import (
    PROTOCOL_VERSION,
    UNLIMITED,
    Connect,
    Connected,
    CreateConsumer,
    Ok,
    Packet,
    decode_packet,
    encode_packet,
)
from tests.system.flow import KIB, MIB, RssSampler, poll, queue_of, status
from tests.system.nodes import node_document
from transport.frames import HEADER, ControlType, encode

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

WAIT = 30.0


async def send_all(client: Client, address: str, bodies: int, size: int) -> None:
    """Send ``bodies`` non-durable messages of ``size`` bytes (the first 8 their number),
    keeping to the client's writability; returns once all are confirmed."""
    for number in range(bodies):
        if not client.address_writable(address):
            await client.when_writable(address).addTimeout(WAIT, reactor)
        body = b"%08d" % number + bytes(size - 8)
        if number == bodies - 1:
            await client.send(address, body, durable=False).addTimeout(WAIT, reactor)
        else:
            client.send_nowait(address, body, durable=False)


@pytest_twisted.ensureDeferred
async def test_a_consumer_that_takes_nothing_stops_after_its_window(nodes):
    document = node_document(address=[{"name": "q", "routing": "anycast"}])
    node = await nodes(document).wait_started()
    window, size, count = 64 * KIB, 4 * KIB, 64
    message_size = Message(0, "q", False, {}, bytes(size)).size
    per_window = -(-window // message_size)  # the node sends while any credit is left

    consumer_client = await connect(reactor, node.core_url)
    consumer = await consumer_client.consumer("q", window_size=window)
    producer = await connect(reactor, node.core_url)
    await send_all(producer, "q", count, size)
    # A request on the consumer's connection: the node answers it after any delivery it
    # sent before, so once it is answered the client has every delivery the node made.
    await consumer_client.create_queue("barrier")
    queue = queue_of(await status(node), "q")
    assert queue["in_flight"] == per_window, queue
    assert queue["waiting"] == count - per_window

    taken = [await consumer.receive() for _ in range(per_window // 2)]  # credit goes back
    assert [int(m.body[:8]) for m in taken] == list(range(per_window // 2))
    await consumer_client.create_queue("barrier 2")
    assert queue_of(await status(node), "q")["in_flight"] == per_window + len(taken)

    rest = []
    for _ in range(count - len(taken)):
        message = await consumer.receive().addTimeout(WAIT, reactor)
        rest.append(int(message.body[:8]))
        message.ack()
    assert rest == list(range(len(taken), count))
    for client in (producer, consumer_client):
        await client.close()


def _exchange(sock: socket.socket, packet: Packet) -> Packet:
    """Write one packet and read the node's answer (blocking: run in a thread), past the
    transport's PINGs (the node's first frame is one, asking for pings)."""
    sock.sendall(b"".join(encode(*encode_packet(packet))))
    while True:
        header = _read(sock, HEADER.size)
        _, _, frame_type, length = HEADER.unpack(header)
        payload = _read(sock, length)
        if frame_type != ControlType.PING:
            return decode_packet(frame_type, payload)


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise AssertionError("the node closed the connection")
        data += chunk
    return data


def stalled_consumer(port: int, queue: str) -> socket.socket:
    """A raw TCP client with a small receive buffer that logs in and consumes ``queue``
    with no window (-1: the node sends as fast as it can write), then never reads."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KIB)
    sock.settimeout(WAIT)
    sock.connect(("127.0.0.1", port))
    connected = _exchange(sock, Connect(PROTOCOL_VERSION, "stalled", None, None, MIB))
    assert isinstance(connected, Connected), connected
    created = _exchange(sock, CreateConsumer(1, 1, queue, None, False, UNLIMITED))
    assert isinstance(created, Ok), created
    return sock


@pytest_twisted.ensureDeferred
async def test_a_consumer_that_stops_reading_stops_deliveries_not_the_node(nodes):
    document = node_document(
        address=[
            # PAGE, so that what waits for the stalled consumer is in the store: the
            # node's memory then shows what its deliveries to that consumer hold.
            {
                "name": "stuck",
                "routing": "anycast",
                "max-size-bytes": "2MiB",
                "address-full-policy": "PAGE",
            },
            {"name": "served", "routing": "anycast"},
        ]
    )
    node = await nodes(document).wait_started()
    stalled = await deferToThread(stalled_consumer, node.ports["core"], "stuck")
    try:
        producer = await connect(reactor, node.core_url)
        reader = await connect(reactor, node.core_url)
        served = await reader.consumer("served")
        sampler = RssSampler({"node": node.pid or 0}).start()
        size, count = 64 * KIB, 48 * MIB // (64 * KIB)  # 48 MiB, each under large
        await send_all(producer, "stuck", count, size)
        stuck = await poll(
            node,
            lambda s: queue_of(s, "stuck")["depth"] == count,
            "the messages for the stalled consumer are queued",
        )
        delivered = queue_of(stuck, "stuck")["in_flight"]
        assert 0 < delivered < count // 4, queue_of(stuck, "stuck")

        # Another queue's consumer is served meanwhile, in order.
        await send_all(producer, "served", 200, KIB)
        numbers = []
        for _ in range(200):
            message = await served.receive().addTimeout(WAIT, reactor)
            numbers.append(int(message.body[:8]))
            message.ack()
        assert numbers == list(range(200))
        sampler.stop()
        # Nothing more went to the stalled one, and the node held no backlog for it.
        assert queue_of(await status(node), "stuck")["in_flight"] == delivered
        assert sampler.growth("node") < 16 * MIB, sampler.describe()
        for client in (producer, reader):
            await client.close()
    finally:
        stalled.close()
