"""Faults of the live node of two node processes on one PostgreSQL schema: its database
connections terminated by the server with the database unreachable for longer than reap,
a pause (SIGSTOP) longer than reap, a wall clock an hour off.

What each shows: never two live nodes; the old live node stops serving before the backup
acquires; a write of a node that lost the lease never lands (checked in the database)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.internet.threads import deferToThread

from bridge.client.api import Client, connect
from tests.ha.proxy import Cuttable, connects, get, via
from tests.postgresql import SERVER, execute, schema_url
from tests.system.ha import PING, REAP, SLACK, ha_node, live_and_backup
from tests.system.nodes import NodeProcess


def _terminate(ports: list[int]) -> int:
    """Terminate the server processes of the connections from these client ports: how
    many there were."""
    with psycopg.connect(SERVER, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE client_addr = '127.0.0.1' AND client_port = ANY(%s)",
            (ports,),
        ).fetchall()
    return len(rows)


def _lease(connection: psycopg.Connection[tuple[object, ...]]) -> tuple[int, float]:
    """The lease's epoch and the database's time at the start of the statement that read
    it (the epoch was committed no later than that)."""
    row = connection.execute(
        "SELECT epoch, extract(epoch FROM statement_timestamp())::float8"
        " FROM txbridge_lease WHERE name = 'live'"
    ).fetchone()
    assert row is not None
    epoch, when = row
    assert isinstance(epoch, int) and isinstance(when, float)
    return epoch, when


@pytest_twisted.ensureDeferred
async def test_a_live_node_whose_connections_are_terminated_stops_before_the_backup_acquires(
    nodes, pg_schema, capsys
):
    """The server terminates a's connections and a cannot connect again (its proxy stops
    forwarding) for longer than reap: a stops serving, at a moment the lease still carried
    its epoch; b then acquires; when the database is back a is b's backup."""
    proxy = Cuttable()
    listening: IListeningPort = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(
        proxy
    )
    forwarding = listening.getHost().port
    direct = schema_url(pg_schema)
    try:
        primary, backup = await live_and_backup(
            nodes, direct, capsys, primary_url=via(direct, forwarding)
        )
        core = primary.ports["core"]
        # a's connections to the server: the proxy's, on the server's side
        ports = [
            server.peer.transport.getHost().port
            for server in proxy.open
            if server.peer is not None and server.peer.transport is not None
        ]
        assert len(ports) >= 2  # the lease's and the store's
        await listening.stopListening()  # a cannot connect again
        stops = primary.wait_for(r"node a: stops serving: ", REAP + SLACK)
        assert await deferToThread(_terminate, ports) == len(ports)
        await stops

        watcher = await deferToThread(psycopg.connect, direct, autocommit=True)
        try:
            # a stopped serving (its acceptor closed) while the lease was still epoch 1
            seen_stopped_under_epoch_1 = False
            deadline = reactor.seconds() + REAP + PING + SLACK
            while True:
                stopped = not await connects(core)
                epoch, _ = await deferToThread(_lease, watcher)
                if epoch != 1:
                    break
                seen_stopped_under_epoch_1 = seen_stopped_under_epoch_1 or stopped
                assert reactor.seconds() < deadline, "b did not acquire the lease in time"
            assert epoch == 2
            assert seen_stopped_under_epoch_1, primary.output
        finally:
            await deferToThread(watcher.close)
        # b may have gone LIVE while the loop above still polled: look from the start.
        await backup.wait_for(r"node b: LIVE, epoch 2", SLACK, since=0)

        rejoined = primary.wait_for(r"node a: live is b, epoch 2", SLACK)
        listening = await TCP4ServerEndpoint(reactor, forwarding, interface="127.0.0.1").listen(
            proxy
        )
        await rejoined
        assert "node a: LIVE, epoch" not in primary.output.split("node a: stops serving")[1]
    finally:
        stopping = listening.stopListening()  # None if it was stopped already
        if stopping is not None:
            await stopping
        proxy.cut()


class Senders:
    """Producers sending durable messages to one node without pause, each until a send
    fails; the bodies the node confirmed."""

    def __init__(self, client: Client, count: int, enough: int) -> None:
        self.client = client
        self.confirmed: set[bytes] = set()
        self.failures: list[BaseException] = []
        self.enough: Deferred[None] = Deferred()
        """Fires once ``enough`` sends were confirmed."""
        self._enough = enough
        self._next = 0
        self.done = gatherResults([Deferred.fromCoroutine(self._loop()) for _ in range(count)])

    async def _loop(self) -> None:
        while True:
            body = b"m-%d" % self._next
            self._next += 1
            try:
                await self.client.send("orders", body)
            except Exception as error:
                self.failures.append(error)
                if not self.enough.called:
                    self.enough.errback(error)
                return
            self.confirmed.add(body)
            if len(self.confirmed) >= self._enough and not self.enough.called:
                self.enough.callback(None)


def _stored(schema: str) -> dict[int, bytes]:
    return {
        int(message_id): bytes(data)  # type: ignore[call-overload]
        for message_id, data in execute(schema, "SELECT id, data FROM messages")
    }


@pytest_twisted.ensureDeferred
async def test_a_live_node_paused_past_reap_writes_nothing_once_resumed(nodes, pg_schema, capsys):
    """a is stopped (SIGSTOP) while producers send to it, for longer than reap: b takes
    the lease; a resumed (SIGCONT) stops serving (its watchdog's deadline passed, or its
    store's first write or its renewal finds epoch 2, whichever comes first) and no message
    row is written after b took over."""
    url = schema_url(pg_schema)
    primary, backup = await live_and_backup(nodes, url, capsys)
    client = await connect(reactor, primary.core_url)
    senders = Senders(client, 3, enough=20)
    await senders.enough.addTimeout(SLACK, reactor)
    assert primary.pid is not None
    live = backup.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK)
    os.kill(primary.pid, signal.SIGSTOP)
    try:
        await live
        when_b_took_over = _stored(pg_schema)
        confirmed = set(senders.confirmed)
        since = len(primary.output)
    finally:
        os.kill(primary.pid, signal.SIGCONT)
    stops = await primary.wait_for(r"node a: stops serving: (.*)", SLACK, since=since)
    assert stops.group(1) in (
        "no renewal of the lease before the deadline",
        "the lease is no longer this node's",
    ), primary.output
    await primary.wait_for(r"node a: live is b, epoch 2", SLACK, since=since)
    await senders.done
    assert senders.failures  # every producer's send failed once a stopped serving
    # nothing a confirmed is lost, nothing was written after b took over
    assert senders.confirmed == confirmed
    assert _stored(pg_schema) == when_b_took_over
    stored = list(when_b_took_over.values())
    assert all(any(body in data for data in stored) for body in confirmed)
    assert "node a: LIVE" not in primary.output[since:]


HOUR_AHEAD = """
import time

_system_time = time.time
time.time = lambda: _system_time() + 3600.0
"""
"""A node process's wall clock an hour ahead: ``time.time`` shifted before the node
imports anything (the monotonic clock is left alone, as a stepped wall clock leaves it)."""


async def _ha_state(process: NodeProcess) -> dict[str, Any]:
    shown = await deferToThread(get, process.management_url + "/status")
    state = json.loads(shown)["ha"]
    assert isinstance(state, dict)
    return state


def _seen(schema: str, node: str) -> int:
    """When the backup ``node`` last tried to acquire, by the database's clock (ms)."""
    rows = execute(
        schema, "SELECT seen FROM txbridge_lease_waiting WHERE holder LIKE %s", (f"{node}/%",)
    )
    return max((int(seen) for (seen,) in rows), default=0)  # type: ignore[call-overload]


def _holder(schema: str) -> str:
    ((holder,),) = execute(schema, "SELECT holder FROM txbridge_lease WHERE name = 'live'")
    return str(holder)


async def _one_live(schema: str, live: NodeProcess, backup: NodeProcess, names: str) -> None:
    """Sample both nodes' states and the lease row over the tries of ``backup`` to acquire
    for more than a reap: ``live`` (the first of ``names``) is live and holds the lease,
    ``backup`` (the second) is not live, every time."""
    live_name, backup_name = names
    first = await deferToThread(_seen, schema, backup_name)
    deadline = reactor.seconds() + REAP + SLACK
    while True:
        states = [(await _ha_state(node))["state"] for node in (live, backup)]
        assert states == ["LIVE", "BACKUP"], (states, backup.output)
        assert (await deferToThread(_holder, schema)).startswith(f"{live_name}/")
        if await deferToThread(_seen, schema, backup_name) > first + REAP * 1000:
            return
        assert reactor.seconds() < deadline, "the backup did not keep trying"


def _node(
    tmp_path: Path, nodes: Any, name: str, url: str, policy: str, *, clock: Path | None = None
) -> NodeProcess:
    directory = tmp_path / f"{name}-{len(nodes.started)}"
    directory.mkdir()
    process = NodeProcess(directory, ha_node(name, url, policy), path_first=clock).start()
    nodes.started.append(process)
    return process


async def _management(process: NodeProcess, name: str) -> None:
    """The management port, which a backup opens (and says) before it starts."""
    said = await process.wait_for(rf"node {name}: management on 127\.0\.0\.1:(\d+)", SLACK, since=0)
    process.ports["management"] = int(said.group(1))


@pytest_twisted.ensureDeferred
async def test_a_node_an_hour_ahead_never_makes_two_live_nodes(nodes, pg_schema, tmp_path):
    """b's wall clock is an hour ahead: as a backup it never takes a's unexpired lease,
    and it takes it once a is killed; as the live node it never keeps it past its expiry
    by the database's clock: a takes it once b is killed. The skew is in b's status."""
    url = schema_url(pg_schema)
    clock = tmp_path / "clock"
    clock.mkdir()
    (clock / "sitecustomize.py").write_text(HOUR_AHEAD)
    a = _node(tmp_path, nodes, "a", url, "shared-store-primary")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(1)
    b = _node(tmp_path, nodes, "b", url, "shared-store-backup", clock=clock)
    skew = b.wait_for(r"node b: clock (-?\d+) ms off the database's", SLACK)
    await b.wait_for(r"node b: live is a, epoch 1", SLACK)
    await _management(b, "b")
    assert int((await skew).group(1)) > 3_590_000
    shown = await _ha_state(b)
    assert shown["clock_skew_ms"] > 3_590_000 and shown["state"] == "BACKUP", shown
    await _one_live(pg_schema, a, b, "ab")

    b_live = b.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK)
    await a.stop(signal.SIGKILL)
    await b_live
    a = _node(tmp_path, nodes, "a", url, "shared-store-primary")
    await a.wait_for(r"node a: live is b, epoch 2", SLACK)
    await _management(a, "a")
    await _one_live(pg_schema, b, a, "ba")

    a_live = a.wait_for(r"node a: LIVE, epoch 3", REAP + PING + SLACK)
    await b.stop(signal.SIGKILL)
    await a_live
