"""Large STOMP bodies: a SEND body from ``min_large`` on is streamed to the large-message
store (so the default limit is far above the 4 MiB of a body held whole), and a large
message goes to a STOMP subscriber streamed from its file, with the frames sent meanwhile
behind it. A refused or interrupted large SEND leaves no body file."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest_twisted
from twisted.internet import reactor

from bridge.client.api import connect
from bridge.heads.stomp import StompSettings
from bridge.heads.stomp.frames import Limits
from tests.heads.conftest import eventually
from tests.heads.stomp.conftest import StompNode
from tests.store.conftest import deletion_threads

MIB = 1024 * 1024


def body_of(size: int) -> bytes:
    """``size`` bytes that differ from page to page, so a lost or repeated page shows;
    NULs only in each page's number (stomp.py's reader copies its buffer at each NUL)."""
    page = (bytes(range(1, 256)) * 258)[: 64 * 1024]
    return b"".join(i.to_bytes(4, "big") + page[4:] for i in range(size // len(page) + 1))[:size]


def large_files(node: StompNode) -> list[Path]:
    return list((node.path / "data" / "large-messages").glob("*"))


@pytest_twisted.ensureDeferred
async def test_a_twenty_mebibyte_body_is_streamed_through_the_store_and_back(stomp_node):
    assert stomp_node.head is not None
    assert StompSettings().limits.max_body == 4 * MIB  # what a body held whole may be
    body = body_of(20 * MIB + 7)
    producer = await stomp_node.client()
    await producer.confirmed_send("/queue/big", body, persistent="true", kind="huge")
    [entry] = stomp_node.broker.queue("big").browse()
    assert entry.message.large is not None and entry.message.body == b""
    assert entry.message.large.size == len(body)
    consumer = await stomp_node.client()
    await consumer.call("subscribe", "/queue/big", id="s", ack="client-individual")
    [message] = await consumer.messages(1)
    assert hashlib.sha256(message.body).digest() == hashlib.sha256(body).digest()
    assert message.headers["kind"] == "huge"
    assert message.headers["content-length"] == str(len(body))
    await consumer.ack(message)
    await eventually(lambda: large_files(stomp_node) == [])


@pytest_twisted.ensureDeferred
async def test_a_core_large_message_reaches_a_stomp_subscriber_whole(stomp_node):
    body = body_of(3 * MIB)
    consumer = await stomp_node.client()
    await consumer.call("subscribe", "/queue/up", id="s", headers={"receipt": "r"})
    await consumer.receipt("r")
    client = await connect(reactor, stomp_node.core_url)
    try:
        await client.send("up", body, {"from": "core"}, durable=True)
    finally:
        await client.close()
    [message] = await consumer.messages(1)
    assert message.body == body and message.headers["from"] == "core"


@pytest_twisted.ensureDeferred
async def test_frames_sent_while_a_large_body_goes_out_follow_it_intact(stomp_node):
    """Two large messages and small ones to one connection: every MESSAGE arrives whole
    and in order (the raw client's parser checks each frame's length and NUL), and so
    does a receipt asked for while they go out."""
    raw = await stomp_node.raw()
    await raw.connect()
    raw.send("SUBSCRIBE", {"id": "1", "destination": "/queue/mix", "receipt": "sub"})
    await raw.receipt("sub")
    producer = await stomp_node.client()
    bodies = [body_of(MIB), b"small", body_of(2 * MIB + 3), b"tiny"]
    for body in bodies:
        await producer.send("/queue/mix", body)
    await raw.until(lambda: len(raw.of("MESSAGE")) >= 1)
    raw.send("SUBSCRIBE", {"id": "2", "destination": "/queue/other", "receipt": "late"})
    await raw.receipt("late")
    await raw.until(lambda: len(raw.of("MESSAGE")) >= 4)
    assert [frame.body for frame in raw.of("MESSAGE")] == bodies


@pytest_twisted.ensureDeferred
async def test_an_auto_acknowledged_body_read_out_goes_once_sent_off_the_reactor(
    stomp_node, monkeypatch
):
    """An ``ack:auto`` delivery is acknowledged as it starts, so its body is discarded
    while it is still being read out: the file stays until the body is out, then goes on
    the store's writer thread (freeing 10 MiB takes about 2 ms the reactor does not wait
    for; a file kept to be written over must not be written over while it is read)."""
    deleted_on = deletion_threads(stomp_node.broker.store, monkeypatch)
    raw = await stomp_node.raw()
    await raw.connect()
    raw.send("SUBSCRIBE", {"id": "1", "destination": "/queue/auto", "receipt": "sub"})
    await raw.receipt("sub")
    assert raw.transport is not None
    raw.transport.pauseProducing()  # far more than the sockets hold waits in the node
    body = body_of(24 * MIB)
    producer = await stomp_node.client()
    await producer.confirmed_send("/queue/auto", body, persistent="true")
    queue = stomp_node.broker.queue("auto")
    await eventually(lambda: queue.depth == 0)  # acknowledged, still being read out
    assert len(large_files(stomp_node)) == 1 and deleted_on == []
    raw.transport.resumeProducing()
    message = await raw.next("MESSAGE")
    assert hashlib.sha256(message.body).digest() == hashlib.sha256(body).digest()
    await eventually(lambda: deleted_on != [] and large_files(stomp_node) == [])
    assert deleted_on == [deleted_on[0]] and deleted_on[0] != threading.main_thread().name


@pytest_twisted.ensureDeferred
async def test_a_refused_large_send_is_refused_before_its_body_and_leaves_no_file(stomp_node):
    raw = await stomp_node.raw()
    await raw.connect()
    raw.write(b"SEND\ndestination:/queue/x\ntransaction:none\ncontent-length:500000\n\n")
    error = await raw.error()
    assert error.header("message") == "no such transaction"
    assert large_files(stomp_node) == []


@pytest_twisted.ensureDeferred
async def test_a_large_send_cut_off_midway_leaves_no_file_and_no_message(stomp_node):
    raw = await stomp_node.raw()
    await raw.connect()
    raw.write(b"SEND\ndestination:/queue/cut\ncontent-length:500000\n\n" + b"x" * 300_000)
    await eventually(lambda: len(large_files(stomp_node)) == 1)
    await raw.close()
    await eventually(lambda: large_files(stomp_node) == [])
    assert stomp_node.broker.queue("cut").depth == 0


@pytest_twisted.ensureDeferred
async def test_the_streamed_body_limit_is_refused_from_the_content_length(make_node):
    limits = Limits(max_body=1024, min_large=2048, max_large=MIB)
    node = await make_node(settings=StompSettings(limits=limits, ttl=None))
    raw = await node.raw()
    await raw.connect()
    raw.write(b"SEND\ndestination:/queue/a\ncontent-length:1048577\n\n")
    error = await raw.error()
    assert error.header("message") == "frame too large"
    assert b"1048577 bytes exceeds the limit of 1048576 bytes" in error.body


@pytest_twisted.ensureDeferred
async def test_large_sends_in_a_transaction_take_effect_at_commit_or_leave_no_file(stomp_node):
    client = await stomp_node.client()
    body = body_of(MIB)
    await client.call("begin", "t1")
    await client.send("/queue/tx", body, transaction="t1")
    await client.call("abort", "t1", headers={"receipt": "aborted"})
    await client.receipt("aborted")
    await eventually(lambda: large_files(stomp_node) == [])
    await client.call("begin", "t2")
    await client.send("/queue/tx", body, transaction="t2", persistent="true")
    assert stomp_node.broker.queue("tx").depth == 0
    await client.call("commit", "t2", headers={"receipt": "committed"})
    await client.receipt("committed")
    [entry] = stomp_node.broker.queue("tx").browse()
    assert entry.message.large is not None and entry.message.large.size == len(body)


@pytest_twisted.ensureDeferred
async def test_a_stomp_large_send_reaches_a_core_consumer_as_a_large_delivery(stomp_node):
    body = body_of(2 * MIB + 1)
    producer = await stomp_node.client()
    await producer.confirmed_send("/queue/down", body, persistent="true", origin="stomp")
    client = await connect(reactor, stomp_node.core_url)
    try:
        consumer = await client.consumer("down")
        message = await consumer.receive().addTimeout(30, reactor)
        assert message.is_large and message.headers["origin"] == "stomp"
        assert message.body_file.read() == body
        await message.ack_durably()
    finally:
        await client.close()
    await eventually(lambda: large_files(stomp_node) == [])
