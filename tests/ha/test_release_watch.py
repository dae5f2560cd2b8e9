"""The reactor's watch over release notices: each readable turn reads the notices, a
release calls back, a lost connection ends the watch once with its reason, and the
descriptor the reactor watched is its own (the lock may close the connection's)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from zope.interface import implementer

from bridge.ha.lock import IReleaseNotices
from bridge.ha.released import ReleaseWatch

TIMEOUT = 30.0


@implementer(IReleaseNotices)
class Notices:
    """A socket standing for the notices' connection: a byte ``r`` is one release, ``x``
    a lost connection (as libpq raises it)."""

    def __init__(self, end: socket.socket) -> None:
        self.end = end
        self.reads = 0

    def fileno(self) -> int:
        return self.end.fileno()

    def received(self) -> int:
        self.reads += 1
        data = self.end.recv(100)
        if b"x" in data:
            raise ConnectionError("listening for the lease's releases: server closed")
        return data.count(b"r")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    yield ours, peer
    ours.close()
    peer.close()


def _watch(notices: Notices) -> tuple[ReleaseWatch, list[str], list[str]]:
    events: list[str] = []
    lost: list[str] = []
    watch = ReleaseWatch(reactor, notices, lambda: events.append("released"), lost.append)
    return watch, events, lost


def _when(condition: Callable[[], object]) -> Deferred[None]:
    """Fires once ``condition()`` holds, checked each reactor turn; times out."""
    done: Deferred[None] = Deferred()

    def check() -> None:
        if condition():
            done.callback(None)
        else:
            reactor.callLater(0.01, check)

    check()
    return done.addTimeout(TIMEOUT, reactor)


@pytest_twisted.ensureDeferred
async def test_each_release_calls_back(pair) -> None:
    ours, peer = pair
    notices = Notices(ours)
    watch, events, lost = _watch(notices)
    try:
        peer.send(b"r")
        await _when(lambda: events == ["released"])
        peer.send(b"rr")  # two at once: one wake-up is enough
        await _when(lambda: notices.reads >= 2)
        assert events == ["released", "released"] and lost == []
    finally:
        watch.stop()


@pytest_twisted.ensureDeferred
async def test_a_lost_connection_ends_the_watch_once_with_its_reason(pair) -> None:
    ours, peer = pair
    watch, events, lost = _watch(Notices(ours))
    watched = watch.fileno()
    assert watched not in (-1, ours.fileno())  # a descriptor of its own
    peer.send(b"x")
    await _when(lambda: lost)
    assert lost == ["listening for the lease's releases: server closed"]
    assert watch.fileno() == -1 and watch not in reactor.getReaders()
    with pytest.raises(OSError):
        os.fstat(watched)  # closed after the reactor stopped watching it
    watch.stop()  # after the loss: nothing more
    assert events == [] and len(lost) == 1


@pytest_twisted.ensureDeferred
async def test_stop_stops_watching_before_the_connection_closes(pair) -> None:
    ours, peer = pair
    notices = Notices(ours)
    watch, events, lost = _watch(notices)
    assert watch in reactor.getReaders()
    watch.stop()
    assert watch not in reactor.getReaders() and watch.fileno() == -1
    peer.send(b"r")
    await deferLater(reactor, 0.1)  # readable for a while: nobody reads
    assert (events, lost, notices.reads) == ([], [], 0)
