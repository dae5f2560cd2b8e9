"""A graceful drain under load: three node processes in one [cluster] (each with a host id
of its own, so the ring's map gives a the list b, c); two pairs of a traced producer
(durable and non-durable sends alternating, each with a duplicate id) and a traced
consumer, each pair on a queue of its own, work through node a: one pair given a's and
b's URLs, the other a's alone (they follow the map a sends them). Both pairs share one
drain, so one set of nodes and one audit prove both cases. ``txbridge ctl node drain`` on
a while the producers send (each consumer took a few messages, then takes none until a is
drained, so that a always has messages of both queues to move). Node a tells its clients
it serves nothing, closes its acceptor and their connections, moves both queues to b over
bridges, and ends with status 0; every client carries on with b. Every message is
received, a repeat only of a durable one and flagged as a redelivery, and the audit of the
clients' event logs finds nothing lost and no unexpected message, for each producer."""

from __future__ import annotations

import re
import time
from pathlib import Path

import attrs
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
from tests.system.audit_run import audit, check_failover
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
QUEUES = {"a and b": "orders", "a alone": "invoices"}
"""Each pair's queue, by the URLs its clients are given."""


def member(name: str, ports: dict[str, int]) -> dict[str, object]:
    return node_document(
        name,
        acceptor=[{"name": "core", "url": f"tcp://127.0.0.1:{ports[name]}", "protocols": ["core"]}],
        address=[{"name": queue, "routing": "anycast"} for queue in QUEUES.values()],
        cluster={
            "name": "eu",
            "user": "cluster",
            "members": [f"tcp://127.0.0.1:{ports[each]}" for each in sorted(ports)],
            "host-id": f"host-{name}",
        },
    )


async def produce(
    client: Client, queue: str, producer: str, settled: list[ClientError | None]
) -> None:
    """Durable (even) and non-durable (odd) sends, each with a duplicate id, paced."""
    for seq in range(COUNT):
        if not client.is_writable:
            await client.when_writable()
        client.send_nowait(
            queue,
            b"%d" % seq,
            {events.TRACE_PRODUCER: producer, events.TRACE_SEQ: seq},
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


@attrs.define
class Pair:
    """One case: a traced producer and consumer of ``queue``, working through the URLs
    they were given, as ``producer-NAME`` and ``consumer-NAME`` in the run's event logs."""

    queue: str
    producer: str
    traces: tuple[events.EventWriter, ...]
    reader: Client
    writer: Client
    received: list[tuple[int, bool]] = attrs.Factory(list)
    settled: list[ClientError | None] = attrs.Factory(list)
    go_on: Deferred[None] = attrs.Factory(Deferred)
    consuming: Deferred[None] = attrs.field(init=False)
    producing: Deferred[None] = attrs.field(init=False)

    @classmethod
    async def start(cls, run_dir: Path, name: str, queue: str, urls: list[str]) -> Pair:
        traces = tuple(
            events.EventWriter(run_dir, "drain", f"{role}-{name}")
            for role in ("producer", "consumer")
        )
        reader = await connect(reactor, urls, reconnect=QUICK, trace=traces[1])
        writer = await connect(reactor, urls, reconnect=QUICK, trace=traces[0])
        pair = cls(queue, f"producer-{name}", traces, reader, writer)
        consumer = await reader.consumer(queue, window_size=0)
        pair.consuming = Deferred.fromCoroutine(consume(consumer, pair.received, pair.go_on))
        pair.producing = Deferred.fromCoroutine(produce(writer, queue, pair.producer, pair.settled))
        return pair

    def mapped(self) -> bool:
        """Both clients hold a's map: b and c linked with a."""
        return members_known(self.writer) == members_known(self.reader) == list("abc")

    def preloaded(self) -> bool:
        return len(self.settled) >= PRELOAD and len(self.received) == TAKEN

    def all_settled(self) -> bool:
        return len(self.settled) == COUNT

    async def close(self) -> None:
        await self.writer.close()
        await self.reader.close()
        for each in self.traces:
            await deferToThread(each.close)


@pytest.mark.system
@pytest.mark.timeout(400)
@pytest_twisted.ensureDeferred
async def test_a_drained_node_moves_its_messages_and_clients_to_its_first_failover_node(
    nodes, tmp_path: Path, capsys, spark
) -> None:
    ports = {name: free_port() for name in ("a", "b", "c")}
    a, b, c = (nodes(member(name, ports), name=name) for name in ("a", "b", "c"))
    for node in (a, b, c):
        await node.wait_started(SLACK)
    given = {"a and b": [a.core_url, b.core_url], "a alone": [a.core_url]}

    run_dir = tmp_path / "run"
    pairs: dict[str, Pair] = {}
    try:
        for case, queue in QUEUES.items():
            pairs[case] = await Pair.start(run_dir, case.replace(" ", "-"), queue, given[case])
        for pair in pairs.values():
            await eventually(pair.mapped)
            await eventually(pair.preloaded, SLACK)
            # so each producer's first sends were confirmed by a (the audit's per_node
            # figures are the run's, both pairs together)
            assert (pair.reader.node_name, pair.writer.node_name) == ("a", "a")
        for pair in pairs.values():
            assert len(pair.settled) < COUNT, "the producer finished before the drain: slow it down"
        argv = ["ctl", "--url", a.management_url, "node", "drain", "--timeout", str(SLACK)]
        assert await deferToThread(main, argv) == 0, capsys.readouterr().err
        moved = re.search(
            r"drained to b: (\d+) message\(s\) from (\d+) queue", capsys.readouterr().out
        )
        assert moved is not None and int(moved.group(1)) > 0, a.output
        assert int(moved.group(2)) == len(pairs), a.output  # each pair's queue had some
        ended: Deferred[int | None] = Deferred()
        a.ended.addBoth(lambda code: (ended.callback(code), code)[1])
        assert await ended.addTimeout(SLACK, reactor) == 0, a.output
        assert "node a: drained to b" in a.output
        for pair in pairs.values():
            # The consumer takes again once it is b's (a demand for one message made while
            # the client has no connection is not made again when it reconnects).
            await consumed_at(b.management_url, pair.queue)
            pair.go_on.callback(None)

        for case, pair in pairs.items():
            await pair.producing
            await eventually(pair.all_settled, timeout=SLACK)
            assert pair.settled == [None] * COUNT, [error for error in pair.settled if error][:3]
            await pair.consuming.addTimeout(SLACK, reactor)
            urls = (str(pair.reader.url), str(pair.writer.url))
            assert urls == (b.core_url, b.core_url), case  # both moved
            assert (pair.reader.node_name, pair.writer.node_name) == ("b", "b"), case
        assert "a (serves nothing; fails over to b, c)" in a.output  # its last TOPOLOGY
    finally:
        for pair in pairs.values():
            await pair.close()

    for case, pair in pairs.items():
        seen: set[int] = set()
        for seq, redelivered in pair.received:
            if seq in seen:
                assert seq % 2 == 0, f"{case}: non-durable message {seq} was delivered twice"
                assert redelivered, f"{case}: message {seq} came twice, the second time not flagged"
            seen.add(seq)
    assert "fails over to b, c" in a.output  # the ring's map, from the view it learnt
    report = await deferToThread(audit, spark, run_dir)
    for pair in pairs.values():
        check_failover(report, COUNT, pair.received, producer=pair.producer)
    assert report["delivery"]["unexpected"] == 0, report["delivery"]["examples"]
