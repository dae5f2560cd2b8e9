"""A core client given the URLs of both nodes of a pair follows a kill -9 of the live node
to the backup, which listens on a port of its own: a producer sending durable messages
with duplicate ids and a consumer acknowledging them carry on with the backup; every send
is confirmed, every message arrives, and a repeat comes as a redelivery."""

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
from tests.postgresql import schema_url
from tests.system.bridges import free_port
from tests.system.ha import PING, REAP, SLACK, ha_node
from transport.reconnect import ReconnectPolicy

COUNT = 2000
KILL_AFTER = 600
LEAD = 200
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
@pytest.mark.timeout(300)
@pytest_twisted.ensureDeferred
async def test_a_client_with_both_urls_follows_a_kill_9_to_the_backup(pg_schema, nodes):
    url = schema_url(pg_schema)
    ports = {"a": free_port(), "b": free_port()}
    processes = {}
    for name, role in (("a", "primary"), ("b", "backup")):
        document = ha_node(name, url, f"shared-store-{role}")
        document["acceptor"][0]["url"] = f"tcp://127.0.0.1:{ports[name]}"
        processes[name] = nodes(document, name=name)
        if name == "a":
            await processes["a"].wait_for(r"node a: LIVE, epoch 1", SLACK)
    a, b = processes["a"], processes["b"]
    await b.wait_for(r"node b: live is a, epoch 1", SLACK)
    urls = [f"tcp://127.0.0.1:{ports[name]}" for name in ("a", "b")]

    received: list[tuple[int, bool]] = []

    def on_message(message: ReceivedMessage) -> None:
        received.append((int(message.headers["seq"]), message.redelivered))
        message.ack()

    reader = await connect(reactor, urls, reconnect=QUICK)
    await reader.consumer("orders", on_message=on_message)
    writer = await connect(reactor, urls, reconnect=QUICK)
    assert (reader.url, writer.url) == (reader.urls[0], writer.urls[0])
    settled: list[ClientError | None] = []
    producing = Deferred.fromCoroutine(_produce(writer, settled, received))
    try:
        await eventually(lambda: len(settled) >= KILL_AFTER, timeout=120)
        live = b.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK)
        await a.stop(signal.SIGKILL)
        assert len(settled) < COUNT, "the producer finished before the kill: raise COUNT"
        await live
        await producing
        await eventually(lambda: len(settled) == COUNT, timeout=120)
        assert settled == [None] * COUNT, [error for error in settled if error][:3]
        await eventually(lambda: len({seq for seq, _ in received}) == COUNT, timeout=120)
        assert (reader.url, writer.url) == (reader.urls[1], writer.urls[1])
    finally:
        await writer.close()
        await reader.close()

    seen: set[int] = set()
    for seq, redelivered in received:
        if seq in seen:
            assert redelivered, f"message {seq} came twice, the second time not as a redelivery"
        seen.add(seq)
    assert seen == set(range(COUNT))
