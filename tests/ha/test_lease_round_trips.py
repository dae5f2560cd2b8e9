"""A lease statement's transaction goes to the database in one round trip: a live node's
renewal costs the database's latency once, not once per statement (lock, update, commit),
so a distant database leaves the renewal as much of ``lease-query-timeout`` as it can.

Counted through a proxy as turns: each time the node speaks again after the server
answered. TCP may cut or join what each side writes; it cannot change who waits for whom.
"""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.threads import deferToThread
from twisted.protocols.portforward import ProxyClient, ProxyClientFactory, ProxyServer

from bridge.ha.lease import LeaseTable
from bridge.ha.lock import Holder
from tests.ha.conftest import QUERY_TIMEOUT
from tests.ha.proxy import Cuttable, via

REAP = 30.0


class _Turns:
    """Who spoke last on the proxied connections, and how often the node spoke again
    after the server had answered."""

    def __init__(self) -> None:
        self.turns = 0
        self._last: str | None = None

    def spoke(self, who: str) -> None:
        if who == "node" and self._last != "node":
            self.turns += 1
        self._last = who


class _CountingClient(ProxyClient):
    def dataReceived(self, data: bytes) -> None:
        self.peer.factory.turns.spoke("server")  # (the proxy's side that the node reached)
        super().dataReceived(data)


class _CountingClients(ProxyClientFactory):
    protocol = _CountingClient


class _CountingServer(ProxyServer):
    clientProtocolFactory = _CountingClients

    def dataReceived(self, data: bytes) -> None:
        self.factory.turns.spoke("node")
        super().dataReceived(data)


class _CountingProxy(Cuttable):
    protocol = _CountingServer

    def __init__(self) -> None:
        super().__init__()
        self.turns = _Turns()


@pytest_twisted.ensureDeferred
async def test_a_renewal_a_release_and_the_waiting_list_take_one_round_trip_an_acquire_two(
    lease_url: str,
) -> None:
    """On an open connection: a renewal, a release and the list of waiting backups one
    round trip each; an acquire two (the expired holder's sessions ended first, then the
    transaction)."""
    proxy = _CountingProxy()
    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(proxy)
    table = LeaseTable(via(lease_url, port.getHost().port), QUERY_TIMEOUT)
    try:
        me = Holder("a")
        first = await deferToThread(table.acquire, me, REAP)  # connects, makes the table
        assert first is not None
        before = proxy.turns.turns
        taken = await deferToThread(table.acquire, me, REAP)  # its own: taken again
        assert taken is not None and taken.epoch == first.epoch + 1
        assert proxy.turns.turns - before == 2
        before = proxy.turns.turns
        renewed = await deferToThread(table.renew, me, taken.epoch, REAP)
        assert renewed is not None and renewed.epoch == taken.epoch
        assert proxy.turns.turns - before == 1
        before = proxy.turns.turns
        released = await deferToThread(table.release, me, taken.epoch)
        assert released is not None and not released.held
        assert proxy.turns.turns - before == 1
        before = proxy.turns.turns
        backup = Holder("b")
        assert await deferToThread(table.waiting, backup, REAP) == (str(backup),)
        assert proxy.turns.turns - before == 1  # (after each renewal, a live node asks)
    finally:
        await deferToThread(table.close)
        proxy.cut()
        await port.stopListening()
