"""Raw-socket transcripts against the live STOMP head: exact bytes in, frames out.

Edge cases of the wire (NULs with content-length, escaping per version, frames split
byte by byte or packed together, CRLF) and every kind of bad input: each ends in one
ERROR frame naming what was wrong, and that connection only closes.
"""

from __future__ import annotations

import pytest
import pytest_twisted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet import reactor
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock, deferLater
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from bridge.heads.stomp import StompHead, StompSettings
from bridge.heads.stomp.frames import (
    NEED_DATA,
    SERVER_COMMANDS,
    Frame,
    FrameParser,
    Limits,
    Version,
)
from bridge.heads.stomp.protocol import StompFactory


async def connected(node, version="1.2"):
    client = await node.raw()
    frame = await client.connect(version)
    assert frame.command == "CONNECTED", frame
    return client


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest_twisted.ensureDeferred
async def test_negotiates_the_highest_common_version(stomp_node, version):
    client = await stomp_node.raw()
    connected_frame = await client.connect(f"{version},0.9")
    assert connected_frame.header("version") == version
    assert connected_frame.header("server").startswith("txbridge/")
    assert connected_frame.header("heart-beat") == "0,0"


@pytest_twisted.ensureDeferred
async def test_no_accept_version_is_1_0_and_an_unknown_one_an_error(stomp_node):
    old = await stomp_node.raw()
    old.write(b"CONNECT\n\n\x00")
    assert (await old.next("CONNECTED")).header("version") == "1.0"
    future = await stomp_node.raw()
    await future.connect("2.0")
    error = await future.error()
    assert error.header("version") == "1.0,1.1,1.2"
    assert b"this node speaks STOMP 1.0, 1.1, 1.2" in error.body


@pytest_twisted.ensureDeferred
async def test_nul_bodies_with_content_length_and_crlf_frames(stomp_node):
    client = await connected(stomp_node)
    client.write(b"SUBSCRIBE\r\nid:0\r\ndestination:/queue/bin\r\n\r\n\x00")
    client.write(
        b"SEND\r\ndestination:/queue/bin\r\ncontent-length:4\r\nreceipt:r\r\n\r\n\x00\x01\x00\x02\x00"
    )
    message = await client.next("MESSAGE")
    assert message.body == b"\x00\x01\x00\x02"
    assert message.header("content-length") == "4"
    await client.receipt("r")


@pytest_twisted.ensureDeferred
async def test_frames_split_byte_by_byte_and_packed_in_one_write(stomp_node):
    client = await stomp_node.raw()
    data = (
        b"CONNECT\naccept-version:1.2\n\n\x00"
        b"SUBSCRIBE\nid:s\ndestination:/queue/split\n\n\x00"
        b"SEND\ndestination:/queue/split\n\none\x00\n"
        b"SEND\ndestination:/queue/split\nreceipt:2\n\ntwo\x00"
    )
    for index in range(len(data)):
        client.write(data[index : index + 1])
        await deferLater(reactor, 0, lambda: None)
    await client.receipt("2")
    await client.next("MESSAGE", 2)
    packed = await stomp_node.raw()
    packed.write(data.replace(b"receipt:2", b"receipt:3"))
    await packed.receipt("3")
    assert [m.body for m in client.of("MESSAGE")] == [b"one", b"two"]


@pytest.mark.parametrize(
    ("version", "sent", "stored", "delivered"),
    [
        ("1.0", b"k:a\\cb\\nc", "a\\cb\\nc", b"k:a\\cb\\nc"),
        ("1.1", b"k:a\\cb\\nc", "a:b\nc", b"k:a\\cb\\nc"),
        ("1.2", b"k:a\\cb\\rc", "a:b\rc", b"k:a\\cb\\rc"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_header_escaping_per_version_both_ways(stomp_node, version, sent, stored, delivered):
    client = await connected(stomp_node, version)
    client.write(b"SUBSCRIBE\nid:s\ndestination:/queue/esc\n\n\x00")
    client.write(b"SEND\ndestination:/queue/esc\n" + sent + b"\nreceipt:r\n\nx\x00")
    await client.receipt("r")
    message = await client.next("MESSAGE")
    assert message.header("k") == stored
    assert b"\n" + delivered + b"\n" in client.received


@pytest_twisted.ensureDeferred
async def test_non_ascii_headers_and_bodies_survive(stomp_node):
    client = await connected(stomp_node)
    client.send("SUBSCRIBE", {"id": "s", "destination": "/queue/utf"})
    client.send(
        "SEND",
        {"destination": "/queue/utf", "grüße": "日本語 ✓", "receipt": "r"},
        "κόσμε".encode(),
    )
    message = await client.next("MESSAGE")
    assert message.header("grüße") == "日本語 ✓"
    assert message.body.decode() == "κόσμε"


@pytest.mark.parametrize(
    ("data", "message", "detail"),
    [
        (b"GARBAGE\n\n\x00", "unknown command", "b'GARBAGE' is not a STOMP client command"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n", "unknown command", "STOMP client"),
        (b"SEND\nno colon\n\n\x00", "malformed header", "has no colon"),
        (b"SEND\ndestination:/queue/a\ncontent-length:-1\n\n\x00", "malformed content-length", ""),
        (b"SEND\ndestination:/queue/a\nx:\\q\n\n\x00", "malformed header", "'\\\\q'"),
        (b"SEND\ndestination:/queue/a\nmessage-id:7\n\n\x00", "header not allowed", "'message-id'"),
        (b"SEND\ndestination:/queue/a\nredelivered:true\n\n\x00", "header not allowed", ""),
        (b"SEND\ndestination:/queue/a\nsubscription:s\n\n\x00", "header not allowed", ""),
        (b"SEND\ndestination:/exchange/x\n\n\x00", "bad destination", "'/exchange/x' has an"),
        (b"SEND\ndestination:/queue/\n\n\x00", "bad destination", "'/queue/' is malformed"),
        (b"SEND\ndestination:/queue/a b\n\n\x00", "bad destination", "'/queue/a b' is malformed"),
        (b"SEND\n\n\x00", "missing header", "'destination'"),
        (b"SUBSCRIBE\ndestination:/queue/a\n\n\x00", "missing header", "'id'"),
        (b"SUBSCRIBE\nid:1\ndestination:/queue/a\nack:sometimes\n\n\x00", "bad header", ""),
        (b"UNSUBSCRIBE\nid:nope\n\n\x00", "no such subscription", "'nope'"),
        (b"ACK\nid:9-9\n\n\x00", "unknown ack id", "'9-9'"),
        (b"COMMIT\ntransaction:t\n\n\x00", "no such transaction", "'t' is not open"),
        (b"CONNECT\naccept-version:1.2\n\n\x00", "already connected", ""),
        (
            b"SUBSCRIBE\nid:1\ndestination:/amq/queue/none\n\n\x00",
            "no such destination",
            "no queue 'none'",
        ),
        (b"SUBSCRIBE\nid:1\ndestination:/queue/a\nselector:a ==\n\n\x00", "bad selector", ""),
    ],
)
@pytest_twisted.ensureDeferred
async def test_bad_input_is_an_error_naming_it_and_closes_that_connection_only(
    stomp_node, data, message, detail
):
    bystander = await connected(stomp_node)
    client = await connected(stomp_node)
    client.write(data)
    error = await client.error()
    assert error.header("message") == message
    assert detail.encode() in error.body
    bystander.send("SEND", {"destination": "/queue/ok", "receipt": "still"})
    await bystander.receipt("still")


@pytest_twisted.ensureDeferred
async def test_an_error_answers_the_receipt_of_the_frame_that_caused_it(stomp_node):
    client = await connected(stomp_node)
    client.send("SEND", {"destination": "/nowhere", "receipt": "r9"})
    error = await client.error()
    assert error.header("receipt-id") == "r9"


@pytest_twisted.ensureDeferred
async def test_frames_before_connect_are_refused(stomp_node):
    client = await stomp_node.raw()
    client.send("SEND", {"destination": "/queue/a"})
    error = await client.error()
    assert error.header("message") == "not connected"
    assert b"SEND before CONNECT" in error.body


@pytest.mark.parametrize(
    ("data", "message", "detail"),
    [
        (b"SEND\ndestination:/queue/a\ncontent-length:1025\n\n", "frame too large", "1025 bytes"),
        (b"SEND\ndestination:/queue/a\n\n" + b"x" * 1100, "frame too large", "1024 bytes"),
        (b"SEND\nx:" + b"y" * 600, "frame headers too long", "at most 512 bytes"),
        (b"SEND\n" + b"h:v\n" * 11 + b"\n\x00", "too many headers", "11 headers; at most 10"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_oversized_frames_and_headers_are_refused_early(make_node, data, message, detail):
    limits = Limits(max_body=1024, max_headers=10, max_header_bytes=512)
    node = await make_node(settings=StompSettings(limits=limits, ttl=None))
    client = await connected(node)
    client.write(data)  # no NUL: the node refuses before the frame could end
    error = await client.error()
    assert error.header("message") == message
    assert detail.encode() in error.body


def _frames(data):
    """Every frame the node wrote, which must parse as server frames."""
    parser = FrameParser(commands=SERVER_COMMANDS, version=Version.V1_0)
    parser.feed(data)
    frames = []
    while (event := parser.next_event()) is not NEED_DATA:
        if isinstance(event, Frame):
            frames.append(event)
    assert parser.buffered == 0
    return frames


def _open(factory, clock):
    """A connection of the head over an in-memory transport (no socket, no reactor)."""
    transport = StringTransport()
    protocol = factory.buildProtocol(None)
    protocol.makeConnection(transport)
    return protocol, transport


SNIPPETS = [
    b"CONNECT\naccept-version:1.2\n\n\x00",
    b"STOMP\naccept-version:1.0,1.1\nheart-beat:0,0\n\n\x00",
    b"SUBSCRIBE\nid:1\ndestination:/queue/fuzz\nack:client\n\n\x00",
    b"SUBSCRIBE\nid:2\ndestination:/topic/news\n\n\x00",
    b"SEND\ndestination:/queue/fuzz\n\nbody\x00",
    b"SEND\ndestination:/topic/news\ncontent-length:3\n\na\x00b\x00",
    b"ACK\nid:1-1\n\n\x00",
    b"NACK\nid:1-1\nrequeue:false\n\n\x00",
    b"BEGIN\ntransaction:t\n\n\x00",
    b"UNSUBSCRIBE\nid:2\n\n\x00",
    b"DISCONNECT\nreceipt:bye\n\n\x00",
    b"\n",
    b"\r\n",
    b"\x00",
    b":",
    b"\\",
    b"content-length:",
]


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chunks=st.lists(
        st.one_of(st.binary(min_size=1, max_size=100), st.sampled_from(SNIPPETS)),
        min_size=1,
        max_size=8,
    )
)
def test_random_bytes_never_hurt_the_node_or_another_connection(stomp_node, chunks):
    """Random bytes, on the real broker: that connection gets an ERROR or waits for more,
    and a bystander's next send is still received and confirmed."""
    clock = Clock()
    head = StompHead(stomp_node.broker, stomp_node.head.security, reactor=clock)
    factory = StompFactory(head, StompSettings(ttl=None, heart_beat=None))
    bystander, bystander_wire = _open(factory, clock)
    bystander.dataReceived(b"CONNECT\naccept-version:1.2\n\n\x00")
    victim, victim_wire = _open(factory, clock)
    for chunk in chunks:
        victim.dataReceived(chunk)
    clock.advance(0)
    answers = _frames(victim_wire.value())
    errors = [i for i, frame in enumerate(answers) if frame.command == "ERROR"]
    assert errors in ([], [len(answers) - 1])  # an ERROR is the last word
    if errors:
        assert victim_wire.disconnecting and answers[-1].header("message")
    bystander.dataReceived(b"SEND\ndestination:/queue/alive\nreceipt:ok\n\nx\x00")
    clock.advance(0)
    assert bystander_wire.value().endswith(b"RECEIPT\nreceipt-id:ok\n\n\x00")
    for protocol, wire in ((victim, victim_wire), (bystander, bystander_wire)):
        wire.loseConnection()
        protocol.connectionLost(Failure(ConnectionDone()))
    clock.advance(0)
    assert head.connections == 0 and not clock.getDelayedCalls()
