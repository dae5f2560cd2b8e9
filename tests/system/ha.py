"""Two nodes with [ha] on one shared store, for the system tests of high availability:
their configuration (fast lease timings), the shared store (a PostgreSQL schema, or an
SQLite store directory with its file lock) and the start of a pair, node a live and node
b waiting as its backup."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from bridge import events
from bridge.ctl.main import main
from tests.system.nodes import node_document

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
