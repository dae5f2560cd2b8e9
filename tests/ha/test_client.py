"""The lease's statements from the reactor: on their own thread, bounded by the client-side
timeout, each measuring the node's clock skew against the database's."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from bridge.ha.client import LeaseClient
from bridge.ha.lease import LeaseTable
from bridge.ha.lock import Holder

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
