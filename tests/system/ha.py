"""Two nodes with [ha] on one shared store, for the system tests of high availability:
their configuration (fast lease timings), the shared store (a PostgreSQL schema, or an
SQLite store directory with its file lock) and the start of a pair, node a live and node
b waiting as its backup."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from bridge import events
from bridge.client.api import ReceivedMessage, connect
from bridge.client.errors import ClientError
from bridge.ctl.main import main
from tests.forward.conftest import eventually
from tests.system.audit_run import audit, check_failover
from tests.system.nodes import node_document
from transport.reconnect import ReconnectPolicy

PING, REAP, QUERY_TIMEOUT = 0.5, 2.0, 0.25
SLACK = 30.0
"""For a loaded box: starting a process and activating its store; the lease's own times
are PING and REAP."""


Shared = str | Path
"""The store the nodes share: a PostgreSQL URL, or an SQLite store directory."""


def ha_node(name: str, url: Shared, policy: str) -> dict[str, Any]:
    store = (
        {"type": "sqlite", "data-dir": str(url)}
        if isinstance(url, Path)
        else {"type": "postgresql", "url": url}
    )
    return node_document(
        name,
        address=[{"name": "orders", "routing": "anycast"}],
        store=store,
        ha={
            "policy": policy,
            "lease-ping-time": f"{round(PING * 1000)}ms",
            "lease-reap-time": f"{round(REAP * 1000)}ms",
            "lease-query-timeout": f"{round(QUERY_TIMEOUT * 1000)}ms",
        },
    )


async def live_and_backup(
    nodes: Any, url: Shared, capsys: Any, primary_url: str | None = None
) -> tuple[Any, Any]:
    """Node a live (it started first), node b waiting for the lease; a reaches the
    database at ``primary_url`` if given (through a proxy), else at ``url``."""
    primary = nodes(ha_node("a", primary_url or url, "shared-store-primary"))
    await primary.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await primary.wait_started(1)
    backup = nodes(ha_node("b", url, "shared-store-backup"))
    management = backup.wait_for(r"node b: management on 127\.0\.0\.1:(\d+)", SLACK)
    await backup.wait_for(r"node b: live is a, epoch 1", SLACK)
    assert not backup.started.called  # no acceptor, no store while a backup
    # the backup's own status says so, and who is live
    port = (await management).group(1)
    argv = ["ctl", "--url", f"http://127.0.0.1:{port}", "ha", "status", "--json"]
    assert await deferToThread(main, argv) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["state"], shown["live"], shown["epoch"]) == ("BACKUP", "a", 1)
    return primary, backup


async def produce_traced(
    client: Any,
    settled: list[Any],
    received: list[tuple[int, bool]],
    count: int,
    lead: int,
) -> None:
    """``count`` durable sends to ``orders``, stamped for the audit and with duplicate ids,
    at most ``lead`` ahead of the consumer's ``received``; each outcome into ``settled``."""
    for seq in range(count):
        while seq - len(received) > lead:
            await deferLater(reactor, 0.005, lambda: None)
        if not client.is_writable:
            await client.when_writable()
        client.send_nowait(
            "orders",
            b"%d" % seq,
            {events.TRACE_PRODUCER: "producer", events.TRACE_SEQ: seq},
            duplicate_id=b"seq-%d" % seq,
            on_settled=settled.append,
        )


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


async def kill_under_audited_load(primary: Any, backup: Any, tmp_path: Path, spark: Any) -> None:
    """A traced producer and consumer on a (b to listen on a's core port once live); a
    killed with SIGKILL after KILL_AFTER confirmed sends; b live within reap + ping; both
    clients carry on with b; the audit finds nothing confirmed lost, and every message
    received twice came the second time as a redelivery."""
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

    check_failover(await deferToThread(audit, spark, run_dir), COUNT, received)
