"""Raw-socket transcripts of acknowledgement and receipt rules: a NACKed message redelivered
at once can be acknowledged by its message-id (1.0, 1.1), a SUBSCRIBE's receipt comes
before its messages, a SEND's receipt in a transaction comes at COMMIT (or ABORT),
``requeue`` is read case-insensitively, a durable SUBSCRIBE needs an id, and CONNECTED
offers no heart-beat in a direction nothing will be sent."""

from __future__ import annotations

import pytest
import pytest_twisted

from bridge.heads.stomp import StompSettings


async def connected(node, version="1.2", **headers):
    client = await node.raw()
    frame = await client.connect(version, **headers)
    assert frame.command == "CONNECTED", frame
    return client


def settle_headers(version, message, subscription):
    """How an ACK or NACK names ``message`` in ``version``."""
    if version == "1.2":
        return {"id": message.header("ack")}
    if version == "1.1":
        return {"message-id": message.header("message-id"), "subscription": subscription}
    return {"message-id": message.header("message-id")}


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest_twisted.ensureDeferred
async def test_a_nacked_message_redelivered_at_once_can_be_acknowledged(stomp_node, version):
    client = await connected(stomp_node, version)
    client.send("SUBSCRIBE", {"id": "s1", "destination": "/queue/nack", "ack": "client-individual"})
    client.send("SEND", {"destination": "/queue/nack", "receipt": "sent"}, b"job")
    first = await client.next("MESSAGE")
    client.send("NACK", settle_headers(version, first, "s1"))
    again = await client.next("MESSAGE", 2)
    assert again.header("message-id") == first.header("message-id")
    assert (again.header("redelivered"), again.header("delivery-count")) == ("true", "2")
    client.send("ACK", {**settle_headers(version, again, "s1"), "receipt": "acked"})
    await client.receipt("acked")
    assert stomp_node.broker.queue("nack").depth == 0
    assert not client.lost.called


@pytest.mark.parametrize("version", ["1.0", "1.1"])
@pytest_twisted.ensureDeferred
async def test_a_nacked_message_redelivered_in_client_mode_is_named_by_its_message_id(
    stomp_node, version
):
    """Client mode: a cumulative NACK gives back two; both come again and one ACK of the
    last takes both."""
    client = await connected(stomp_node, version)
    client.send("SUBSCRIBE", {"id": "s1", "destination": "/queue/cum", "ack": "client"})
    for body in (b"a", b"b"):
        client.send("SEND", {"destination": "/queue/cum"}, body)
    second = await client.next("MESSAGE", 2)
    client.send("NACK", settle_headers(version, second, "s1"))
    last = await client.next("MESSAGE", 4)
    assert [m.body for m in client.of("MESSAGE")] == [b"a", b"b", b"a", b"b"]
    client.send("ACK", {**settle_headers(version, last, "s1"), "receipt": "acked"})
    await client.receipt("acked")
    assert stomp_node.broker.queue("cum").depth == 0


@pytest_twisted.ensureDeferred
async def test_a_subscribe_receipt_comes_before_its_messages(stomp_node):
    producer = await connected(stomp_node)
    for n in range(3):
        producer.send("SEND", {"destination": "/queue/waiting", "receipt": f"p{n}"}, b"m")
    await producer.receipt("p2")
    client = await connected(stomp_node)
    client.send("SUBSCRIBE", {"id": "s", "destination": "/queue/waiting", "receipt": "sub"})
    await client.next("MESSAGE", 3)
    assert [f.command for f in client.frames] == ["CONNECTED", "RECEIPT"] + ["MESSAGE"] * 3


@pytest_twisted.ensureDeferred
async def test_a_subscribe_receipt_behind_a_stored_send_still_comes_before_its_messages(
    stomp_node,
):
    """The SUBSCRIBE's receipt waits in line behind a persistent SEND's; the
    subscription's messages wait for that receipt."""
    client = await connected(stomp_node)
    client.send("SEND", {"destination": "/queue/self", "persistent": "true", "receipt": "p"}, b"m")
    client.send("SUBSCRIBE", {"id": "s", "destination": "/queue/self", "receipt": "sub"})
    await client.next("MESSAGE")
    receipts = [f.header("receipt-id") for f in client.frames if f.command != "MESSAGE"]
    assert [f.command for f in client.frames] == ["CONNECTED", "RECEIPT", "RECEIPT", "MESSAGE"]
    assert receipts == [None, "p", "sub"]


@pytest.mark.parametrize("persistent", ["true", "false"])
@pytest_twisted.ensureDeferred
async def test_a_send_receipt_in_a_transaction_comes_at_its_commit(stomp_node, persistent):
    client = await connected(stomp_node)
    client.send("BEGIN", {"transaction": "t"})
    for n in range(2):
        client.send(
            "SEND",
            {
                "destination": "/queue/txr",
                "transaction": "t",
                "persistent": persistent,
                "receipt": f"s{n}",
            },
            b"m",
        )
    client.send("SEND", {"destination": "/queue/other", "receipt": "outside"}, b"x")
    await client.receipt("outside")
    assert client.of("RECEIPT")[0].header("receipt-id") == "outside"  # not s0, s1
    client.send("COMMIT", {"transaction": "t", "receipt": "c"})
    await client.receipt("c")
    assert [f.header("receipt-id") for f in client.of("RECEIPT")] == ["outside", "s0", "s1", "c"]
    assert stomp_node.broker.queue("txr").depth == 2


@pytest_twisted.ensureDeferred
async def test_the_receipts_of_aborted_sends_come_at_the_abort(stomp_node):
    client = await connected(stomp_node)
    client.send("BEGIN", {"transaction": "t"})
    client.send("SEND", {"destination": "/queue/gone", "transaction": "t", "receipt": "s"}, b"m")
    client.send("SEND", {"destination": "/queue/other", "receipt": "outside"}, b"x")
    await client.receipt("outside")
    client.send("ABORT", {"transaction": "t", "receipt": "a"})
    await client.receipt("a")
    assert [f.header("receipt-id") for f in client.of("RECEIPT")] == ["outside", "s", "a"]
    assert stomp_node.broker.queue("gone").depth == 0
    assert not client.of("ERROR")


@pytest.mark.parametrize("value", ["False", "false", "FALSE"])
@pytest_twisted.ensureDeferred
async def test_requeue_false_is_read_whatever_its_case(stomp_node, value):
    client = await connected(stomp_node)
    client.send("SUBSCRIBE", {"id": "s", "destination": "/queue/rq", "ack": "client-individual"})
    client.send("SEND", {"destination": "/queue/rq"}, b"poison")
    message = await client.next("MESSAGE")
    client.send("NACK", {"id": message.header("ack"), "requeue": value, "receipt": "n"})
    await client.receipt("n")
    queue = stomp_node.broker.queue("rq")
    assert queue.depth == 0 and queue.dropped_total == 1


@pytest_twisted.ensureDeferred
async def test_requeue_true_is_read_whatever_its_case(stomp_node):
    client = await connected(stomp_node)
    client.send("SUBSCRIBE", {"id": "s", "destination": "/queue/rq", "ack": "client-individual"})
    client.send("SEND", {"destination": "/queue/rq"}, b"again")
    message = await client.next("MESSAGE")
    client.send("NACK", {"id": message.header("ack"), "requeue": "True"})
    again = await client.next("MESSAGE", 2)
    assert again.header("delivery-count") == "2"


@pytest_twisted.ensureDeferred
async def test_a_requeue_that_is_not_a_boolean_is_refused(stomp_node):
    client = await connected(stomp_node)
    client.send("SUBSCRIBE", {"id": "s", "destination": "/queue/rq", "ack": "client-individual"})
    client.send("SEND", {"destination": "/queue/rq"}, b"m")
    message = await client.next("MESSAGE")
    client.send("NACK", {"id": message.header("ack"), "requeue": "no"})
    error = await client.error()
    assert error.header("message") == "bad header"
    assert b"requeue 'no' is not true or false" in error.body


@pytest.mark.parametrize("durable", [{"durable": "true"}, {"persistent": "true"}])
@pytest_twisted.ensureDeferred
async def test_a_durable_subscribe_without_an_id_is_refused(stomp_node, durable):
    client = await connected(stomp_node, "1.0")
    client.send("SUBSCRIBE", {"destination": "/topic/audit", **durable})
    error = await client.error()
    assert error.header("message") == "missing header"
    assert b"a durable SUBSCRIBE needs an 'id' header" in error.body
    assert not [name for name in stomp_node.broker.queues if "audit" in name]


@pytest.mark.parametrize(
    ("headers", "offered"),
    [
        ({}, "0,0"),
        ({"heart-beat": "0,0"}, "0,0"),
        ({"heart-beat": "1000,0"}, "0,20000"),
        ({"heart-beat": "0,1000"}, "20000,0"),
        ({"heart-beat": "1000,1000"}, "20000,20000"),
    ],
)
@pytest.mark.parametrize("version", ["1.0", "1.2"])
@pytest_twisted.ensureDeferred
async def test_connected_offers_heart_beats_only_where_they_will_flow(
    make_node, version, headers, offered
):
    node = await make_node(settings=StompSettings(ttl=60.0, heart_beat=20.0))
    client = await node.raw()
    if version == "1.0":
        hb = "".join(f"heart-beat:{v}\n" for v in headers.values())
        client.write(f"CONNECT\n{hb}\n\x00".encode())
        frame = await client.next("CONNECTED")
    else:
        frame = await client.connect(version, **headers)
    assert frame.header("heart-beat") == offered
