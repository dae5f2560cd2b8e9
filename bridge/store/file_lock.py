"""The live lock of nodes that share a store directory without a database server: an
exclusive ``flock`` on ``live.lock`` in the directory, and the holder's epoch in the SQLite
store beside it (table ``live_lock``), for two nodes on one machine or on a shared
filesystem (Artemis's shared-store file lock).

- acquire: take the ``flock`` without waiting; once held, raise the epoch in the store in
  one write transaction. The kernel gives the lock up when its holder dies, however it
  dies, so a backup takes over at its next try; a live node that merely hangs keeps it.
- renew: confirm the lock is still this holder's: ``live.lock`` is still the file locked
  (not removed or replaced) and the store still carries this holder and epoch.
- release: clear the holder in the store (keeping the epoch), then unlock.

Fencing: the store's writer checks the holder and epoch inside each write transaction,
just before its commit (:class:`bridge.store.writer.Writer`). SQLite runs one write
transaction at a time, so a new holder's epoch raise comes either before a stale holder's
commit (which then finds the new epoch and writes nothing) or after it (and the new holder
loads the store with that write in it): a stale holder, one whose lock was lost on a shared
filesystem or whose lock file was removed, never writes under a newer epoch.

Backups say that they wait with a file each in ``waiting/`` (named by their run id, their
``node/run`` inside, its modification time when last seen), so that they never take the
store's write lock for it. Times are the host's clock, for status only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from zope.interface import implementer

from bridge.ha.lock import LEASE, Holder, ILiveLock, LeaseRow
from bridge.store.schema import connect
from bridge.store.sqlite import FILENAME

LOCK_FILE = "live.lock"
WAITING = "waiting"

_TAKE = "UPDATE live_lock SET holder = ?, epoch = epoch + 1 WHERE name = ? RETURNING epoch"
_READ = "SELECT holder, epoch FROM live_lock WHERE name = ?"
_CLEAR = "UPDATE live_lock SET holder = '' WHERE name = ? AND holder = ? AND epoch = ?"


@implementer(ILiveLock)
class FileLock:
    """The lock on ``directory`` (the shared store's), its calls blocking: call from one
    thread only. ``query_timeout`` bounds a wait for the store's write lock."""

    def __init__(
        self,
        directory: Path,
        query_timeout: float,
        *,
        filename: str = FILENAME,
        clock: Callable[[], float] = time.time,
        lease: str = LEASE,
    ) -> None:
        self.directory = directory
        self.path = directory / LOCK_FILE
        self.store = directory / filename
        self.query_timeout = query_timeout
        self.lease = lease
        self._clock = clock
        self._fd: int | None = None
        self._connection: sqlite3.Connection | None = None

    # -- ILiveLock -----------------------------------------------------------------------
    def acquire(self, me: Holder, reap: float) -> LeaseRow | None:
        if self._fd is not None and not self._still_locked():
            self._unlock()
        if self._fd is None and not self._lock():
            return None
        now = self._now()
        try:
            epoch = self._take(me)
        except BaseException:
            self._unlock()
            raise
        with contextlib.suppress(FileNotFoundError):
            (self.directory / WAITING / me.run).unlink()
        return LeaseRow(str(me), epoch, now + _ms(reap), now)

    def renew(self, me: Holder, epoch: int, reap: float) -> LeaseRow | None:
        now = self._now()
        if self._fd is None or not self._still_locked():
            self._unlock()
            return None
        holder, stored = self._read()
        if (holder, stored) != (str(me), epoch):
            return None
        return LeaseRow(holder, stored, now + _ms(reap), now)

    def release(self, me: Holder, epoch: int) -> LeaseRow | None:
        now = self._now()
        try:
            cleared = self._fd is not None and self._clear(me, epoch)
        finally:
            self._unlock()
        return LeaseRow(str(me), epoch, 0, now) if cleared else None

    def waiting(self, me: Holder | None, window: float) -> tuple[str, ...]:
        folder = self.directory / WAITING
        folder.mkdir(parents=True, exist_ok=True)
        if me is not None:
            mine = folder / me.run
            mine.write_text(str(me))
            os.utime(mine)  # the same text again still marks it seen now
        holder, _ = self._read()
        now = self._clock()
        found = []
        for entry in folder.iterdir():
            try:
                age = now - entry.stat().st_mtime
                name = entry.read_text()
            except FileNotFoundError:  # forgotten by another node meanwhile
                continue
            if age > window * 10:
                entry.unlink(missing_ok=True)
            elif age <= window and name != holder:
                found.append(name)
        return tuple(sorted(found))

    def read(self) -> LeaseRow:
        """The holder the store records, as held: a holder that died keeps its record until
        the next one acquires (at a backup's next try)."""
        now = self._now()
        holder, epoch = self._read()
        return LeaseRow(holder, epoch, now if holder else 0, now)

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
        self._unlock()

    # -- the file ------------------------------------------------------------------------
    def _lock(self) -> bool:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def _still_locked(self) -> bool:
        """The file locked is still ``live.lock``: not removed, nor replaced by another,
        which another node could lock."""
        assert self._fd is not None
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(self._fd)
        return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)

    def _unlock(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # gives the flock up with the last descriptor of its file

    # -- the store -----------------------------------------------------------------------
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
