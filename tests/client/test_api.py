"""The Twisted API against a scripted node double over loopback TCP (the real node's core
head is being written at the same time by another engineer; see node_double.py)."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred, DeferredList
from twisted.internet.protocol import Protocol, ServerFactory
from twisted.internet.task import deferLater

from bridge.client.api import ReceivedMessage, connect
from bridge.client.errors import (
    AuthenticationFailed,
    ClientClosed,
    ConnectionLost,
    NotFound,
    PermissionDenied,
)
from bridge.protocol import ErrorCode, Send, SendLargeChunk
from tests.client.node_double import NodeDouble
from transport.reconnect import ReconnectPolicy


async def turns(n: int = 3) -> None:
    for _ in range(n):
        await deferLater(reactor, 0, lambda: None)


async def until(test: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait (bounded) until ``test()`` holds, for what the node double sees."""
    deadline = reactor.seconds() + timeout
    while not test():
        assert reactor.seconds() < deadline, f"still not so after {timeout}s"
        await deferLater(reactor, 0.001, lambda: None)


@pytest_twisted.ensureDeferred
async def test_send_fires_on_confirmation_and_a_consumer_receives(node, clients):
    client = await clients(node.url)
    assert client.node_name == "double"
    await client.create_queue("orders")
    await client.send("orders", b"hello", {"colour": "red"}, duplicate_id=b"o-1")
    consumer = await client.consumer("orders")
    message = await consumer.receive()
    assert (message.body, message.headers, message.address) == (
        b"hello",
        {"colour": "red"},
        "orders",
    )
    assert (message.delivery_count, message.duplicate_id, message.is_large) == (1, b"o-1", False)
    message.ack()
    await consumer.close()


@pytest_twisted.ensureDeferred
async def test_a_refused_send_fails_its_deferred_with_the_nodes_words(node, clients):
    node.refuse_sends["secret"] = (ErrorCode.PERMISSION_DENIED, "user alice lacks send on secret")
    client = await clients(node.url)
    with pytest.raises(PermissionDenied, match=r"send to 'secret' refused .*lacks send on secret"):
        await client.send("secret", b"x")


@pytest_twisted.ensureDeferred
async def test_send_nowait_calls_back_once_per_send(node, clients):
    client = await clients(node.url)
    heard: list[object] = []
    for n in range(100):
        client.send_nowait("bulk", b"%d" % n, on_settled=heard.append)
    await client.send("bulk", b"last")
    assert heard == [None] * 100
    assert client.unconfirmed == 0


@pytest_twisted.ensureDeferred
async def test_a_refused_login(node):
    node.password = "right"
    with pytest.raises(AuthenticationFailed, match=r"login as 'alice' refused .*bad password"):
        await connect(reactor, node.url, user="alice", password="wrong")


@pytest_twisted.ensureDeferred
async def test_no_node_no_client():
    port = NodeDouble()
    url = await port.listen(reactor)
    await port.stop()
    with pytest.raises(ConnectionLost, match=r"connection to tcp://127.0.0.1"):
        await connect(reactor, url)


@pytest_twisted.ensureDeferred
async def test_a_consumer_of_a_missing_queue_fails(node, clients):
    client = await clients(node.url)
    with pytest.raises(NotFound, match="consumer on queue 'nope' refused"):
        await client.consumer("nope")


@pytest_twisted.ensureDeferred
async def test_on_message_nack_and_redelivery_count(node, clients):
    client = await clients(node.url)
    await client.create_queue("q")
    got: list[ReceivedMessage] = []
    consumer = await client.consumer("q", on_message=got.append)
    await client.send("q", b"again")
    await until(lambda: got)
    got[0].nack()
    await until(lambda: len(got) >= 2)
    assert [m.delivery_count for m in got] == [1, 2]
    got[1].ack()
    await consumer.close()


@pytest_twisted.ensureDeferred
async def test_browse_only_leaves_messages_queued(node, clients):
    client = await clients(node.url)
    await client.create_queue("q")
    await client.send("q", b"look")
    browser = await client.consumer("q", browse_only=True)
    assert (await browser.receive()).body == b"look"
    await browser.close()
    taker = await client.consumer("q")
    (await taker.receive()).ack()
    assert not node.queues["q"]


@pytest_twisted.ensureDeferred
async def test_transactions_commit_and_rollback(node, clients):
    client = await clients(node.url)
    await client.create_queue("q")
    tx = await client.begin()
    await client.send("q", b"kept", tx=tx)
    assert not node.queues["q"]
    await tx.commit()
    assert [q.message.body for q in node.queues["q"]] == [b"kept"]
    tx = await client.begin()
    await client.send("q", b"dropped", tx=tx)
    await tx.rollback()
    assert [q.message.body for q in node.queues["q"]] == [b"kept"]


@pytest_twisted.ensureDeferred
async def test_a_large_message_goes_in_chunks_and_comes_back_spooled(node, clients):
    node.large_delivery_size = 10
    client = await clients(node.url, min_large_message_size=10)
    await client.create_queue("files")
    await client.send("files", io.BytesIO(b"a body from a file"))
    assert any(isinstance(p, SendLargeChunk) for p in node.received)
    assert not any(isinstance(p, Send) for p in node.received)
    message = await (await client.consumer("files")).receive()
    assert message.is_large
    assert message.body_file.read() == b"a body from a file"
    assert message.body == b"a body from a file"
    message.ack()


@pytest_twisted.ensureDeferred
async def test_writability_follows_the_confirmation_window(node, clients):
    node.hold_confirms = True
    client = await clients(node.url, confirmation_window_size=100)
    assert client.is_writable
    client.send_nowait("q", bytes(100))
    assert not client.is_writable
    writable = client.when_writable()
    await turns()
    assert not writable.called
    node.connections[0].confirm_held()
    await writable
    assert client.is_writable and client.address_writable("q")


@pytest_twisted.ensureDeferred
async def test_after_a_drop_unconfirmed_sends_are_resent_and_consumers_come_back(node, clients):
    client = await clients(
        node.url, reconnect=ReconnectPolicy(retry_interval=0, max_retry_interval=0)
    )
    await client.create_queue("q")
    consumer = await client.consumer("q")
    node.hold_confirms = True
    sent = client.send("q", b"resent", duplicate_id=b"r-1")
    await until(lambda: any(isinstance(p, Send) for p in node.received))  # held, unconfirmed
    node.hold_confirms = False
    node.connections[0].drop()
    await sent
    assert len(node.connections) == 2
    resent = [p.message.duplicate_id for p in node.received if isinstance(p, Send)]
    assert resent == [b"r-1", b"r-1"]  # the real node drops the repeat by its id
    message = await consumer.receive()
    assert message.body == b"resent"
    message.ack()


@pytest_twisted.ensureDeferred
async def test_a_drop_without_reconnects_fails_what_is_pending(node):
    client = await connect(reactor, node.url)
    await client.create_queue("idle")
    consumer = await client.consumer("idle")
    node.hold_confirms = True
    sent = client.send("q", b"lost")
    waiting = consumer.receive()
    await turns()
    node.connections[0].drop()
    results = await DeferredList([sent, waiting], consumeErrors=True)
    for ok, failure in results:
        assert not ok
        failure.trap(ConnectionLost)
        assert "reconnect-attempts is 0" in str(failure.value)
    await client.close()


@pytest_twisted.ensureDeferred
async def test_close_fails_waiting_receives(node):
    client = await connect(reactor, node.url)
    await client.create_queue("q")
    consumer = await client.consumer("q")
    waiting: Deferred[ReceivedMessage] = consumer.receive()
    await client.close()
    with pytest.raises(ClientClosed):
        await waiting
    with pytest.raises(ClientClosed):
        await client.send("q", b"late")


class _Silent(Protocol):
    """Accepts and never answers: a node that hangs before CONNECTED."""

    def __init__(self, lost: Deferred[None]) -> None:
        self.lost = lost

    def connectionLost(self, reason: object = None) -> None:
        self.lost.callback(None)


@pytest_twisted.ensureDeferred
async def test_cancelling_a_connect_stops_its_attempts_and_closes_its_connection():
    """A caller that stops waiting (a bridge stopped while connecting) leaves nothing
    behind: no retry timer of a node that is down, no connection to one that hangs."""
    down = NodeDouble()
    url = await down.listen(reactor)
    await down.stop()
    retrying = connect(reactor, url, reconnect=ReconnectPolicy(0.05, 1.0, 0.05, -1))
    await deferLater(reactor, 0.2, lambda: None)
    retrying.cancel()
    with pytest.raises(CancelledError):
        await retrying

    lost: Deferred[None] = Deferred()
    factory = ServerFactory.forProtocol(lambda: _Silent(lost))
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    try:
        hanging = connect(reactor, f"tcp://127.0.0.1:{port.getHost().port}")
        await deferLater(reactor, 0.2, lambda: None)
        hanging.cancel()
        with pytest.raises(CancelledError):
            await hanging
        await lost
    finally:
        await port.stopListening()
