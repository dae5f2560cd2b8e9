"""A real network partition: nodes a (live) and b (backup) run on hosts of their own
(network namespaces), each reaching PostgreSQL through its link to the test's namespace.

The first test is about the nodes.
a's link is cut (``ip link set down``) while both nodes run, a producer's transaction
possibly in the middle of a store write: a loses the database, stops serving at its
deadline, and b takes the lease once it expired, ends a's sessions (left in the middle of
a transaction, holding row locks, they would keep b's store from loading), and serves
every message a confirmed. Never two live nodes at once, by the nodes' own logs (a's
"stops serving" stamped before b's "LIVE"). Healed, a comes back as b's backup and never
serves.

The second is about the clients: traced core clients given both nodes' URLs produce and
consume through a when its link is cut; they hear nothing for their TTL, find a
unreachable and carry on with b (an address that accepts but never logs them in would
not keep them either: the URL list moves on until a login is accepted). The audit of
their event logs finds nothing confirmed lost and every repeat flagged."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from bridge import events
from bridge.client.api import Client, ReceivedMessage, connect
from bridge.client.errors import ClientError
from bridge.ctl.logs import TIME_FORMAT
from tests.forward.conftest import eventually
from tests.ha.proxy import Cuttable
from tests.postgresql import SERVER, schema_url
from tests.system.audit_run import audit, check_failover
from tests.system.ha import PING, REAP, SLACK, ha_node, produce_traced
from tests.system.netns import Host, hosts, require_netns
from tests.system.nodes import NodeProcess
from transport.reconnect import ReconnectPolicy
from transport.settings import ConnectionSettings

PORT = 61616
"""Each host has ports of its own: both nodes listen on this one, at their own address."""
COUNT = 2000
CUT_AFTER = 600
LEAD = 200
QUICK = ReconnectPolicy(retry_interval=0.2, retry_interval_multiplier=1.0, max_retry_interval=0.2)
TTL = 3.0
"""The nodes' connection-ttl (they ping every third of it) and the clients': a client of
the cut-off node hears nothing for this long and moves on."""
B_LIVE = r"node b: LIVE, epoch (?!1\b)\d+"
"""b live at any epoch after a's first: an acquire whose answer outlasts
lease-query-timeout counts as failed and is tried again, though it may have raised the
epoch in the database (a loaded machine, the database behind the test's forwarders)."""
A_SEES_B_LIVE = r"node a: live is b, epoch (?!1\b)\d+"
CLIENT = ConnectionSettings(heartbeat_interval=TTL / 3, ttl=TTL)
WARM = 300
"""Confirmed sends before the cut; the load goes on until it."""
IN_FLIGHT = 100


class _Load:
    """Until the cut: durable sends to ``orders`` (kept for b) and to ``acked`` (acked at
    once by a consumer on a), at most IN_FLIGHT unconfirmed, so that a's store is in the
    middle of a transaction, with row locks, whenever the link goes."""

    def __init__(self, producer: Client) -> None:
        self.producer = producer
        self.confirmed: list[bytes] = []
        self.settled = 0
        self.cut: Deferred[None] = Deferred()

    def _settle(self, body: bytes, error: ClientError | None) -> None:
        self.settled += 1
        if error is None:
            self.confirmed.append(body)

    async def run(self, host: Host) -> None:
        """Send until ``cut`` fires (bounded), then cut ``host`` off."""
        sent = 0
        while not self.cut.called and sent < 1_000_000:
            if sent - self.settled >= IN_FLIGHT or not self.producer.is_writable:
                await deferLater(reactor, 0.001, lambda: None)
                continue
            body = b"%d" % sent
            self.producer.send_nowait("acked", body)
            self.producer.send_nowait(
                "orders", body, on_settled=lambda error, body=body: self._settle(body, error)
            )
            sent += 1
        host.cut()


def _document(name: str, policy: str, url: str, host: Host) -> dict[str, object]:
    document = ha_node(name, url, policy)
    document["acceptor"][0]["url"] = f"tcp://{host.address}:{PORT}"
    document["acceptor"][0]["connection-ttl"] = f"{round(TTL * 1000)}ms"
    document["management"] = {"url": f"http://{host.address}:0"}
    document["address"].append({"name": "acked", "routing": "anycast"})
    return document


def _stamp(output: str, pattern: str) -> datetime:
    """When the node logged the first line matching ``pattern``."""
    found = re.search(rf"^(\S+) \[[^\]]*\] {pattern}", output, re.MULTILINE)
    assert found is not None, f"no line {pattern!r} in:\n{output}"
    return datetime.strptime(found.group(1), TIME_FORMAT)


@attrs.frozen
class _Pair:
    a: NodeProcess
    b: NodeProcess
    host_a: Host


@asynccontextmanager
async def _partitioned_pair(pg_schema: str, nodes: Any) -> AsyncIterator[_Pair]:
    """Node a live on a host of its own, node b its backup on another, each reaching
    PostgreSQL through a forwarder on its link; the forwarders' sessions are cut at the
    end, so that none is left for the schema's drop."""
    server = urlsplit(SERVER).netloc.rpartition("@")[2]
    forwarders: list[tuple[Cuttable, IListeningPort]] = []
    with hosts(2) as (host_a, host_b):
        try:
            urls = {}
            for name, host in (("a", host_a), ("b", host_b)):
                forwarder = Cuttable()  # to PostgreSQL, from the host's link
                listening = TCP4ServerEndpoint(reactor, 0, interface=host.gateway)
                port = await listening.listen(forwarder)
                forwarders.append((forwarder, port))
                where = f"{host.gateway}:{port.getHost().port}"
                urls[name] = schema_url(pg_schema).replace(server, where, 1)
            a = nodes(
                _document("a", "shared-store-primary", urls["a"], host_a),
                name="a",
                wrap=host_a.wrap,
                host=host_a.address,
            )
            await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
            await a.wait_started(SLACK)
            b = nodes(
                _document("b", "shared-store-backup", urls["b"], host_b),
                name="b",
                wrap=host_b.wrap,
                host=host_b.address,
            )
            await b.wait_for(r"node b: live is a, epoch 1", SLACK)
            yield _Pair(a, b, host_a)
        finally:
            for forwarder, port in forwarders:
                forwarder.cut()
                stopping = port.stopListening()
                if stopping is not None:
                    await stopping


def _one_live_at_a_time(pair: _Pair) -> None:
    """a had stopped serving before b was live, by their logs' stamps."""
    stopped_at = _stamp(pair.a.output, r"node a: stops serving")
    live_at = _stamp(pair.b.output, B_LIVE)
    assert stopped_at < live_at, (stopped_at, live_at)


async def _heal(pair: _Pair) -> None:
    """Heal a's link: a comes back as b's backup and never serves."""
    since = len(pair.a.output)
    pair.host_a.heal()
    await pair.a.wait_for(A_SEES_B_LIVE, SLACK, since=since)
    assert "node a: LIVE" not in pair.a.output[since:]


@pytest.mark.system
@pytest.mark.timeout(300)
@pytest_twisted.ensureDeferred
async def test_a_partitioned_live_node_stops_serving_before_its_backup_is_live(pg_schema, nodes):
    require_netns()
    async with _partitioned_pair(pg_schema, nodes) as pair:
        a, b = pair.a, pair.b
        producer = await connect(reactor, a.core_url)
        acker = await connect(reactor, a.core_url)
        await acker.consumer("acked", on_message=lambda message: message.ack())
        load = _Load(producer)
        loading = Deferred.fromCoroutine(load.run(pair.host_a))
        await eventually(lambda: len(load.confirmed) >= WARM, timeout=SLACK)
        live = b.wait_for(B_LIVE, REAP + PING + SLACK)
        stopped = a.wait_for(r"node a: stops serving: (.*)", REAP + SLACK)
        load.cut.callback(None)
        await loading
        why = (await stopped).group(1)
        assert why == "no renewal of the lease before the deadline", a.output
        await live
        await b.wait_started(SLACK)
        _one_live_at_a_time(pair)

        # b serves every message a confirmed
        reader = await connect(reactor, b.core_url)
        try:
            consumer = await reader.consumer("orders")
            got: set[bytes] = set()
            while not set(load.confirmed) <= got:
                message = await consumer.receive().addTimeout(SLACK, reactor)
                got.add(message.body)
                message.ack()
        finally:
            await reader.close()

        await _heal(pair)
        for client in (producer, acker):  # the link is back to end them
            await client.close().addTimeout(SLACK, reactor)


async def cut_a_under_traced_load(
    pair: Any, run_dir: Path, then: Callable[[], Awaitable[None]], spark: Any
) -> None:
    """Traced core clients given both nodes' URLs produce and consume through ``pair.a``
    when its link is cut: a stops serving for want of the lease, b is live, and the
    clients carry on with b; then ``then`` (the test's own checks, the heal); then the
    audit of the clients' event logs: nothing confirmed lost, every repeat flagged."""
    a, b = pair.a, pair.b
    received: list[tuple[int, bool]] = []
    both = [f"tcp://{node.host}:{PORT}" for node in (a, b)]  # b binds it once live
    writers = [events.EventWriter(run_dir, "partition", who) for who in ("producer", "consumer")]

    def on_message(message: ReceivedMessage) -> None:
        received.append((int(message.headers[events.TRACE_SEQ]), message.redelivered))
        message.ack()

    options: dict[str, Any] = {"reconnect": QUICK, "settings": CLIENT}
    reader = await connect(reactor, both, trace=writers[1], **options)
    await reader.consumer("orders", on_message=on_message)
    writer = await connect(reactor, both, trace=writers[0], **options)
    settled: list[ClientError | None] = []
    producing = Deferred.fromCoroutine(produce_traced(writer, settled, received, COUNT, LEAD))
    try:
        await eventually(lambda: len(settled) >= CUT_AFTER, timeout=120)
        live = b.wait_for(B_LIVE, REAP + PING + SLACK)
        stopped = a.wait_for(r"node a: stops serving: (.*)", REAP + SLACK)
        pair.host_a.cut()
        assert len(settled) < COUNT, "the producer finished before the cut: raise COUNT"
        why = (await stopped).group(1)
        assert why == "no renewal of the lease before the deadline", a.output
        await live
        await b.wait_started(SLACK)
        await producing
        await eventually(lambda: len(settled) == COUNT, timeout=120)
        assert settled == [None] * COUNT, [error for error in settled if error][:3]
        await eventually(lambda: len({seq for seq, _ in received}) == COUNT, timeout=120)
        assert (reader.url, writer.url) == (reader.urls[1], writer.urls[1])
        await then()
    finally:
        await writer.close()
        await reader.close()
        for each in writers:
            await deferToThread(each.close)
    check_failover(await deferToThread(audit, spark, run_dir), COUNT, received)


@pytest.mark.system
@pytest.mark.timeout(400)
@pytest_twisted.ensureDeferred
async def test_clients_of_a_partitioned_live_node_carry_on_with_its_backup(
    pg_schema, nodes, tmp_path, spark
):
    require_netns()
    async with _partitioned_pair(pg_schema, nodes) as pair:

        async def then() -> None:
            _one_live_at_a_time(pair)
            await _heal(pair)

        await cut_a_under_traced_load(pair, tmp_path / "run", then, spark)
