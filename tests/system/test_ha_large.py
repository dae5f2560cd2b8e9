"""Large messages across a failover on one PostgreSQL: the live node is killed (SIGKILL)
with large messages confirmed, and the backup, whose data directory holds none of their
bodies, delivers every one of them whole; once they are acknowledged, the database holds
no body rows."""

from __future__ import annotations

import signal

import pytest_twisted
from twisted.internet import reactor

from bridge.client.api import connect
from tests.postgresql import execute, schema_url
from tests.system.flow import MIB, PatternFile, check_pattern
from tests.system.ha import PING, REAP, SLACK, live_and_backup

SIZES = (3 * MIB + 5, 1 * MIB, 5 * MIB + 1)


@pytest_twisted.ensureDeferred
async def test_large_bodies_confirmed_by_the_killed_live_node_come_whole_from_the_backup(
    nodes, pg_schema, capsys
):
    url = schema_url(pg_schema)
    primary, backup = await live_and_backup(nodes, url, capsys)
    client = await connect(reactor, primary.core_url)
    for size in SIZES:
        # confirmed: the body's rows are committed with the message
        await client.send("orders", PatternFile(size), {"size": size}).addTimeout(60, reactor)
    await client.close()
    ((rows,),) = execute(pg_schema, "SELECT count(*) FROM large_bodies")
    assert rows == sum(-(-size // (256 * 1024)) for size in SIZES)

    backup_bodies = backup.directory / "var" / "b" / "large-messages"
    assert not backup_bodies.exists()  # the bodies are only in the live node's directory
    live = backup.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK)
    await primary.stop(signal.SIGKILL)
    await live
    await backup.wait_started(1)

    reader = await connect(reactor, backup.core_url)
    consumer = await reader.consumer("orders")
    for size in SIZES:
        message = await consumer.receive().addTimeout(60, reactor)
        assert message.is_large and message.headers == {"size": size}
        check_pattern(message.body_file, size)
        await message.ack_durably().addTimeout(30, reactor)
    await reader.close()
    assert execute(pg_schema, "SELECT count(*) FROM large_bodies") == [(0,)]
