"""The activation sequence in a node's own SQLite store: the live lock of a replication pair
without a lease (docs/ha.md, "Quorum vote"), the epoch part of the shared store's file lock
(:mod:`bridge.store.file_lock`).

The store's ``live_lock`` row names the holder and its epoch. A node raises the epoch by
one at each activation, before it serves, once the quorum vote granted that sequence; its
store's writer then checks the holder and epoch inside every write transaction
(:data:`bridge.store.schema.CHECK_TOKEN`), so a batch written under an older sequence
fails. The row is copied with the store (:data:`bridge.store.snapshot.TABLES`): a backup's
copy carries its live node's sequence, and the backup takes the next one. A newer sequence
seen elsewhere (a voter's reply, a backup's announcement) is recorded with :meth:`seen`:
from then on the store refuses this node's writes.

Blocking: call from one thread only (the live lock's, :mod:`bridge.ha.client`).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from zope.interface import implementer

from bridge.ha.lock import LEASE, Holder, ILiveLock, LeaseRow
from bridge.store.schema import connect

_TAKE = "UPDATE live_lock SET holder = ?, epoch = epoch + 1 WHERE name = ? RETURNING epoch"
_READ = "SELECT holder, epoch FROM live_lock WHERE name = ?"
_CLEAR = "UPDATE live_lock SET holder = '' WHERE name = ? AND holder = ? AND epoch = ?"
_SEEN = "UPDATE live_lock SET holder = '', epoch = ? WHERE name = ? AND epoch < ?"


@implementer(ILiveLock)
class ActivationSequence:
    """The live lock kept in the SQLite store at ``store`` alone: who holds it is decided
    elsewhere (the quorum vote), this records it. ``query_timeout`` bounds a wait for the
    store's write lock."""

    def __init__(
        self,
        store: Path,
        query_timeout: float,
        *,
        clock: Callable[[], float] = time.time,
        lease: str = LEASE,
    ) -> None:
        self.store = store
        self.query_timeout = query_timeout
        self.lease = lease
        self._clock = clock
        self._connection: sqlite3.Connection | None = None

    # -- ILiveLock -----------------------------------------------------------------------
    def acquire(self, me: Holder, reap: float) -> LeaseRow | None:
        """Record ``me`` as the holder at the next sequence."""
        now = self._now()
        return LeaseRow(str(me), self._take(me), now + _ms(reap), now)

    def renew(self, me: Holder, epoch: int, reap: float) -> LeaseRow | None:
        """The store still names ``me`` at ``epoch`` or later (a live node that went on
        without its backup moved on itself; a newer sequence seen clears the holder)."""
        now = self._now()
        holder, stored = self._read()
        if holder != str(me) or stored < epoch:
            return None
        return LeaseRow(holder, stored, now + _ms(reap), now)

    def release(self, me: Holder, epoch: int) -> LeaseRow | None:
        now = self._now()
        return LeaseRow(str(me), epoch, 0, now) if self._clear(me, epoch) else None

    def waiting(self, me: Holder | None, window: float) -> tuple[str, ...]:
        """Nobody waits in the store: a backup is known by its live node's replication."""
        return ()

    def read(self) -> LeaseRow:
        """The holder the store records, as held: on a backup, its copy's live node."""
        now = self._now()
        holder, epoch = self._read()
        return LeaseRow(holder, epoch, now if holder else 0, now)

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    # -- the sequence --------------------------------------------------------------------
    def seen(self, sequence: int) -> bool:
        """A newer ``sequence`` exists elsewhere: record it (clearing the holder), so that
        the store refuses this node's writes from now on. Whether it was newer."""
        with self._transaction() as connection:
            changed = connection.execute(_SEEN, (sequence, self.lease, sequence)).rowcount
        return changed > 0

    def _connected(self) -> sqlite3.Connection:
        if self._connection is None:
            self._connection = connect(self.store, self.query_timeout)
        return self._connection

    def _read(self) -> tuple[str, int]:
        row = self._connected().execute(_READ, (self.lease,)).fetchone()
        if row is None:
            raise LookupError(f"{self.store}: the live lock's row {self.lease!r} is missing")
        return str(row[0]), int(row[1])

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on the store: committed if the block ends, else rolled
        back."""
        connection = self._connected()
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def _take(self, me: Holder) -> int:
        """Record ``me`` as the holder with the next epoch: that epoch."""
        with self._transaction() as connection:
            row = connection.execute(_TAKE, (str(me), self.lease)).fetchone()
            if row is None:
                raise LookupError(f"{self.store}: the live lock's row {self.lease!r} is missing")
        return int(row[0])

    def _clear(self, me: Holder, epoch: int) -> bool:
        """Clear the holder if it is still ``me`` at ``epoch``: whether it was."""
        with self._transaction() as connection:
            changed = connection.execute(_CLEAR, (self.lease, str(me), epoch)).rowcount
        return changed > 0

    def _now(self) -> int:
        return _ms(self._clock())


def _ms(seconds: float) -> int:
    return round(seconds * 1000)
