"""The lease row on a real PostgreSQL: one holder at a time, expiry by the database's clock,
renewals only by the holder at its epoch, release, and epochs that only go up."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import pytest

from bridge.ha import lease as lease_module
from bridge.ha.lease import TABLE, LeaseRowLocked, LeaseTable
from bridge.ha.lock import Holder
from tests.postgresql import execute

Tables = Callable[..., LeaseTable]
REAP = 30.0
"""Long enough that no lease in these tests expires unless the test means it to."""


def _within(seconds: float, condition: Callable[[], bool]) -> None:
    """Poll ``condition`` until it holds, failing after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.02)


def test_the_first_acquires_and_the_second_does_not(tables: Tables) -> None:
    a, b = tables(), tables()
    me, other = Holder("a"), Holder("b")
    taken = a.acquire(me, REAP)
    assert taken is not None
    assert (taken.holder, taken.node, taken.epoch, taken.held) == (str(me), "a", 1, True)
    assert taken.expires == pytest.approx(taken.now + REAP * 1000, abs=1)
    assert b.acquire(other, REAP) is None
    assert b.read().holder == str(me)


def test_two_holders_racing_never_both_hold(tables: Tables) -> None:
    """Three nodes on threads acquire, renew and release as fast as they can; afterwards
    every epoch has one holder, and each epoch another node took began (by the database's
    clock) only after the one before it expired or was released."""
    seen: list[tuple[int, str, int, int]] = []  # epoch, holder, start, end of its hold
    lock = threading.Lock()

    def node(table: LeaseTable, me: Holder) -> None:
        for turn in range(60):
            row = table.acquire(me, 0.03)
            if row is None:
                continue
            rows = [row]
            renewed = table.renew(me, row.epoch, 0.03)
            if renewed is not None:
                rows.append(renewed)
            released = table.release(me, row.epoch) if turn % 3 == 0 else None
            with lock:
                end = released.now if released else max(r.expires for r in rows)
                seen.append((row.epoch, row.holder, row.now, end))

    threads = [threading.Thread(target=node, args=(tables(), Holder(f"node{i}"))) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seen.sort()
    epochs = [epoch for epoch, *_ in seen]
    assert len(epochs) == len(set(epochs)) > 3  # one holder per epoch
    assert len({holder for _, holder, *_ in seen}) > 1
    for (epoch, holder, _, end), (later, taker, start, _) in itertools.pairwise(seen):
        if later == epoch + 1 and taker != holder:  # a holder may take its own again
            assert start >= end, (epoch, end, start)


def test_expiry_is_the_database_clocks(tables: Tables) -> None:
    a, b = tables(), tables()
    taken = a.acquire(Holder("a"), 0.3)
    assert taken is not None
    other = Holder("b")
    assert b.acquire(other, REAP) is None
    _within(10, lambda: b.acquire(other, REAP) is not None)
    row = b.read()
    assert row.holder == str(other)
    assert row.epoch == taken.epoch + 1
    assert row.now > taken.expires


@pytest.mark.parametrize("offset", [-3600.0, 3600.0 * 24 * 365])
def test_the_nodes_clock_does_not_matter(
    tables: Tables, offset: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose clock is an hour behind or a year ahead holds and loses the lease
    exactly as one whose clock is right: no statement reads the node's clock."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + offset)
    a, b = tables(), tables()
    me, other = Holder("a"), Holder("b")
    taken = a.acquire(me, REAP)
    assert taken is not None
    assert abs(taken.now / 1000 - real()) < 60
    assert b.acquire(other, REAP) is None
    renewed = a.renew(me, taken.epoch, REAP)
    assert renewed is not None and renewed.expires >= taken.expires
    assert b.acquire(other, REAP) is None


def test_renew_fails_once_another_acquired(tables: Tables) -> None:
    a, b = tables(), tables()
    me, other = Holder("a"), Holder("b")
    taken = a.acquire(me, 0.2)
    assert taken is not None
    _within(10, lambda: b.acquire(other, REAP) is not None)
    assert a.renew(me, taken.epoch, REAP) is None
    assert a.read().holder == str(other)


def test_renew_fails_after_expiry_even_if_nobody_took_it(tables: Tables) -> None:
    a = tables()
    me = Holder("a")
    taken = a.acquire(me, 0.1)
    assert taken is not None
    _within(10, lambda: not a.read().held)
    assert a.renew(me, taken.epoch, REAP) is None


def test_renew_needs_the_same_epoch_and_the_same_process(tables: Tables) -> None:
    a = tables()
    me = Holder("a")
    taken = a.acquire(me, REAP)
    assert taken is not None
    assert a.renew(me, taken.epoch - 1, REAP) is None
    assert a.renew(Holder("a"), taken.epoch, REAP) is None  # a restart of node a
    assert a.renew(me, taken.epoch, REAP) is not None


def test_release_lets_the_other_acquire_at_once(tables: Tables) -> None:
    a, b = tables(), tables()
    me, other = Holder("a"), Holder("b")
    taken = a.acquire(me, REAP)
    assert taken is not None
    assert b.acquire(other, REAP) is None
    released = a.release(me, taken.epoch)
    assert released is not None and not released.held
    again = b.acquire(other, REAP)
    assert again is not None and again.epoch == taken.epoch + 1
    assert a.release(me, taken.epoch) is None
    assert b.read().holder == str(other)


def test_epochs_strictly_increase(tables: Tables) -> None:
    a, b = tables(), tables()
    me, other = Holder("a"), Holder("b")
    epochs = []
    for table, holder in [(a, me), (a, me), (b, other), (a, me), (b, other)] * 3:
        current = table.read()
        if current.holder and current.holder != str(holder):
            owner = a if current.node == "a" else b
            assert owner.release(me if current.node == "a" else other, current.epoch) is not None
        row = table.acquire(holder, REAP)
        assert row is not None
        epochs.append(row.epoch)
    assert epochs == sorted(set(epochs))
    assert epochs == list(range(1, len(epochs) + 1))


def test_a_statement_past_the_query_timeout_fails_naming_who_holds_the_row(
    lease_url: str, pg_schema: str
) -> None:
    """The server cancels a statement that runs past query-timeout (statement_timeout,
    lock_timeout): here the lease row is locked by another transaction, so the update
    waits, and the error names that transaction's session."""
    table = LeaseTable(lease_url, 0.2)
    try:
        table.read()  # creates the table
        with lease_module.psycopg.connect(lease_url, application_name="blocker") as blocker:
            blocker.execute(f"SELECT * FROM {TABLE} FOR UPDATE")
            with pytest.raises(LeaseRowLocked) as raised:
                table.acquire(Holder("a"), REAP)
            pid = blocker.info.backend_pid
            assert f"locked by pid {pid} (blocker, idle in transaction" in str(raised.value)
        assert table.acquire(Holder("a"), REAP) is not None  # reconnects
    finally:
        table.close()


def test_the_table_is_made_in_the_urls_schema(tables: Tables, pg_schema: str) -> None:
    tables().read()
    rows = execute(
        pg_schema,
        "SELECT table_schema FROM information_schema.tables WHERE table_name = %s",
        (TABLE,),
    )
    # Other tests' schemas (run at the same time, on the same server) may hold one too.
    schemas = {schema for (schema,) in rows}
    assert pg_schema in schemas and "public" not in schemas


def test_nodes_starting_at_once_on_a_new_schema_all_make_or_find_the_table(
    tables: Tables,
) -> None:
    """Eight first connections at the same moment, where no lease table exists yet: each
    reads the lease (two making a table at once could fail one with "already exists")."""
    made = [tables() for _ in range(8)]
    start = threading.Barrier(len(made))
    errors: list[BaseException] = []

    def first_read(table: LeaseTable) -> None:
        start.wait(timeout=30)
        try:
            table.read()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=first_read, args=(table,)) for table in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []


def test_the_backups_waiting_are_listed_without_the_holder_until_they_fall_silent(
    tables: Tables,
) -> None:
    a, b, c = tables(), tables(), tables()
    me, second, third = Holder("a"), Holder("b"), Holder("c")
    assert a.waiting(me, REAP) == (str(me),)  # nobody holds the lease yet
    assert a.acquire(me, REAP) is not None
    assert b.acquire(second, REAP) is None
    assert b.waiting(second, REAP) == (str(second),)  # the holder a is left out
    assert c.waiting(third, REAP) == tuple(sorted((str(second), str(third))))
    _within(10, lambda: a.waiting(None, 0.2) == ())  # both fell silent for a window
    assert a.waiting(None, REAP) == tuple(sorted((str(second), str(third))))
