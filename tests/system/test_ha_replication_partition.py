"""A real network partition of a replication pair: node a (replication-primary) and node
b (replication-backup) run on hosts of their own (network namespaces), each with its own
SQLite store, the lease in a PostgreSQL schema. Each host reaches the database, and the
other node's core port, through forwarders on its link to the test's namespace, so that
cutting a host's link (``ip link set down``) cuts it off from both.

The first test cuts the live node's link under the traced load of clients given both
nodes' URLs: a loses the lease and its backup and stops serving at its deadline; b, named
in sync in the lease, takes over once the lease expired and serves everything a
confirmed. Never two live nodes at once, by the nodes' own logs (a's "stops serving"
stamped before b's "LIVE"); the audit finds nothing confirmed lost and every repeat
flagged. Healed, a copies b's store as its backup and never serves.

The second cuts the backup's link: a, which still holds the lease, drops the silent
backup at its connection TTL, clears it from the lease and confirms again, alone (with a
lease there is no vote: the lease already says who is live). b, cut off from the lease,
never becomes live. Healed, b copies again and is in sync: killed then, a leaves b every
message it confirmed, those it confirmed alone included."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import attrs
import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import gatherResults
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import IListeningPort

from bridge.client.api import connect
from tests.ha.proxy import Cuttable
from tests.postgresql import SERVER, schema_url
from tests.system.ha import PING, REAP, SLACK
from tests.system.netns import Host, hosts, require_netns
from tests.system.nodes import NodeProcess
from tests.system.replication import replicated_node
from tests.system.test_ha_partition import (
    A_SEES_B_LIVE,
    B_LIVE,
    CLIENT,
    PORT,
    TTL,
    _stamp,
    cut_a_under_traced_load,
)

IN_SYNC = r"replication: b/\w+ is in sync .*, named so in the lease"


@attrs.frozen
class _Pair:
    a: NodeProcess
    b: NodeProcess
    host_a: Host
    host_b: Host


def _document(name: str, policy: str, lease: str, host: Host, peer: str) -> dict[str, Any]:
    document = replicated_node(name, policy, lease, PORT, PORT)
    document["ha"]["peers"] = [f"tcp://{peer}"]
    document["acceptor"][0]["url"] = f"tcp://{host.address}:{PORT}"
    document["acceptor"][0]["connection-ttl"] = f"{round(TTL * 1000)}ms"
    document["management"] = {"url": f"http://{host.address}:0"}
    return document


@asynccontextmanager
async def _replicated_pair(pg_schema: str, nodes: Any) -> AsyncIterator[_Pair]:
    """Node a live on a host of its own and node b, on another, in sync with it. Each host
    has two forwarders on its link: to PostgreSQL, and to the other node's core port.
    Their connections are cut at the end, so that none is left for the schema's drop."""
    server = urlsplit(SERVER).netloc.rpartition("@")[2]
    forwarders: list[tuple[Cuttable, IListeningPort]] = []

    async def forward(host: Host, forwarder: Cuttable) -> str:
        port = await TCP4ServerEndpoint(reactor, 0, interface=host.gateway).listen(forwarder)
        forwarders.append((forwarder, port))
        return f"{host.gateway}:{port.getHost().port}"

    with hosts(2) as (host_a, host_b):
        try:
            documents = {}
            for name, policy, host, other in (
                ("a", "replication-primary", host_a, host_b),
                ("b", "replication-backup", host_b, host_a),
            ):
                lease = schema_url(pg_schema).replace(server, await forward(host, Cuttable()), 1)
                peer = await forward(host, Cuttable(other.address, PORT))
                documents[name] = _document(name, policy, lease, host, peer)
            a = nodes(documents["a"], name="a", wrap=host_a.wrap, host=host_a.address)
            await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
            await a.wait_started(SLACK)
            b = nodes(documents["b"], name="b", wrap=host_b.wrap, host=host_b.address)
            await a.wait_for(IN_SYNC, SLACK * 2, since=0)
            yield _Pair(a, b, host_a, host_b)
        finally:
            for forwarder, port in forwarders:
                forwarder.cut()
                stopping = port.stopListening()
                if stopping is not None:
                    await stopping


@pytest.mark.system
@pytest.mark.timeout(400)
@pytest_twisted.ensureDeferred
async def test_a_partitioned_live_node_stops_before_its_backup_serves_what_it_confirmed(
    pg_schema, nodes, tmp_path, spark
):
    require_netns()
    async with _replicated_pair(pg_schema, nodes) as pair:
        a, b = pair.a, pair.b

        async def then() -> None:
            stopped_at = _stamp(a.output, r"node a: stops serving")
            live_at = _stamp(b.output, B_LIVE)
            assert stopped_at < live_at, (stopped_at, live_at)

            # healed, a copies b's store as its backup, and never serves
            since = len(a.output)
            pair.host_a.heal()
            await a.wait_for(A_SEES_B_LIVE, SLACK, since=since)
            await b.wait_for(r"replication: a/\w+ is in sync", SLACK * 2, since=0)
            assert "node a: LIVE" not in a.output[since:]

        await cut_a_under_traced_load(pair, tmp_path / "run", then, spark)


@pytest.mark.system
@pytest.mark.timeout(300)
@pytest_twisted.ensureDeferred
async def test_a_live_node_cut_off_from_its_backup_goes_on_alone_and_copies_again_once_healed(
    pg_schema, nodes
):
    require_netns()
    async with _replicated_pair(pg_schema, nodes) as pair:
        a, b = pair.a, pair.b
        producer = await connect(reactor, a.core_url, settings=CLIENT)
        sent = [b"in sync %d" % n for n in range(50)]
        for body in sent:
            await producer.send("orders", body)

        gone = a.wait_for(r"replication: backup b/\S+ is gone \(in-sync\)", TTL + SLACK)
        lost = b.wait_for(r"replica: the link to a is gone .*; in sync: trying to take over", SLACK)
        pair.host_b.cut()
        alone = [b"alone %d" % n for n in range(50)]
        confirming = gatherResults([producer.send("orders", body) for body in alone])
        await gone  # its connection TTL: nothing came from b
        await confirming.addTimeout(SLACK, reactor)  # once the lease no longer names b
        confirmed_at = datetime.now(UTC)
        assert _stamp(a.output, r"replication: backup b/\S+ is gone") < confirmed_at
        tried_from = (await lost).end()  # b's connection TTL too: b tries the lease at once
        await b.wait_for(r"node b: acquiring the lease failed", SLACK, since=tried_from)
        assert "node a: stops serving" not in a.output

        since = len(a.output)
        pair.host_b.heal()
        await a.wait_for(IN_SYNC, SLACK * 2, since=since)
        assert "LIVE" not in b.output
        after = [b"in sync again %d" % n for n in range(50)]
        for body in after:
            await producer.send("orders", body)
        await producer.close()

        # b's copy has everything: killed, a leaves it every message it confirmed
        live = b.wait_for(B_LIVE, REAP + PING + SLACK)
        await a.stop(signal.SIGKILL)
        await live
        await b.wait_started(SLACK)
        reader = await connect(reactor, b.core_url, settings=CLIENT)
        try:
            consumer = await reader.consumer("orders")
            for body in [*sent, *alone, *after]:
                message = await consumer.receive().addTimeout(SLACK, reactor)
                assert message.body == body
                message.ack()
        finally:
            await reader.close()
