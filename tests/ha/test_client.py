"""The lease's statements from the reactor: on their own thread, bounded by the client-side
timeout, each measuring the node's clock skew against the database's."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import pytest_twisted
from twisted.internet import defer, reactor
from twisted.logger import LogEvent, formatEvent, globalLogPublisher

from bridge.ha.client import LeaseCallTimeout, LeaseClient
from bridge.ha.lease import LeaseTable
from bridge.ha.lock import Holder, LeaseRow
from tests.forward.conftest import eventually

HOUR_MS = 3_600_000


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A URL of a port that takes connections and never answers (a hung database)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    yield f"postgresql://postgres@127.0.0.1:{port}/test"
    listener.close()


@pytest_twisted.ensureDeferred
async def test_the_skew_is_the_nodes_clock_against_the_databases(lease_url: str) -> None:
    ahead = LeaseClient(LeaseTable(lease_url, 5.0), reactor, wall_clock=lambda: time.time() + 3600)
    right = LeaseClient(LeaseTable(lease_url, 5.0), reactor)
    try:
        me = Holder("a")
        taken = await ahead.acquire(me, 30)
        assert taken.row is not None and taken.row.holder == str(me)
        assert abs(taken.skew - HOUR_MS) < 2000
        seen = await right.read()
        assert seen.row is not None and seen.row.epoch == taken.row.epoch
        assert abs(seen.skew) < 2000
        released = await ahead.release(me, taken.row.epoch)
        assert released.row is not None and not released.row.held
    finally:
        await ahead.close()
        await right.close()


@pytest_twisted.ensureDeferred
async def test_a_hung_database_fails_the_call_after_the_query_timeout(silent_server: str) -> None:
    """libpq's connect_timeout cannot go below 2 s: the client-side timeout fails the call
    at query-timeout all the same."""
    client = LeaseClient(LeaseTable(silent_server, 0.2), reactor)
    started = time.monotonic()
    with pytest.raises(defer.TimeoutError):
        await client.acquire(Holder("a"), 5)
    assert time.monotonic() - started < 1.9
    await client.close()  # after libpq's own connect_timeout


class _SlowLock:
    """A lock whose ``acquire`` answers only once ``go`` is set (a slow database)."""

    def __init__(self, query_timeout: float) -> None:
        self.query_timeout = query_timeout
        self.go = threading.Event()

    def acquire(self, me: Holder, reap: float) -> LeaseRow | None:
        self.go.wait(30)
        return None

    def close(self) -> None:
        pass


@pytest_twisted.ensureDeferred
async def test_a_call_past_the_query_timeout_says_where_it_is_and_its_late_answer_is_logged() -> (
    None
):
    """The timeout of a call the database is still answering says so; that of a call
    still queued behind it on the lease's thread says that; each answer that comes
    after its call timed out is dropped and logged with how long it took, so that a
    database slower than lease-query-timeout shows in the log."""
    lock = _SlowLock(0.1)
    client = LeaseClient(lock, reactor)  # type: ignore[arg-type]
    events: list[LogEvent] = []
    globalLogPublisher.addObserver(events.append)
    try:
        with pytest.raises(LeaseCallTimeout, match=r"\(100 ms\): the database has not answered"):
            await client.acquire(Holder("a"), 5)
        with pytest.raises(LeaseCallTimeout, match="still waiting for the lease's thread"):
            await client.acquire(Holder("a"), 5)
        lock.go.set()

        def late() -> list[str]:
            texts = [formatEvent(event) or "" for event in events]
            return [text for text in texts if "past lease-query-timeout (100 ms)" in text]

        await eventually(lambda: len(late()) == 2)
        first, queued = late()
        assert first.startswith("a call to the lease's database answered"), first
        # the second was still queued behind the first when it timed out
        assert _waited(queued) >= 0.099, queued
    finally:
        globalLogPublisher.removeObserver(events.append)
        lock.go.set()
        await client.close()


def _waited(text: str) -> float:
    """The seconds a late answer's warning says its call waited for the lease's thread."""
    found = re.search(r"\(([\d.]+) s of that waiting", text)
    assert found is not None, text
    return float(found.group(1))
