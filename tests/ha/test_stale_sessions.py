"""The sessions of a holder whose lease expired are ended by the next acquisition: cut off
in the middle of a transaction, such a session would hold its row locks for as long as
the server's TCP keepalive allows, and the new live node's store would wait on them."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest

from bridge.ha.lease import TABLE, LeaseTable, session_name
from bridge.ha.lock import LEASE, Holder
from tests.postgresql import schema_url

REAP = 0.3


def _zombie(url: str, holder: Holder) -> psycopg.Connection[tuple[object, ...]]:
    """A session of ``holder`` stuck in a transaction that holds a row lock."""
    connection = psycopg.connect(url, application_name=session_name(str(holder)))
    connection.execute("CREATE TABLE IF NOT EXISTS locked (id int PRIMARY KEY)")
    connection.execute("INSERT INTO locked VALUES (1) ON CONFLICT DO NOTHING")
    connection.commit()
    connection.execute("SELECT id FROM locked WHERE id = 1 FOR UPDATE")
    return connection


def _within(seconds: float, condition: Callable[[], bool]) -> None:
    """Poll ``condition`` until it holds, failing after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.02)


def _alive(connection: psycopg.Connection[tuple[object, ...]]) -> bool:
    try:
        connection.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


def test_the_next_holder_ends_the_expired_holders_sessions(pg_schema: str) -> None:
    url = schema_url(pg_schema)
    old, new, bystander = Holder("a"), Holder("b"), Holder("c")
    a = LeaseTable(url, 5.0, holder=old)
    b = LeaseTable(url, 5.0, holder=new)
    opened: list[psycopg.Connection[tuple[object, ...]]] = []
    try:
        assert a.acquire(old, REAP) is not None
        stuck = _zombie(url, old)
        other = psycopg.connect(url, application_name=session_name(str(bystander)))
        opened += [stuck, other]
        assert b.acquire(new, 30) is None  # not expired yet: a's sessions are left alone
        assert _alive(stuck)
        time.sleep(REAP * 2)  # the lease expires by the database's clock
        taken = b.acquire(new, 30)
        assert taken is not None and taken.epoch == 2
        _within(10.0, lambda: not _alive(stuck))  # the backend ends on its signal
        assert _alive(other)
        # the lock is free for the new holder's store
        with psycopg.connect(url) as mine:
            mine.execute("SET lock_timeout = 2000")
            mine.execute("SELECT id FROM locked WHERE id = 1 FOR UPDATE")
    finally:
        for each in (a, b):
            each.close()
        for connection in opened:
            connection.close()


def test_a_holder_cut_off_holding_the_lease_row_is_ended_on_the_next_holders_new_connection(
    pg_schema: str,
) -> None:
    """The old holder's session stuck in a transaction that holds the lease's row (its
    store's fencing check takes it FOR SHARE). While the lease has not expired, the next
    holder's try waits on the row, times out and drops its connection; its next
    connection must not wait on that session too (an ``ALTER TABLE`` of the lease's
    table would, every time), so that it ends the session and takes the lease."""
    url = schema_url(pg_schema)
    old, new = Holder("a"), Holder("b")
    a = LeaseTable(url, 5.0, holder=old)
    b = LeaseTable(url, 0.25, holder=new)
    opened: list[psycopg.Connection[tuple[object, ...]]] = []
    try:
        assert a.acquire(old, REAP) is not None
        stuck = psycopg.connect(url, application_name=session_name(str(old)))
        opened.append(stuck)
        stuck.execute(f"SELECT 1 FROM {TABLE} WHERE name = %s FOR SHARE", (LEASE,))
        with pytest.raises(psycopg.OperationalError):  # waits on the row: times out
            b.acquire(new, 30)
        time.sleep(REAP * 2)  # the lease expires by the database's clock
        taken = b.acquire(new, 30)
        assert taken is not None and (taken.holder, taken.epoch) == (str(new), 2)
        _within(10.0, lambda: not _alive(stuck))
    finally:
        for each in (a, b):
            each.close()
        for connection in opened:
            connection.close()


@pytest.mark.parametrize("name", ["a", "x" * 80])
def test_session_names_fit_what_postgresql_keeps(name: str) -> None:
    assert len(session_name(f"{name}/0123456789abcdef").encode()) <= 63
