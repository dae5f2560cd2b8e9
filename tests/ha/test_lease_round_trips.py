"""A lease statement's transaction goes to the database in one round trip: a live node's
renewal costs the database's latency once, not once per statement (lock, update, commit),
so a distant database leaves the renewal as much of ``lease-query-timeout`` as it can.

Counted through a proxy as the server's ReadyForQuery messages: the server sends one for
each Sync (or simple Query) the node sends, and the node waits for each before it goes
on, so they are the round trips the node waits out. (Counting who spoke when would
depend on timing: psycopg sends a pipeline's statements as it queues them, and on a busy
machine the server may answer the first before the last has left.)
"""

from __future__ import annotations

import struct

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


def _plain(url: str) -> str:
    """``url`` with its session unencrypted, so that the proxy can read the server's
    messages."""
    return f"{url}{'&' if '?' in url else '?'}sslmode=disable&gssencmode=disable"


_TYPED = struct.Struct(">cI")


class _ReadyCount:
    """The server's side of the protocol read as messages (a type byte, then a length
    that counts itself), however TCP cuts them: how many were ReadyForQuery ('Z')."""

    def __init__(self) -> None:
        self.ready = 0
        self._buffer = b""

    def feed(self, data: bytes) -> None:
        buffer = self._buffer + data
        at = 0
        while len(buffer) - at >= _TYPED.size:
            kind, length = _TYPED.unpack_from(buffer, at)
            if len(buffer) - at < 1 + length:
                break
            if kind == b"Z":
                self.ready += 1
            at += 1 + length
        self._buffer = buffer[at:]


class _CountingClient(ProxyClient):
    def dataReceived(self, data: bytes) -> None:
        self.peer.factory.answers.feed(data)  # (the server's answers, on their way back)
        super().dataReceived(data)


class _CountingClients(ProxyClientFactory):
    protocol = _CountingClient


class _CountingServer(ProxyServer):
    clientProtocolFactory = _CountingClients


class _CountingProxy(Cuttable):
    """One connection's proxy (the lease table keeps one open)."""

    protocol = _CountingServer

    def __init__(self) -> None:
        super().__init__()
        self.answers = _ReadyCount()


def test_the_count_reads_messages_however_tcp_cuts_them() -> None:
    stream = b"R" + struct.pack(">I", 8) + b"\0\0\0\0"  # AuthenticationOk
    stream += b"Z" + struct.pack(">I", 5) + b"I"  # ReadyForQuery
    stream += b"C" + struct.pack(">I", 11) + b"BEGIN\0Z"  # a 'Z' inside a message
    stream += b"Z" + struct.pack(">I", 5) + b"T"
    for cut in range(1, len(stream)):
        count = _ReadyCount()
        count.feed(stream[:cut])
        count.feed(stream[cut:])
        assert count.ready == 2, cut


@pytest_twisted.ensureDeferred
async def test_a_renewal_a_release_and_the_waiting_list_take_one_round_trip_an_acquire_two(
    lease_url: str,
) -> None:
    """On an open connection: a renewal, a release and the list of waiting backups one
    round trip each; an acquire two (the expired holder's sessions ended first, then the
    transaction)."""
    proxy = _CountingProxy()
    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(proxy)
    table = LeaseTable(_plain(via(lease_url, port.getHost().port)), QUERY_TIMEOUT)
    try:
        me = Holder("a")
        first = await deferToThread(table.acquire, me, REAP)  # connects, makes the table
        assert first is not None
        before = proxy.answers.ready
        taken = await deferToThread(table.acquire, me, REAP)  # its own: taken again
        assert taken is not None and taken.epoch == first.epoch + 1
        assert proxy.answers.ready - before == 2
        before = proxy.answers.ready
        renewed = await deferToThread(table.renew, me, taken.epoch, REAP)
        assert renewed is not None and renewed.epoch == taken.epoch
        assert proxy.answers.ready - before == 1
        before = proxy.answers.ready
        released = await deferToThread(table.release, me, taken.epoch)
        assert released is not None and not released.held
        assert proxy.answers.ready - before == 1
        before = proxy.answers.ready
        backup = Holder("b")
        assert await deferToThread(table.waiting, backup, REAP) == (str(backup),)
        assert proxy.answers.ready - before == 1  # (after each renewal, a live node asks)
    finally:
        await deferToThread(table.close)
        proxy.cut()
        await port.stopListening()
