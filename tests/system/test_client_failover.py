"""The core client rides over a real node killed with -9 and restarted on the same port:
its reconnect policy brings it back, unconfirmed sends go again (their duplicate ids make
the repeats harmless), its consumer is created again, and every message arrives, in
order, with every repeat flagged as a redelivery. (tests/client checks the same steps
against a node double; this is the real node process.)"""

from __future__ import annotations

import signal

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from bridge.client.api import Client, ReceivedMessage, connect
from bridge.client.errors import ClientError
from tests.forward.conftest import eventually
from tests.system.nodes import node_document
from transport.reconnect import ReconnectPolicy

COUNT = 3000
KILL_AFTER = 1000
"""Confirmed sends before the kill: the rest are sent while the node is down or back."""
LEAD = 200
"""The producer keeps at most this many messages ahead of the consumer, so that both are
busy when the node dies."""
QUICK = ReconnectPolicy(retry_interval=0.1, retry_interval_multiplier=1.0, max_retry_interval=0.1)


async def _produce(
    client: Client, settled: list[ClientError | None], received: list[tuple[int, bool]]
) -> None:
    for seq in range(COUNT):
        while seq - len(received) > LEAD:
            await deferLater(reactor, 0.005, lambda: None)
        if not client.is_writable:
            await client.when_writable()
        client.send_nowait(
            "orders",
            b"%d" % seq,
            {"seq": seq},
            duplicate_id=b"seq-%d" % seq,
            on_settled=settled.append,
        )


@pytest.mark.system
@pytest.mark.timeout(240)
@pytest_twisted.ensureDeferred
async def test_the_client_rides_over_a_node_killed_and_restarted(nodes):
    document = node_document(address=[{"name": "orders", "routing": "anycast"}])
    node = await nodes(document).wait_started()
    port = node.ports["core"]

    received: list[tuple[int, bool]] = []

    def on_message(message: ReceivedMessage) -> None:
        received.append((int(message.headers["seq"]), message.redelivered))
        message.ack()

    reader = await connect(reactor, node.core_url, reconnect=QUICK)
    await reader.consumer("orders", on_message=on_message)
    writer = await connect(reactor, node.core_url, reconnect=QUICK)
    settled: list[ClientError | None] = []
    producing = Deferred.fromCoroutine(_produce(writer, settled, received))
    try:
        await eventually(lambda: len(settled) >= KILL_AFTER, timeout=60)
        await node.stop(signal.SIGKILL)
        assert len(settled) < COUNT, "the producer finished before the kill: raise COUNT"
        document["acceptor"][0]["url"] = f"tcp://127.0.0.1:{port}"
        await nodes(document).wait_started()

        await producing
        await eventually(lambda: len(settled) == COUNT, timeout=120)
        assert settled == [None] * COUNT, [error for error in settled if error][:3]
        await eventually(lambda: len({seq for seq, _ in received}) == COUNT, timeout=120)
    finally:
        await writer.close()
        await reader.close()

    seen: set[int] = set()
    firsts: list[int] = []
    for seq, redelivered in received:
        if seq in seen:
            assert redelivered, f"message {seq} came twice, the second time not as a redelivery"
        else:
            seen.add(seq)
            firsts.append(seq)
    assert firsts == list(range(COUNT))
