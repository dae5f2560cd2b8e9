"""kill -9 of the live node in the middle of a durable send run: nodes a (primary) and b
(backup) share one store (a PostgreSQL schema, or an SQLite store directory under a file
lock); a traced producer and a traced consumer work through a; a is killed; b is live
within reap + ping of the kill; both clients carry on with b; the audit of their event
logs finds nothing confirmed lost, and every message received twice came the second time
as a redelivery.

Here the backup listens on the live node's core port: it binds the port when it becomes
live, as a node behind one virtual address would, and the clients' own reconnect policy
takes them there (unconfirmed sends resent with their duplicate ids, the consumer created
again). Clients given both nodes' URLs are tested in test_ha_client_urls.py, large
messages in test_ha_large.py."""

from __future__ import annotations

import signal
import time

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread

from bridge import events
from bridge.client.api import ReceivedMessage, connect
from bridge.client.errors import ClientError
from tests.forward.conftest import eventually
from tests.system.audit_run import audit, check_failover, require_spark
from tests.system.ha import PING, REAP, SLACK, ha_node, produce_traced
from transport.reconnect import ReconnectPolicy

COUNT = 2000
KILL_AFTER = 600
"""Confirmed sends before the kill: the rest go to b."""
LEAD = 200
"""The producer keeps at most this many messages ahead of the consumer, so that both are
busy when the node dies."""
QUICK = ReconnectPolicy(retry_interval=0.1, retry_interval_multiplier=1.0, max_retry_interval=0.1)
TAKEOVER_SLACK = 5.0
"""Beyond reap + ping, for a loaded box: b's next try, its query and its log line. The
figure itself is measured by benchmarks/failover.py; this is a bound."""


@pytest.mark.system
@pytest.mark.timeout(400)
@pytest_twisted.ensureDeferred
async def test_kill_9_of_the_live_node_loses_nothing_confirmed(nodes, shared_store, tmp_path):
    require_spark()
    url = shared_store
    primary = nodes(ha_node("a", url, "shared-store-primary"), name="a")
    await primary.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await primary.wait_started(SLACK)
    port = primary.ports["core"]
    document = ha_node("b", url, "shared-store-backup")
    document["acceptor"][0]["url"] = f"tcp://127.0.0.1:{port}"  # bound once b is live
    backup = nodes(document, name="b")
    await backup.wait_for(r"node b: live is a, epoch 1", SLACK)

    run_dir = tmp_path / "run"
    writers = [events.EventWriter(run_dir, "failover", name) for name in ("producer", "consumer")]
    received: list[tuple[int, bool]] = []

    def on_message(message: ReceivedMessage) -> None:
        received.append((int(message.headers[events.TRACE_SEQ]), message.redelivered))
        message.ack()

    reader = await connect(reactor, primary.core_url, reconnect=QUICK, trace=writers[1])
    await reader.consumer("orders", on_message=on_message)
    writer = await connect(reactor, primary.core_url, reconnect=QUICK, trace=writers[0])
    settled: list[ClientError | None] = []
    producing = Deferred.fromCoroutine(produce_traced(writer, settled, received, COUNT, LEAD))
    try:
        await eventually(lambda: len(settled) >= KILL_AFTER, timeout=120)
        live = backup.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK)
        killed = time.monotonic()
        await primary.stop(signal.SIGKILL)
        assert len(settled) < COUNT, "the producer finished before the kill: raise COUNT"
        await live
        took = time.monotonic() - killed
        # A bound, not a benchmark: b's lease try comes every ping, the lease expires
        # reap after a's last renewal (at most one ping before the kill).
        assert took <= REAP + PING + TAKEOVER_SLACK, (took, backup.output)
        await backup.wait_started(SLACK)

        await producing
        await eventually(lambda: len(settled) == COUNT, timeout=120)
        assert settled == [None] * COUNT, [error for error in settled if error][:3]
        await eventually(lambda: len({seq for seq, _ in received}) == COUNT, timeout=120)
    finally:
        await writer.close()
        await reader.close()
        for each in writers:
            await deferToThread(each.close)

    check_failover(await deferToThread(audit, run_dir), COUNT, received)
