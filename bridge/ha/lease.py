"""The live lease in PostgreSQL: one row naming who holds it, its epoch and its expiry.

Every statement judges time by the database's clock, read once inside the statement with
``clock_timestamp()`` (``now()`` would be the start of the transaction), so no node's clock
ever decides who holds the lease: a node whose clock is skewed or jumps can neither keep a
lease past its expiry nor take one early. Times are epoch milliseconds of the database's
clock, as integers.

- acquire: take the lease if it has expired, or if this holder has it already (taking it
  again after a loss of the database); the epoch goes up by one either way.
- renew: push the expiry on, only while the holder and the epoch are still this node's and
  the lease has not expired.
- release: give the lease up (expiry 0), keeping the epoch, so the next holder's is higher,
  and tell the backups at once: a ``NOTIFY`` on :data:`RELEASED` in the same transaction,
  which each backup listens for (``listen``) and tries the lease as it arrives.

With replication (each node its own store, copied from the live node to a backup) the row
also says whose store is the latest (``store_node``: the last live node's name) and which
backup holds a copy in sync with it (``replica``: its ``node/run``, "" when none). Only
those two may take the lease (``ReplicaGate``), and the first live node of a new pair
only if it is the primary: a node whose store misses confirmed messages never serves.

The statements are blocking (psycopg 3); :mod:`bridge.ha.client` runs them on a thread.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from zope.interface import implementer

from bridge.ha.lock import (
    LEASE,
    Holder,
    IReleaseNotices,
    IReleaseNotifier,
    IReplicaLock,
    LeaseRow,
    ReplicaGate,
)

TABLE = "txbridge_lease"

_NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

_CREATE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    name text PRIMARY KEY,
    holder text NOT NULL DEFAULT '',
    epoch bigint NOT NULL DEFAULT 0,
    expires bigint NOT NULL DEFAULT 0
)"""
_ADDED = ("store_node", "replica")
"""The lease's columns added after its first version (replication's), text each."""
_ADD_COLUMNS = f"ALTER TABLE {TABLE} " + ", ".join(
    f"ADD COLUMN IF NOT EXISTS {name} text NOT NULL DEFAULT ''" for name in _ADDED
)
WAITING = "txbridge_lease_waiting"
TABLES = (TABLE, WAITING)
"""The tables of the lease, beside the store's in a shared schema."""
_CREATE_WAITING = f"""
CREATE TABLE IF NOT EXISTS {WAITING} (
    holder text PRIMARY KEY,
    seen bigint NOT NULL
)"""
_SEEN = f"""
INSERT INTO {WAITING} (holder, seen) VALUES (%(me)s, {_NOW_MS})
ON CONFLICT (holder) DO UPDATE SET seen = excluded.seen"""
_FORGET = f"DELETE FROM {WAITING} WHERE seen < {_NOW_MS} - %(window)s * 10"
_WAITING = f"""
SELECT w.holder FROM {WAITING} AS w
WHERE w.seen >= {_NOW_MS} - %(window)s
    AND w.holder <> (SELECT holder FROM {TABLE} WHERE name = %(lease)s)
ORDER BY w.holder"""

_READY = """
SELECT to_regclass(%(waiting)s) IS NOT NULL AND (
    SELECT count(*) FROM pg_attribute
    WHERE attrelid = to_regclass(%(table)s) AND attname = ANY(%(added)s)
        AND NOT attisdropped) = cardinality(%(added)s)"""
"""Whether the lease's tables are whole (``_CREATE``, ``_ADD_COLUMNS``, ``_CREATE_WAITING``),
read from the catalog without a lock: a connection then changes nothing. ``ALTER TABLE``
waits for every lock on the table, and a holder cut off in the middle of a transaction
keeps its lock on the lease's row (its store's fencing check takes one) until the next
holder ends its sessions (``_END_STALE``), which that next holder does on a connection:
one that waited for the lock first would never get there."""
_CREATING = "SELECT pg_advisory_xact_lock(%(key)s)"
_CREATING_KEY = 0x7478_6C65  # "txle": held while a connection makes the lease's tables
_SEED = f"INSERT INTO {TABLE} (name) VALUES (%(lease)s) ON CONFLICT (name) DO NOTHING"

_ACQUIRE = f"""
UPDATE {TABLE} AS l
SET holder = %(me)s, epoch = l.epoch + 1, expires = t.now + %(reap)s
FROM (SELECT {_NOW_MS} AS now) AS t
WHERE l.name = %(lease)s AND (l.expires < t.now OR l.holder = %(me)s)
RETURNING l.holder, l.epoch, l.expires, t.now"""

_ACQUIRE_GATED = f"""
UPDATE {TABLE} AS l
SET holder = %(me)s, epoch = l.epoch + 1, expires = t.now + %(reap)s,
    store_node = %(node)s, replica = ''
FROM (SELECT {_NOW_MS} AS now) AS t
WHERE l.name = %(lease)s AND (l.expires < t.now OR l.holder = %(me)s)
    AND (l.store_node = %(node)s OR l.replica = %(me)s
        OR (l.store_node = '' AND %(primary)s))
RETURNING l.holder, l.epoch, l.expires, t.now"""

_MARK_REPLICA = f"""
UPDATE {TABLE} AS l
SET replica = %(replica)s
FROM (SELECT {_NOW_MS} AS now) AS t
WHERE l.name = %(lease)s AND l.holder = %(me)s AND l.epoch = %(epoch)s
    AND l.expires >= t.now
RETURNING l.holder, l.epoch, l.expires, t.now"""

_RENEW = f"""
UPDATE {TABLE} AS l
SET expires = t.now + %(reap)s
FROM (SELECT {_NOW_MS} AS now) AS t
WHERE l.name = %(lease)s AND l.holder = %(me)s AND l.epoch = %(epoch)s
    AND l.expires >= t.now
RETURNING l.holder, l.epoch, l.expires, t.now"""

RELEASED = "txbridge_lease_released"
"""The channel a release is notified on. The payload names the lease (its schema and name:
channels are per database, and two schemas may each hold a lease), then, on a line of its
own, the holder that released it."""
_RELEASE = f"""
WITH released AS (
    UPDATE {TABLE} AS l
    SET holder = '', expires = 0
    FROM (SELECT {_NOW_MS} AS now) AS t
    WHERE l.name = %(lease)s AND l.holder = %(me)s AND l.epoch = %(epoch)s
    RETURNING l.name, l.epoch, l.expires, t.now
)
SELECT %(me)s, r.epoch, r.expires, r.now
FROM released AS r
CROSS JOIN LATERAL (
    SELECT pg_notify('{RELEASED}', current_schema() || '.' || r.name || E'\\n' || %(me)s)
) AS n"""
_LISTEN = f"LISTEN {RELEASED}"

CHECK_TOKEN = (
    f"SELECT 1 FROM {TABLE} WHERE name = %(lease)s AND holder = %(holder)s"
    " AND epoch = %(epoch)s FOR SHARE"
)
"""The fencing token's check, for the store to run last in each of its transactions, just
before the commit: a row only while the lease still carries this holder and epoch.
``FOR SHARE`` holds off any acquisition until the transaction ends, so a new holder reads
the store only after every write checked under the old epoch has committed or rolled
back."""

SESSION_PREFIX = "txbridge "
"""The ``application_name`` of a node's database sessions is this and its ``node/run``, so
that the next holder can end them (:data:`_END_STALE`)."""
_END_STALE = f"""
SELECT count(pg_terminate_backend(s.pid)) FROM pg_stat_activity AS s, {TABLE} AS l
WHERE l.name = %(lease)s AND l.holder <> '' AND l.holder <> %(me)s AND l.expires < {_NOW_MS}
    AND s.datname = current_database() AND s.pid <> pg_backend_pid()
    AND s.application_name = left(%(prefix)s || l.holder, 63)"""
"""Before each acquisition: end the sessions of a holder whose lease has expired. Cut off
by a partition in the middle of a transaction, such a session waits for the rest of it
for as long as the server's TCP keepalive allows (hours), holding the row locks its
statements took; the new holder's store would wait on them, and it could never finish
activating. The old holder stopped serving before its lease expired (its deadline), so
nothing it still does may land anyway."""

_LOCK = f"SELECT 1 FROM {TABLE} WHERE name = %(lease)s FOR UPDATE"
_HOLDERS = f"""
SELECT s.pid, s.application_name, s.state,
    round(extract(epoch FROM clock_timestamp() - s.xact_start) * 1000)
FROM pg_locks AS k JOIN pg_stat_activity AS s ON s.pid = k.pid
WHERE k.relation = to_regclass('{TABLE}') AND k.granted AND s.pid <> pg_backend_pid()
    AND k.mode IN ('RowShareLock', 'RowExclusiveLock')
ORDER BY s.xact_start"""
"""The other sessions whose open transactions locked rows of the lease's table (its
fencing check, a renewal), longest open first: named when a statement times out waiting
on the row, so that a backup that cannot take over says who keeps it from doing so."""
_READ_REPLICA = f"SELECT store_node, replica FROM {TABLE} WHERE name = %(lease)s"


_READ = f"SELECT holder, epoch, expires, {_NOW_MS} FROM {TABLE} WHERE name = %(lease)s"


@implementer(IReplicaLock, IReleaseNotifier)
class LeaseTable:
    """The lease row's statements over one connection, each bounded by ``query_timeout``
    on the server (``statement_timeout``, ``lock_timeout``) and when connecting.

    Blocking: call from one thread only. A failed statement closes the connection; the next
    call opens a new one. Release notices come on a connection of their own (``listen``),
    closed by ``close`` or the next ``listen`` only. The table is created, if missing, in
    the schema the URL's connection uses first (its search path)."""

    def __init__(
        self,
        url: str,
        query_timeout: float,
        lease: str = LEASE,
        holder: Holder | None = None,
        gate: ReplicaGate | None = None,
    ) -> None:
        """``holder``: the node's, named in its sessions (:func:`session_name`); ``gate``:
        with replication, who may acquire."""
        self.url = url
        self.gate = gate
        self.query_timeout = query_timeout
        self.lease = lease
        self.holder = holder
        self._connection: psycopg.Connection[tuple[Any, ...]] | None = None
        self._notices: ReleaseNotices | None = None

    def _open(self) -> psycopg.Connection[tuple[Any, ...]]:
        """A new connection, named after the holder, its statements bounded."""
        ms = max(1, round(self.query_timeout * 1000))
        given = conninfo_to_dict(self.url).get("options") or ""
        named: dict[str, Any] = (  # else the URL's own, if any
            {"application_name": session_name(str(self.holder))} if self.holder else {}
        )
        return psycopg.connect(
            self.url,
            autocommit=True,
            # libpq takes whole seconds and treats 1 as 2: the client-side timeout of
            # bridge.ha.client is what bounds a connect to query-timeout.
            connect_timeout=max(2, math.ceil(self.query_timeout)),
            # after the URL's own options (a search path), which a keyword would replace
            options=f"{given} -c statement_timeout={ms} -c lock_timeout={ms}",
            **named,
        )

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._connection is not None and not self._connection.closed:
            return self._connection
        connection = self._open()
        try:
            ready = connection.execute(
                _READY, {"table": TABLE, "waiting": WAITING, "added": list(_ADDED)}
            ).fetchone()
            if not (ready and ready[0]):
                with connection.transaction():
                    # one connection at a time: two making a table at once fail either one
                    connection.execute(_CREATING, {"key": _CREATING_KEY})
                    for create in (_CREATE, _ADD_COLUMNS, _CREATE_WAITING):
                        connection.execute(create)
            connection.execute(_SEED, {"lease": self.lease})  # (waits on no row lock)
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        return connection

    def _one(
        self, statement: str, params: dict[str, object], *, lock: bool = True
    ) -> LeaseRow | None:
        """Run ``statement`` in a transaction that first locks the row, so that the
        statement reads the database's clock once the row is this connection's: a statement
        that waited for another's commit judges time after it, never before. The whole
        transaction goes in one round trip (a pipeline): a renewal costs the database's
        latency once, not once per statement."""
        values = {"lease": self.lease, **params}
        connection = None
        try:
            connection = self._connect()
            with _one_round_trip(connection):
                if lock:
                    connection.execute(_LOCK, values)
                cursor = connection.execute(statement, values)
            row = cursor.fetchone()
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as error:
            holders = _holders(connection) if connection is not None else ""
            self._drop()
            if holders:
                raise LeaseRowLocked(
                    f"{str(error).strip()}; the lease's row is locked by {holders}"
                ) from error
            raise
        except BaseException:
            self._drop()
            raise
        if row is None:
            return None
        holder, epoch, expires, now = row
        return LeaseRow(str(holder), int(epoch), int(expires), int(now))

    def acquire(self, me: Holder, reap: float) -> LeaseRow | None:
        """Take the lease for ``reap`` seconds of the database's clock: the row as taken, or
        None when another holder's lease has not expired. First end the expired holder's
        sessions, where this database user may (its own role's, or with
        ``pg_signal_backend``)."""
        self._end_stale(me)
        values: dict[str, object] = {"me": str(me), "reap": _ms(reap)}
        if self.gate is None:
            return self._one(_ACQUIRE, values)
        gated = {**values, "node": self.gate.node, "primary": self.gate.primary}
        return self._one(_ACQUIRE_GATED, gated)

    def mark_replica(self, me: Holder, epoch: int, replica: str) -> LeaseRow | None:
        """The live node ``me`` at ``epoch`` names the backup whose copy of its store is in
        sync (``node/run``; "" for none, before it confirms anything without it): None if
        the lease is no longer ``me``'s."""
        return self._one(_MARK_REPLICA, {"me": str(me), "epoch": epoch, "replica": replica})

    def replica(self) -> tuple[str, str]:
        """(``store_node``, ``replica``) as they stand."""
        try:
            row = self._connect().execute(_READ_REPLICA, {"lease": self.lease}).fetchone()
        except BaseException:
            self._drop()
            raise
        return ("", "") if row is None else (str(row[0]), str(row[1]))

    def _end_stale(self, me: Holder) -> None:
        values = {"lease": self.lease, "me": str(me), "prefix": SESSION_PREFIX}
        try:
            connection = self._connect()
            with suppress(psycopg.errors.InsufficientPrivilege):
                connection.execute(_END_STALE, values)
        except BaseException:
            self._drop()
            raise

    def renew(self, me: Holder, epoch: int, reap: float) -> LeaseRow | None:
        """Extend the lease by ``reap`` from the database's now: None when it is no longer
        this holder's at this epoch, or has expired."""
        return self._one(_RENEW, {"me": str(me), "epoch": epoch, "reap": _ms(reap)})

    def release(self, me: Holder, epoch: int) -> LeaseRow | None:
        """Give the lease up at once, if it is still this holder's at this epoch: the row
        as released (its ``now`` is when), or None."""
        return self._one(_RELEASE, {"me": str(me), "epoch": epoch})

    def waiting(self, me: Holder | None, window: float) -> tuple[str, ...]:
        """The backups waiting for the lease: those that said so (``me``, if given, says so
        now) within ``window`` seconds of the database's clock, the holder left out, as
        ``node/run``. Entries ten windows old are forgotten."""
        values: dict[str, object] = {"lease": self.lease, "window": _ms(window)}
        try:
            connection = self._connect()
            with _one_round_trip(connection):
                if me is not None:
                    connection.execute(_SEEN, {**values, "me": str(me)})
                connection.execute(_FORGET, values)
                cursor = connection.execute(_WAITING, values)
            rows = cursor.fetchall()
        except BaseException:
            self._drop()
            raise
        return tuple(str(holder) for (holder,) in rows)

    def read(self) -> LeaseRow:
        """The lease as it stands, with the database's time."""
        row = self._one(_READ, {}, lock=False)
        if row is None:
            raise LookupError(f"the lease row {self.lease!r} is missing from {TABLE}")
        return row

    def listen(self) -> ReleaseNotices:
        """A connection of its own listening for this lease's releases (replacing the
        previous one, if any)."""
        self._close_notices()
        connection = self._open()
        try:
            connection.execute(_LISTEN)
            row = connection.execute("SELECT current_schema()").fetchone()
        except BaseException:
            connection.close()
            raise
        schema = "" if row is None or row[0] is None else str(row[0])
        mine = "" if self.holder is None else str(self.holder)
        self._notices = ReleaseNotices(connection, f"{schema}.{self.lease}", mine)
        return self._notices

    def close(self) -> None:
        self._drop()
        self._close_notices()

    def _drop(self) -> None:
        """Close the statements' connection (one failed; the next call opens another). Not
        the notices': the reactor may be watching its descriptor."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def _close_notices(self) -> None:
        notices, self._notices = self._notices, None
        if notices is not None:
            notices.close()


@implementer(IReleaseNotices)
class ReleaseNotices:
    """The notices on a connection listening on :data:`RELEASED`. Counted: the releases
    of ``lease`` (schema and name) by another holder than ``me`` (a node's own release, at a
    soft failover, is not a reason for it to try)."""

    def __init__(
        self, connection: psycopg.Connection[tuple[Any, ...]], lease: str, me: str
    ) -> None:
        self._connection = connection
        self._lease = lease.encode()
        self._mine = (lease + "\n" + me).encode()

    def fileno(self) -> int:
        return self._connection.fileno()

    def received(self) -> int:
        """Read what libpq has (``consume_input`` does not block) and count this lease's
        notices; ``ConnectionError`` once the connection is lost or closed."""
        pgconn = self._connection.pgconn
        try:
            pgconn.consume_input()
        except psycopg.OperationalError as error:
            raise ConnectionError(f"listening for the lease's releases: {error}") from None
        count = 0
        while (notice := pgconn.notifies()) is not None:
            lease, _, _ = notice.extra.partition(b"\n")
            count += lease == self._lease and notice.extra != self._mine
        return count

    def close(self) -> None:
        self._connection.close()


@contextmanager
def _one_round_trip(connection: psycopg.Connection[tuple[Any, ...]]) -> Iterator[None]:
    """The statements run inside as one transaction sent in one round trip (a pipeline,
    its BEGIN and COMMIT written out: psycopg's ``transaction()`` would sync twice more).
    Their cursors hold their rows once the block ends."""
    with connection.pipeline():
        connection.execute("BEGIN")
        yield
        connection.execute("COMMIT")


class LeaseRowLocked(psycopg.OperationalError):
    """A lease statement timed out waiting on the lease's row, which other sessions hold."""


def _holders(connection: psycopg.Connection[tuple[Any, ...]]) -> str:
    """The sessions holding locks on the lease's rows, for an error message ("" if none,
    or if they cannot be read: the error is then told as it was). The failed transaction
    is rolled back first."""
    try:
        connection.rollback()
        rows = connection.execute(_HOLDERS).fetchall()
    except psycopg.Error:
        return ""
    return ", ".join(
        f"pid {pid} ({name or 'no application_name'}, {state}, its transaction open "
        f"{int(open_ms or 0):,} ms)"
        for pid, name, state, open_ms in rows
    )


def session_name(holder: str) -> str:
    """The ``application_name`` of the sessions of ``holder`` (``node/run``), cut to the
    63 bytes PostgreSQL keeps, as :data:`_END_STALE` compares it."""
    return (SESSION_PREFIX + holder).encode()[:63].decode(errors="ignore")


def _ms(seconds: float) -> int:
    return round(seconds * 1000)
