"""A graceful drain under load: three node processes in one [cluster] (each with a host id
of its own, so the ring's map gives a the list b, c); a traced producer (durable and
non-durable sends alternating, each with a duplicate id) and a traced consumer work
through node a, given a's and b's URLs, or a's alone (they follow the map a sends them);
``txbridge ctl node drain`` on a while the producer sends (the consumer took a few
messages, then takes none until a is drained, so that a always has messages to move).
Node a tells its clients it serves nothing, closes its acceptor and their connections,
moves its queue to b over a bridge, and ends with status 0; both clients carry on with b.
Every message is received, a repeat only of a durable one and flagged as a redelivery,
and the audit of the clients' event logs finds nothing lost and no unexpected message."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from bridge import events
from bridge.client.api import Client, Consumer, connect
from bridge.client.errors import ClientError
from bridge.ctl.main import main
from bridge.ctl.status import ManagementClient, fetch_status
from tests.forward.conftest import eventually
from tests.system.audit_run import audit, check_failover, require_spark
from tests.system.bridges import free_port
from tests.system.nodes import node_document
from transport.reconnect import ReconnectPolicy

COUNT = 2000
PRELOAD = 600
"""Sends confirmed before the drain; the producer goes on through it."""
TAKEN = 50
"""Messages the consumer takes from a before it stops taking until a is drained: the
rest of what a holds then is what the drain moves (it always has some to move)."""
PACE = 0.002
"""Seconds between two sends, so that the producer is still sending while a drains."""
QUICK = ReconnectPolicy(retry_interval=0.1, retry_interval_multiplier=1.0, max_retry_interval=0.1)
SLACK = 60.0
"""For a loaded box: a process's start, the drain of a queue of a few hundred messages."""


def member(name: str, ports: dict[str, int]) -> dict[str, object]:
    return node_document(
        name,
        acceptor=[{"name": "core", "url": f"tcp://127.0.0.1:{ports[name]}", "protocols": ["core"]}],
        address=[{"name": "orders", "routing": "anycast"}],
        cluster={
            "name": "eu",
            "user": "cluster",
            "members": [f"tcp://127.0.0.1:{ports[each]}" for each in sorted(ports)],
            "host-id": f"host-{name}",
        },
    )


async def produce(client: Client, settled: list[ClientError | None]) -> None:
    """Durable (even) and non-durable (odd) sends, each with a duplicate id, paced."""
    for seq in range(COUNT):
        if not client.is_writable:
            await client.when_writable()
        client.send_nowait(
            "orders",
            b"%d" % seq,
            {events.TRACE_PRODUCER: "producer", events.TRACE_SEQ: seq},
            durable=seq % 2 == 0,
            duplicate_id=b"seq-%d" % seq,
            on_settled=settled.append,
        )
        await deferLater(reactor, PACE, lambda: None)


async def consume(
    consumer: Consumer, received: list[tuple[int, bool]], go_on: Deferred[None]
) -> None:
    """Take TAKEN messages (one at a time: nothing waits in the client), wait for
    ``go_on``, then take until every sequence number came."""
    while len({seq for seq, _ in received}) < COUNT:
        if len(received) == TAKEN:
            await go_on
        message = await consumer.receive()
        received.append((int(message.headers[events.TRACE_SEQ]), message.redelivered))
        message.ack()


async def consumed_at(url: str, queue: str) -> None:
    """Wait (bounded) until the node's ``/status`` shows a consumer of ``queue``."""
    client = ManagementClient(url)
    deadline = time.monotonic() + SLACK
    while not any(
        each.name == queue and each.consumers
        for each in (await deferToThread(fetch_status, client)).queues
    ):
        assert time.monotonic() < deadline, f"no consumer of {queue} at {url}"
        await deferLater(reactor, 0.05, lambda: None)


def members_known(client: Client) -> list[str]:
    return [] if client.topology is None else [m.node_id for m in client.topology.members]


@pytest.mark.system
@pytest.mark.timeout(400)
@pytest.mark.parametrize("given", ["a and b", "a alone"])
@pytest_twisted.ensureDeferred
async def test_a_drained_node_moves_its_messages_and_clients_to_its_first_failover_node(
    nodes, tmp_path: Path, capsys, given: str
) -> None:
    require_spark()
    ports = {name: free_port() for name in ("a", "b", "c")}
    a, b, c = (nodes(member(name, ports), name=name) for name in ("a", "b", "c"))
    for node in (a, b, c):
        await node.wait_started(SLACK)
    urls = [a.core_url, b.core_url] if given == "a and b" else [a.core_url]

    run_dir = tmp_path / "run"
    writers = [events.EventWriter(run_dir, "drain", name) for name in ("producer", "consumer")]
    received: list[tuple[int, bool]] = []
    settled: list[ClientError | None] = []
    go_on: Deferred[None] = Deferred()
    reader = await connect(reactor, urls, reconnect=QUICK, trace=writers[1])
    writer = await connect(reactor, urls, reconnect=QUICK, trace=writers[0])
    consuming = Deferred.fromCoroutine(
        consume(await reader.consumer("orders", window_size=0), received, go_on)
    )
    producing = Deferred.fromCoroutine(produce(writer, settled))
    try:
        # a's map, as its clients hold it: b and c linked with a
        await eventually(lambda: members_known(writer) == members_known(reader) == list("abc"))
        await eventually(lambda: len(settled) >= PRELOAD and len(received) == TAKEN, SLACK)
        assert len(settled) < COUNT, "the producer finished before the drain: slow it down"
        argv = ["ctl", "--url", a.management_url, "node", "drain", "--timeout", str(SLACK)]
        assert await deferToThread(main, argv) == 0, capsys.readouterr().err
        moved = re.search(r"drained to b: (\d+) message", capsys.readouterr().out)
        assert moved is not None and int(moved.group(1)) > 0, a.output
        ended: Deferred[int | None] = Deferred()
        a.ended.addBoth(lambda code: (ended.callback(code), code)[1])
        assert await ended.addTimeout(SLACK, reactor) == 0, a.output
        assert "node a: drained to b" in a.output
        # The consumer takes again once it is b's (a demand for one message made while
        # the client has no connection is not made again when it reconnects).
        await consumed_at(b.management_url, "orders")
        go_on.callback(None)

        await producing
        await eventually(lambda: len(settled) == COUNT, timeout=SLACK)
        assert settled == [None] * COUNT, [error for error in settled if error][:3]
        await consuming.addTimeout(SLACK, reactor)
        assert (str(reader.url), str(writer.url)) == (b.core_url, b.core_url)  # both moved
        assert (reader.node_name, writer.node_name) == ("b", "b")
        assert "a (serves nothing; fails over to b, c)" in a.output  # its last TOPOLOGY
    finally:
        await writer.close()
        await reader.close()
        for each in writers:
            await deferToThread(each.close)

    seen: set[int] = set()
    for seq, redelivered in received:
        if seq in seen:
            assert seq % 2 == 0, f"non-durable message {seq} was delivered twice"
            assert redelivered, f"message {seq} came twice, the second time not flagged"
        seen.add(seq)
    assert "fails over to b, c" in a.output  # the ring's map, from the view it learnt
    check_failover(await deferToThread(audit, run_dir), COUNT, received)
