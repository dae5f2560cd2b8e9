"""Kill -9 of a node process while a producer streams durable sends and a consumer
acknowledges: after a restart nothing confirmed is lost and nothing whose acknowledgement
was confirmed comes back. The clients are the project's own (Twisted API)."""

from __future__ import annotations

import signal

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from bridge.client.api import connect
from bridge.client.errors import ClientError
from tests.system.nodes import node_document

SENDS = 100_000
KILL_AFTER = 2000
ACKED = 100
AHEAD = 20


@pytest_twisted.ensureDeferred
async def test_nothing_confirmed_is_lost_and_nothing_acknowledged_returns(nodes):
    document = node_document(address=[{"name": "orders", "routing": "anycast"}])
    node = await nodes(document).wait_started()

    consumer_client = await connect(reactor, node.core_url)
    consumer = await consumer_client.consumer("orders")
    producer = await connect(reactor, node.core_url)

    confirmed: set[int] = set()
    acknowledged: set[int] = set()
    ready: Deferred[None] = Deferred()
    killed = False

    def check_ready() -> None:
        if len(confirmed) >= KILL_AFTER and len(acknowledged) >= ACKED and not ready.called:
            ready.callback(None)

    def settled(number: int, error: ClientError | None) -> None:
        if error is None:
            confirmed.add(number)
            check_ready()

    async def produce() -> None:
        """Send until the node dies under it, at most AHEAD messages per acknowledgement
        beyond the first KILL_AFTER (bounded by SENDS)."""
        for number in range(SENDS):
            try:
                while number >= KILL_AFTER + AHEAD * len(acknowledged):
                    # Keep pace with the consumer, so both are busy when the node dies.
                    if killed:
                        return
                    await deferLater(reactor, 0.01, lambda: None)
                if not producer.is_writable:
                    await producer.when_writable()
                producer.send_nowait(
                    "orders",
                    b"%06d" % number,
                    on_settled=lambda error, number=number: settled(number, error),
                )
            except ClientError:
                return

    async def consume() -> None:
        """Acknowledge durably, one at a time, until the node dies under it."""
        try:
            while True:
                message = await consumer.receive()
                await message.ack_durably()
                acknowledged.add(int(message.body))
                check_ready()
        except ClientError:
            return

    producing = Deferred.fromCoroutine(produce())
    consuming = Deferred.fromCoroutine(consume())
    ready.addTimeout(120, reactor)
    await ready
    assert not producing.called, "the producer finished before the kill: raise SENDS"
    killed = True
    await node.stop(signal.SIGKILL)
    assert node.signal == signal.SIGKILL
    await producing
    await consuming
    for client in (producer, consumer_client):
        await client.close()

    restarted = await nodes(document, name="node").wait_started()
    reader = await connect(reactor, restarted.core_url)
    consumer = await reader.consumer("orders")
    recovered: dict[int, int] = {}
    while True:
        waiting = consumer.receive()
        waiting.addTimeout(2, reactor)
        try:
            message = await waiting
        except Exception:  # the queue is drained: no message within 2 s
            break
        recovered[int(message.body)] = message.delivery_count
        message.ack()
    await reader.close()

    assert len(confirmed) >= KILL_AFTER
    assert not (acknowledged & recovered.keys()), "an acknowledged message came back"
    lost = confirmed - acknowledged - recovered.keys()
    assert not lost, f"{len(lost)} confirmed messages lost, e.g. {sorted(lost)[:5]}"
    in_order = sorted(recovered)
    assert list(recovered) == in_order, "recovered out of order"


@pytest_twisted.ensureDeferred
async def test_sigterm_returns_unacknowledged_deliveries_counted(nodes):
    document = node_document(address=[{"name": "jobs", "routing": "anycast"}])
    node = await nodes(document).wait_started()
    client = await connect(reactor, node.core_url)
    for number in range(5):
        await client.send("jobs", b"job %d" % number)
    consumer = await client.consumer("jobs")
    taken = [await consumer.receive() for _ in range(5)]
    await taken[0].ack_durably()
    await node.stop(signal.SIGTERM)
    assert node.signal == signal.SIGTERM
    assert "node a stopped" in node.output
    await client.close()

    restarted = await nodes(document).wait_started()
    client = await connect(reactor, restarted.core_url)
    consumer = await client.consumer("jobs")
    again = [await consumer.receive() for _ in range(4)]
    assert [(m.body, m.delivery_count) for m in again] == [
        (b"job %d" % number, 2) for number in range(1, 5)
    ]
    await client.close()
