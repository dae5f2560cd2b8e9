"""A release of the lease is notified, on a real PostgreSQL: a backup listening learns of
it as it commits, and only of its own lease's releases by another holder."""

from __future__ import annotations

import select
import time

import pytest

from bridge.ha.lease import LeaseTable
from bridge.ha.lock import Holder, IReleaseNotices
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


def _taken_and_released(table: LeaseTable, holder: Holder) -> None:
    row = table.acquire(holder, REAP)
    assert row is not None and table.release(holder, row.epoch) is not None


def test_a_holders_own_release_does_not_count_for_it(tables: Tables) -> None:
    me, other = Holder("a"), Holder("b")
    mine = tables(holder=me)
    notices = mine.listen()
    _taken_and_released(mine, me)
    _taken_and_released(tables(holder=other), other)
    # its own release's notice came first, and did not count
    assert _notices_within(notices, WAIT) == 1


def test_another_schemas_or_leases_release_is_not_this_ones(
    tables: Tables, pg_other_schema: str
) -> None:
    notices = tables().listen()
    _taken_and_released(tables(schema_url(pg_other_schema)), Holder("x"))
    _taken_and_released(tables(lease="other"), Holder("x"))
    _taken_and_released(tables(), Holder("a"))
    # the two others' notices came first (one connection each, committed in order), so
    # once this lease's has arrived they have too, and none counted
    assert _notices_within(notices, WAIT) == 1


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
