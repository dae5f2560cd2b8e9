"""A real network partition: nodes a (live) and b (backup) run on hosts of their own
(network namespaces), each reaching PostgreSQL through its link to the test's namespace.
a's link is cut (``ip link set down``) while both nodes run, a producer's transaction
possibly in the middle of a store write: a loses the database, stops serving at its
deadline, and b takes the lease once it expired, ends a's sessions (left in the middle of
a transaction, holding row locks, they would keep b's store from loading), and serves
every message a confirmed. Never two live nodes at once, by the nodes' own logs (a's
"stops serving" stamped before b's "LIVE"). Healed, a comes back as b's backup and never
serves."""

from __future__ import annotations

import re
from datetime import datetime
from urllib.parse import urlsplit

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.internet.task import deferLater

from bridge.client.api import Client, connect
from bridge.client.errors import ClientError
from bridge.ctl.logs import TIME_FORMAT
from tests.forward.conftest import eventually
from tests.ha.proxy import Cuttable
from tests.postgresql import SERVER, schema_url
from tests.system.ha import PING, REAP, SLACK, ha_node
from tests.system.netns import Host, hosts, require_netns

PORT = 61616
"""Each host has ports of its own: both nodes listen on this one, at their own address."""
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
    document["management"] = {"url": f"http://{host.address}:0"}
    document["address"].append({"name": "acked", "routing": "anycast"})
    return document


def _stamp(output: str, pattern: str) -> datetime:
    """When the node logged the first line matching ``pattern``."""
    found = re.search(rf"^(\S+) \[[^\]]*\] {pattern}", output, re.MULTILINE)
    assert found is not None, f"no line {pattern!r} in:\n{output}"
    return datetime.strptime(found.group(1), TIME_FORMAT)


@pytest.mark.system
@pytest.mark.timeout(300)
@pytest_twisted.ensureDeferred
async def test_a_partitioned_live_node_stops_serving_before_its_backup_is_live(pg_schema, nodes):
    require_netns()
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

            producer = await connect(reactor, a.core_url)
            acker = await connect(reactor, a.core_url)
            await acker.consumer("acked", on_message=lambda message: message.ack())
            load = _Load(producer)
            loading = Deferred.fromCoroutine(load.run(host_a))
            await eventually(lambda: len(load.confirmed) >= WARM, timeout=SLACK)
            live = b.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK)
            stopped = a.wait_for(r"node a: stops serving: (.*)", REAP + SLACK)
            load.cut.callback(None)
            await loading
            why = (await stopped).group(1)
            assert why == "no renewal of the lease before the deadline", a.output
            await live
            await b.wait_started(SLACK)

            # never two live nodes: a had stopped serving before b was live
            stopped_at = _stamp(a.output, r"node a: stops serving")
            live_at = _stamp(b.output, r"node b: LIVE, epoch 2")
            assert stopped_at < live_at, (stopped_at, live_at)

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

            since = len(a.output)
            host_a.heal()
            await a.wait_for(r"node a: live is b, epoch 2", SLACK, since=since)
            assert "node a: LIVE" not in a.output[since:]
            for client in (producer, acker):  # the link is back to end them
                await client.close().addTimeout(SLACK, reactor)
        finally:
            for forwarder, port in forwarders:  # no session left for the schema's drop
                forwarder.cut()
                stopping = port.stopListening()
                if stopping is not None:
                    await stopping
