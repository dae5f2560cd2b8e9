"""The initial copy under faults, on real node processes (docs/ha.md, "Initial
synchronisation"): node b reaches its live node a through a proxy that can hold one
direction of the link once the copy is under way, so each fault lands in the copy by
what has crossed the link, never by timing.

- b killed with -9 in the middle of the copy (a's bytes to it held, so the copy cannot
  have ended): it restarts over its half-written store, copies again, gets in sync, and
  once a is killed serves every message, large and paged ones included.
- b stalled in the last step (its bytes to a held: its confirmation of the copy never
  arrives): a's ``initial-replication-sync-timeout`` fires, a gives up the copy and never
  stops serving, and b, once the link is back, starts over and gets in sync."""

from __future__ import annotations

import signal
from typing import Any

import attrs
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure

from bridge.client.api import connect
from tests.postgresql import schema_url
from tests.system.bridges import free_port
from tests.system.ha import PING, REAP, SLACK
from tests.system.replication import (
    PAGING,
    fill_with_bodies,
    management_port,
    read_all,
    replicated_node,
)

STARTED = 256 * 1024
"""Bytes from a to b after which the copy is under way: the copy holds megabytes of
bodies and the login before it a few hundred bytes."""
SYNC_TIMEOUT = 2.0


@attrs.define(eq=False)
class _Side(Protocol):
    """One side of a proxied connection: what it reads goes to its peer, unless the
    proxy holds that direction (then it is kept, never forwarded)."""

    proxy: HoldingProxy
    toward_backup: bool
    peer: _Side | None = None
    held: bool = False
    forwarded: int = 0
    kept: list[bytes] = attrs.Factory(list)
    pending: list[bytes] = attrs.Factory(list)

    def connectionMade(self) -> None:
        pass

    def dataReceived(self, data: bytes) -> None:
        if self.held:
            self.kept.append(data)
            return
        if self.peer is None or self.peer.transport is None:
            self.pending.append(data)
            return
        self.peer.transport.write(data)
        self.forwarded += len(data)
        if self.toward_backup and self.forwarded >= STARTED:
            self.proxy.copy_under_way(self)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.loseConnection()


@attrs.define(eq=False)
class HoldingProxy:
    """A TCP proxy from b to a. ``hold`` arms its next connection: once ``STARTED``
    bytes went from a to b, it holds the direction named and fires ``holding``."""

    target: int
    port: IListeningPort | None = None
    armed: str | None = None
    holding: Deferred[None] | None = None
    connections: int = 0

    async def listen(self) -> int:
        factory = Factory.forProtocol(self._accepted)
        self.port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(factory)
        return self.port.getHost().port

    def hold(self, direction: str) -> Deferred[None]:
        """Hold ``"to-backup"`` or ``"to-live"`` on the next connection, once the copy is
        under way; the Deferred fires when it holds."""
        self.armed = direction
        self.holding = Deferred()
        return self.holding

    def _accepted(self) -> _Side:
        self.connections += 1
        from_backup = _Side(self, toward_backup=False)  # reads b, writes to a
        to_live = TCP4ClientEndpoint(reactor, "127.0.0.1", self.target)
        from_live = _Side(self, toward_backup=True, peer=from_backup)  # reads a, writes to b
        from_backup.peer = from_live

        def connected(side: _Side) -> None:
            for data in from_backup.pending:
                side.transport.write(data)
            from_backup.pending.clear()

        def failed(reason: Failure) -> None:
            if from_backup.transport is not None:
                from_backup.transport.loseConnection()

        to_live.connect(Factory.forProtocol(lambda: from_live)).addCallbacks(connected, failed)
        return from_backup

    def copy_under_way(self, from_live: _Side) -> None:
        if self.armed is None or self.holding is None:
            return
        held = from_live if self.armed == "to-backup" else from_live.peer
        assert held is not None
        held.held = True
        self.armed = None
        holding, self.holding = self.holding, None
        holding.callback(None)

    async def close(self) -> None:
        if self.port is not None:
            await self.port.stopListening()


async def _live_with_bodies(
    nodes: Any, lease_url: str, a_port: int, b_port: int, **ha: Any
) -> tuple[Any, list[bytes]]:
    """Node a live, holding 20 large bodies and, its address paging, 2,000 small
    messages past what it keeps in memory."""
    document = replicated_node("a", "replication-primary", lease_url, a_port, b_port, **ha)
    document["address-setting"] = [PAGING]
    a = nodes(document, name="a")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(SLACK)
    return a, await fill_with_bodies(a, 20)


def _backup(nodes: Any, lease_url: str, b_port: int, proxy_port: int) -> Any:
    document = replicated_node("b", "replication-backup", lease_url, b_port, proxy_port)
    document["address-setting"] = [PAGING]
    return nodes(document, name="b")


@pytest_twisted.ensureDeferred
async def test_a_backup_killed_in_the_copy_copies_again_and_serves_everything(nodes, pg_schema):
    lease_url = schema_url(pg_schema)
    a_port, b_port = free_port(), free_port()
    a, expected = await _live_with_bodies(nodes, lease_url, a_port, b_port)
    proxy = HoldingProxy(a_port)
    try:
        proxy_port = await proxy.listen()
        holding = proxy.hold("to-backup")
        b = _backup(nodes, lease_url, b_port, proxy_port)
        await management_port(b, "b")
        await holding.addTimeout(SLACK, reactor)
        await b.stop(signal.SIGKILL)  # mid-copy: the rest of it is held in the proxy
        assert "in sync" not in a.output
        await a.wait_for(r"replication: backup b/\w+ is gone", SLACK, since=0)

        b = _backup(nodes, lease_url, b_port, proxy_port)
        await a.wait_for(r"replication: b/\w+ is in sync .*, named so in the lease", SLACK * 2)
        assert proxy.connections >= 2
    finally:
        await proxy.close()

    await a.stop(signal.SIGKILL)
    await b.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK, since=0)
    await b.wait_started(SLACK)
    await read_all(b, expected)


@pytest_twisted.ensureDeferred
async def test_a_backup_stalled_in_the_last_step_times_out_and_starts_over(nodes, pg_schema):
    lease_url = schema_url(pg_schema)
    a_port, b_port = free_port(), free_port()
    a, expected = await _live_with_bodies(
        nodes,
        lease_url,
        a_port,
        b_port,
        **{"initial-replication-sync-timeout": f"{round(SYNC_TIMEOUT * 1000)}ms"},
    )
    proxy = HoldingProxy(a_port)
    try:
        proxy_port = await proxy.listen()
        holding = proxy.hold("to-live")
        b = _backup(nodes, lease_url, b_port, proxy_port)
        await management_port(b, "b")
        await holding.addTimeout(SLACK, reactor)  # b's confirmation of the copy is held

        client = await connect(reactor, a.core_url)
        sent = client.send("orders", b"sent while b stalls")
        await a.wait_for(
            r"replication: b/\w+ did not confirm the copy within "
            r"initial-replication-sync-timeout \(2\.0 s\); it starts over",
            SLACK,
            since=0,
        )
        await sent.addTimeout(SLACK, reactor)  # the live node went on, without b
        await client.close()
        assert "in sync" not in a.output.split("did not confirm the copy")[0]

        await a.wait_for(r"replication: b/\w+ is in sync .*, named so in the lease", SLACK * 2)
        assert proxy.connections >= 2
        assert "LIVE" not in b.output
    finally:
        await proxy.close()
    await read_all(a, [*expected, b"sent while b stalls"])
