"""Two node processes with [ha] on one shared store (PostgreSQL, or an SQLite store
directory): one is live, the other waits with nothing open; when the live one is killed
(SIGKILL) the backup is live once the lease expires (the file lock: at its next try, the
kernel having given the lock up with the process), and when it is stopped (SIGTERM) it
releases the lease and the backup takes over at its next try."""

from __future__ import annotations

import signal

import pytest_twisted
from twisted.internet import reactor

from bridge.client.api import connect
from tests.system.ha import PING, REAP, SLACK, live_and_backup


@pytest_twisted.ensureDeferred
async def test_a_killed_live_nodes_backup_is_live_once_the_lease_expires(
    nodes, shared_store, capsys
):
    url = shared_store
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
async def test_a_stopped_live_node_releases_the_lease_to_its_backup(nodes, shared_store, capsys):
    url = shared_store
    primary, backup = await live_and_backup(nodes, url, capsys)
    live = backup.wait_for(r"node b: LIVE, epoch 2", PING + SLACK)
    await primary.stop(signal.SIGTERM)
    assert primary.signal == signal.SIGTERM, primary.output  # a clean shutdown
    assert "node a: released the lease" in primary.output
    await live
    await backup.wait_started(1)
    assert set(backup.ports) == {"core", "management"}
