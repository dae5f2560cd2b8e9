"""Two node processes with [ha] on one PostgreSQL: one is live, the other waits with
nothing open; when the live one is killed (SIGKILL) the backup is live once the lease
expires, and when it is stopped (SIGTERM) it releases the lease and the backup takes over
at its next try."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from bridge.client.api import connect
from bridge.ctl.main import main
from tests.postgresql import schema_url
from tests.system.nodes import node_document

PING, REAP, QUERY_TIMEOUT = 0.5, 2.0, 0.25
SLACK = 30.0
"""For a loaded box: starting a process and activating its store; the lease's own times
are PING and REAP."""


def ha_node(name: str, url: str, policy: str) -> dict[str, Any]:
    return node_document(
        name,
        address=[{"name": "orders", "routing": "anycast"}],
        store={"type": "postgresql", "url": url},
        ha={
            "policy": policy,
            "lease-ping-time": f"{round(PING * 1000)}ms",
            "lease-reap-time": f"{round(REAP * 1000)}ms",
            "lease-query-timeout": f"{round(QUERY_TIMEOUT * 1000)}ms",
        },
    )


async def live_and_backup(
    nodes: Any, url: str, capsys: Any, primary_url: str | None = None
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


@pytest_twisted.ensureDeferred
async def test_a_killed_live_nodes_backup_is_live_once_the_lease_expires(nodes, pg_schema, capsys):
    url = schema_url(pg_schema)
    primary, backup = await live_and_backup(nodes, url, capsys)
    client = await connect(reactor, primary.core_url)
    await client.send("orders", b"before the kill")  # confirmed: committed to PostgreSQL
    await client.close()

    live = backup.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK)
    await primary.stop(signal.SIGKILL)
    await live
    await backup.wait_started(1)
    assert "released the lease" not in primary.output

    reader = await connect(reactor, backup.core_url)
    consumer = await reader.consumer("orders")
    message = await consumer.receive()
    assert message.body == b"before the kill"
    await message.ack_durably()
    await reader.close()


@pytest_twisted.ensureDeferred
async def test_a_stopped_live_node_releases_the_lease_to_its_backup(nodes, pg_schema, capsys):
    url = schema_url(pg_schema)
    primary, backup = await live_and_backup(nodes, url, capsys)
    live = backup.wait_for(r"node b: LIVE, epoch 2", PING + SLACK)
    await primary.stop(signal.SIGTERM)
    assert primary.signal == signal.SIGTERM, primary.output  # a clean shutdown
    assert "node a: released the lease" in primary.output
    await live
    await backup.wait_started(1)
    assert set(backup.ports) == {"core", "management"}
