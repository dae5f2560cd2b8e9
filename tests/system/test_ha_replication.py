"""Two node processes with [ha] replication (docs/ha.md): node a live, node b copying its
store and then every batch it writes. Killed with SIGKILL, a's backup takes over once
the lease expires, with every message a confirmed, large ones included; a backup that
never got in sync never serves, and says why."""

from __future__ import annotations

import os
import signal

import pytest
import pytest_twisted
import tomli_w
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from bridge.client.api import connect
from security.passwords import hash_password
from tests.ha.proxy import get
from tests.postgresql import schema_url
from tests.system.bridges import free_port
from tests.system.ha import PING, REAP, SLACK, kill_under_audited_load
from tests.system.replication import (
    PAGING,
    fill_with_bodies,
    ha_status,
    management_port,
    read_all,
    replicated_node,
    stamp,
)

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
    await a.wait_for(r"replication: b/\w+ is in sync .*, named so in the lease", SLACK, since=0)
    shown = await ha_status(a, capsys)
    assert shown["replication"]["role"] == "live"
    assert shown["replication"]["state"] == "in-sync", shown
    metrics = await deferToThread(get, f"http://127.0.0.1:{a.ports['management']}/metrics")
    assert "txbridge_ha_replication_in_sync 1.0" in metrics, metrics
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
    nodes, pg_schema, tmp_path, spark
):
    """As test_ha_failover_audit.py, each node on its own store: both nodes name one core
    port, which the live one binds (the backup finds the live node there)."""
    lease_url, port = schema_url(pg_schema), free_port()
    a = nodes(replicated_node("a", "replication-primary", lease_url, port, port), name="a")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(SLACK)
    b = nodes(replicated_node("b", "replication-backup", lease_url, port, port), name="b")
    await a.wait_for(r"replication: b/\w+ is in sync .*, named so in the lease", SLACK, since=0)
    await kill_under_audited_load(a, b, tmp_path, spark)


@pytest_twisted.ensureDeferred
async def test_the_live_node_killed_during_the_copy_comes_back_and_copies_again(
    nodes, pg_schema, capsys
):
    """a holds large messages and, its address paging, more than it keeps in memory; b
    starts copying and is stopped (SIGSTOP) so that the copy cannot end; a is killed. b,
    not in sync, never serves; a comes back live on its own store; b copies it again, and
    once a is killed for good b serves every message (ARTEMIS-484, ARTEMIS-2297)."""
    lease_url = schema_url(pg_schema)
    a_port, b_port = free_port(), free_port()
    a_document = replicated_node("a", "replication-primary", lease_url, a_port, b_port)
    a_document["address-setting"] = [PAGING]
    b_document = replicated_node("b", "replication-backup", lease_url, b_port, a_port)
    b_document["address-setting"] = [PAGING]
    a = nodes(a_document, name="a")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(SLACK)
    expected = await fill_with_bodies(a, 40)

    b = nodes(b_document, name="b")
    await management_port(b, "b")
    await b.wait_for(r"replica: copying the store of a", SLACK, since=0)
    os.kill(b.pid, signal.SIGSTOP)  # 40 MiB of bodies cannot all be in the sockets' buffers
    try:
        await a.stop(signal.SIGKILL)
    finally:
        os.kill(b.pid, signal.SIGCONT)
    await b.wait_for(r"replica: the link to a is gone .*; not in sync", SLACK, since=0)

    a = nodes(a_document, name="a")  # its own store is the latest: the lease lets it
    await a.wait_for(r"node a: LIVE, epoch 2", REAP + PING + SLACK)
    await a.wait_started(SLACK)
    await a.wait_for(r"replication: b/\w+ is in sync .*, named so in the lease", SLACK * 2, since=0)
    assert "LIVE" not in b.output

    await a.stop(signal.SIGKILL)
    await b.wait_for(r"node b: LIVE, epoch 3", REAP + PING + SLACK, since=0)
    await b.wait_started(SLACK)
    await read_all(b, expected)


@pytest_twisted.ensureDeferred
async def test_the_primary_comes_back_copies_and_fails_back_in_order(nodes, pg_schema, capsys):
    """a (primary, allow-failback) is killed: b takes over. a comes back as b's backup,
    copies, and once b named it in sync b hands over: b stops serving before a is live,
    and becomes a's backup only once a is live; nothing confirmed on either is lost."""
    lease_url = schema_url(pg_schema)
    a_port, b_port = free_port(), free_port()
    a_document = replicated_node(
        "a", "replication-primary", lease_url, a_port, b_port, **{"allow-failback": True}
    )
    a = nodes(a_document, name="a")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(SLACK)
    b = nodes(replicated_node("b", "replication-backup", lease_url, b_port, a_port), name="b")
    await management_port(b, "b")
    await a.wait_for(r"replication: b/\w+ is in sync .*, named so in the lease", SLACK, since=0)
    client = await connect(reactor, a.core_url)
    await client.send("orders", b"confirmed by a")
    await client.close()

    await a.stop(signal.SIGKILL)
    await b.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK, since=0)
    await b.wait_started(SLACK)
    client = await connect(reactor, b.core_url)
    await client.send("orders", b"confirmed by b")
    await client.close()

    a = nodes(a_document, name="a")
    await management_port(a, "a")
    await a.wait_for(r"node a: LIVE, epoch 3", REAP + PING + SLACK * 2)
    await a.wait_started(SLACK)
    await b.wait_for(r"replication: a/\w+ is in sync .*, named so in the lease", SLACK, since=0)
    await a.wait_for(r"replication: b/\w+ is in sync .*, named so in the lease", SLACK, since=0)
    handed = b.output.index("node b: failback: a is in sync, handing the lease over")
    stopped = b.output.index("node b: stops serving", handed)
    copying = b.output.index("replica: copying the store of a", stopped)
    assert "node b: LIVE" not in b.output[handed:], "b came back live: the failback broke"
    live_at = stamp(a.output, a.output.index("node a: LIVE, epoch 3"))
    assert stamp(b.output, stopped) <= live_at, "a was live while b still served"
    assert stamp(b.output, copying) >= live_at, "b copied from a before a was live"
    shown = await ha_status(a, capsys)
    assert shown["replication"]["last_takeover"] == "failback", shown
    assert shown["replication"]["last_takeover_seconds"] > 0

    reader = await connect(reactor, a.core_url)
    consumer = await reader.consumer("orders")
    for body in (b"confirmed by a", b"confirmed by b"):
        message = await consumer.receive()
        assert message.body == body
        message.ack()
    await reader.close()


@pytest.mark.parametrize("on_shutdown", [True, False])
@pytest_twisted.ensureDeferred
async def test_a_clean_stop_fails_over_only_with_failover_on_shutdown(
    nodes, pg_schema, capsys, on_shutdown
):
    lease_url = schema_url(pg_schema)
    a_port, b_port = free_port(), free_port()
    a_document = replicated_node(
        "a",
        "replication-primary",
        lease_url,
        a_port,
        b_port,
        **{"failover-on-shutdown": on_shutdown},
    )
    a = nodes(a_document, name="a")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(SLACK)
    b = nodes(replicated_node("b", "replication-backup", lease_url, b_port, a_port), name="b")
    await management_port(b, "b")
    await a.wait_for(r"replication: b/\w+ is in sync .*, named so in the lease", SLACK, since=0)
    await a.stop(signal.SIGTERM)
    assert "node a: released the lease" in a.output
    if on_shutdown:
        # From b's start: woken by the release, it may be LIVE before a's stop returns.
        await b.wait_for(r"node b: LIVE, epoch 2", PING + SLACK, since=0)
        return
    # b tries the lease at each ping; once it has seen it released, it was refused
    deadline = reactor.seconds() + SLACK
    while (shown := await ha_status(b, capsys))["live"] != "":
        assert reactor.seconds() < deadline, shown
    assert shown["state"] == "BACKUP", shown
    a = nodes(a_document, name="a")  # the pair waits for it, and it has the latest store
    await a.wait_for(r"node a: LIVE, epoch 2", REAP + PING + SLACK)
    assert "LIVE" not in b.output
    b.started.addErrback(lambda _: None)  # it never serves: its start ends unfinished


@pytest_twisted.ensureDeferred
async def test_only_the_cluster_user_gets_a_copy(nodes, pg_schema, capsys, tmp_path):
    """Security on: a backup logged in as another user is refused, and says so; logged in
    as the live node's cluster user it gets its copy."""
    users = {
        "node-link": {"password": hash_password("link secret"), "roles": ["nodes"]},
        "alice": {"password": hash_password("alice secret"), "roles": ["users"]},
    }
    security = {"users-file": "users.toml", "cluster-user": "node-link"}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "users.toml").write_text(tomli_w.dumps({"users": users}))
    lease_url = schema_url(pg_schema)
    a_port, b_port = free_port(), free_port()
    a_document = replicated_node("a", "replication-primary", lease_url, a_port, b_port)
    a_document["security"] = security
    a = nodes(a_document, name="a")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(SLACK)

    def backup(user: str, password: str) -> dict:
        document = replicated_node(
            "b",
            "replication-backup",
            lease_url,
            b_port,
            a_port,
            **{"cluster-user": user, "cluster-password": password},
        )
        document["security"] = security
        return document

    b = nodes(backup("alice", "alice secret"), name="b")
    await management_port(b, "b")
    await a.wait_for(r"refused replication to b .*: only the cluster user may replicate", SLACK)
    deadline = reactor.seconds() + SLACK
    login = ("node-link", "link secret")
    while (
        "only the cluster user" not in (await ha_status(b, capsys, login))["replication"]["reason"]
    ):
        assert reactor.seconds() < deadline
    await b.stop(signal.SIGTERM)
    b.started.addErrback(lambda _: None)  # it never served

    b = nodes(backup("node-link", "link secret"), name="b")
    await a.wait_for(r"replication: b/\w+ is in sync .*, named so in the lease", SLACK)
