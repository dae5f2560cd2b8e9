"""Two node processes with [ha] replication (docs/ha.md): node a live, node b copying its
store and then every batch it writes. Killed with SIGKILL, a's backup takes over once
the lease expires, with every message a confirmed, large ones included; a backup that
never got in sync never serves, and says why."""

from __future__ import annotations

import signal

import pytest
import pytest_twisted
from twisted.internet import reactor

from bridge.client.api import connect
from tests.postgresql import schema_url
from tests.system.audit_run import require_spark
from tests.system.bridges import free_port
from tests.system.ha import PING, REAP, SLACK, kill_under_audited_load
from tests.system.replication import ha_status, management_port, replicated_node

LARGE = 300 * 1024


async def _pair(nodes, lease_url, capsys, *, b_peer=None):
    a_port, b_port = free_port(), free_port()
    a = nodes(replicated_node("a", "replication-primary", lease_url, a_port, b_port), name="a")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(1)
    b = nodes(
        replicated_node("b", "replication-backup", lease_url, b_port, b_peer or a_port),
        name="b",
    )
    await management_port(b, "b")
    return a, b


@pytest_twisted.ensureDeferred
async def test_a_killed_live_nodes_backup_serves_everything_it_confirmed(nodes, pg_schema, capsys):
    lease_url = schema_url(pg_schema)
    a, b = await _pair(nodes, lease_url, capsys)
    client = await connect(reactor, a.core_url, min_large_message_size=100 * 1024)
    sent = [b"before the copy %d" % n for n in range(200)] + [b"L" * LARGE]
    for body in sent:  # in the store before b copies it
        await client.send("orders", body)
    await b.wait_for(r"replica: in sync with a", SLACK, since=0)
    shown = await ha_status(a, capsys)
    assert shown["replication"]["role"] == "live"
    assert shown["replication"]["state"] == "in-sync", shown
    after = [b"after the copy %d" % n for n in range(300)] + [b"M" * LARGE]
    for body in after:  # each confirmed once b has it too
        await client.send("orders", body)
    consumer = await client.consumer("orders")
    first = await consumer.receive()
    assert first.body == sent[0]
    await first.ack_durably()  # acknowledged on b too
    await client.close()

    live = b.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK)
    await a.stop(signal.SIGKILL)
    await live
    await b.wait_started(1)

    reader = await connect(reactor, b.core_url)
    consumer = await reader.consumer("orders")
    expected = sent[1:] + after
    for body in expected:
        message = await consumer.receive()
        assert message.body == body
        assert message.redelivered, "a may have delivered it before it died"
        message.ack()
    await reader.close()


@pytest_twisted.ensureDeferred
async def test_a_backup_that_is_not_in_sync_never_takes_over(nodes, pg_schema, capsys):
    lease_url = schema_url(pg_schema)
    a, b = await _pair(nodes, lease_url, capsys, b_peer=free_port())  # b cannot find a
    client = await connect(reactor, a.core_url)
    await client.send("orders", b"only on a")
    await client.close()
    await a.stop(signal.SIGKILL)
    # b tries the lease at each ping; once it has seen the lease expired, it was refused
    deadline = reactor.seconds() + REAP + SLACK
    while (shown := await ha_status(b, capsys))["live"] != "" or shown["epoch"] != 1:
        assert reactor.seconds() < deadline, shown
    assert shown["state"] == "BACKUP", shown
    assert shown["replication"]["state"] == "none"
    assert (
        "refused" in shown["replication"]["reason"] or "onnection" in shown["replication"]["reason"]
    ), shown
    assert "LIVE" not in b.output
    b.started.addErrback(lambda _: None)  # it never serves: its start ends unfinished


@pytest.mark.timeout(400)
@pytest_twisted.ensureDeferred
async def test_kill_9_of_the_live_node_under_load_loses_nothing_confirmed(
    nodes, pg_schema, tmp_path
):
    """As test_ha_failover_audit.py, each node on its own store: both nodes name one core
    port, which the live one binds (the backup finds the live node there)."""
    require_spark()
    lease_url, port = schema_url(pg_schema), free_port()
    a = nodes(replicated_node("a", "replication-primary", lease_url, port, port), name="a")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(SLACK)
    b = nodes(replicated_node("b", "replication-backup", lease_url, port, port), name="b")
    await b.wait_for(r"replica: in sync with a", SLACK)
    await kill_under_audited_load(a, b, tmp_path)
