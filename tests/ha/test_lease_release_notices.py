"""A release of the lease is notified, on a real PostgreSQL: a backup listening learns of
it as it commits, and only of its own lease's releases by another holder."""

from __future__ import annotations

import select
import time

import pytest

from bridge.ha.lease import LeaseTable
from bridge.ha.lock import Holder, IReleaseNotices
from tests.ha.conftest import QUERY_TIMEOUT
from tests.ha.test_lease import REAP, Tables
from tests.postgresql import schema_url

WAIT = 30.0
"""The longest a test waits for a notice that should come (a loaded box is slow)."""


def _notices_within(notices: IReleaseNotices, seconds: float) -> int:
    """This lease's releases that arrive within ``seconds``, waiting on the descriptor as
    the reactor does; returns at the first that counts."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([notices.fileno()], [], [], left)
        if readable and (count := notices.received()):
            return count
    return 0


def test_a_release_wakes_a_listener(tables: Tables) -> None:
    live, backup = tables(), tables()
    notices = backup.listen()
    me = Holder("a")
    row = live.acquire(me, REAP)
    assert row is not None
    assert notices.received() == 0
    assert live.release(me, row.epoch) is not None
    assert _notices_within(notices, WAIT) == 1
    assert backup.acquire(Holder("b"), REAP) is not None


def test_a_release_that_changes_nothing_says_nothing(tables: Tables) -> None:
    live, backup = tables(), tables()
    notices = backup.listen()
    me = Holder("a")
    row = live.acquire(me, REAP)
    assert row is not None
    assert live.release(me, row.epoch + 1) is None  # not its epoch: no release
    assert live.release(Holder("a"), row.epoch) is None  # another run of the node
    # a release of the lease that does commit, after them, is the first notice to come
    assert live.release(me, row.epoch) is not None
    assert _notices_within(notices, WAIT) == 1
    assert _notices_within(notices, 0.2) == 0


def test_a_holders_own_release_does_not_count_for_it(lease_url: str) -> None:
    me, other = Holder("a"), Holder("b")
    mine = LeaseTable(lease_url, QUERY_TIMEOUT, holder=me)
    theirs = LeaseTable(lease_url, QUERY_TIMEOUT, holder=other)
    try:
        notices = mine.listen()
        for holder, table in ((me, mine), (other, theirs)):
            row = table.acquire(holder, REAP)
            assert row is not None and table.release(holder, row.epoch) is not None
        # its own release's notice came first, and did not count
        assert _notices_within(notices, WAIT) == 1
    finally:
        mine.close()
        theirs.close()


def test_another_schemas_or_leases_release_is_not_this_ones(
    tables: Tables, lease_url: str, pg_other_schema: str
) -> None:
    elsewhere = LeaseTable(schema_url(pg_other_schema), QUERY_TIMEOUT)
    other_lease = LeaseTable(lease_url, QUERY_TIMEOUT, lease="other")
    backup, live = tables(), tables()
    try:
        notices = backup.listen()
        for table in (elsewhere, other_lease):
            me = Holder("x")
            row = table.acquire(me, REAP)
            assert row is not None and table.release(me, row.epoch) is not None
        me = Holder("a")
        row = live.acquire(me, REAP)
        assert row is not None and live.release(me, row.epoch) is not None
        # the two others' notices came first (one connection each, committed in order),
        # so once this lease's has arrived they have too, and none counted
        assert _notices_within(notices, WAIT) == 1
    finally:
        elsewhere.close()
        other_lease.close()


def test_listening_again_replaces_the_connection_and_close_ends_it(tables: Tables) -> None:
    backup = tables()
    first = backup.listen()
    second = backup.listen()
    with pytest.raises(ConnectionError, match="listening for the lease"):
        first.received()
    assert second.received() == 0
    backup.close()
    with pytest.raises(ConnectionError, match="listening for the lease"):
        second.received()
