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
import time
from collections.abc import Callable
from pathlib import Path

from zope.interface import implementer

from bridge.ha.lock import LEASE, Holder, ILiveLock, LeaseRow
from bridge.store.sequence import ActivationSequence
from bridge.store.sqlite import FILENAME

LOCK_FILE = "live.lock"
WAITING = "waiting"


@implementer(ILiveLock)
class FileLock(ActivationSequence):
    """The lock on ``directory`` (the shared store's), its calls blocking: call from one
    thread only. ``query_timeout`` bounds a wait for the store's write lock. The epoch is
    the store's (:class:`ActivationSequence`); the ``flock`` decides who may raise it."""

    def __init__(
        self,
        directory: Path,
        query_timeout: float,
        *,
        filename: str = FILENAME,
        clock: Callable[[], float] = time.time,
        lease: str = LEASE,
    ) -> None:
        super().__init__(directory / filename, query_timeout, clock=clock, lease=lease)
        self.directory = directory
        self.path = directory / LOCK_FILE
        self._fd: int | None = None

    # -- ILiveLock -----------------------------------------------------------------------
    def acquire(self, me: Holder, reap: float) -> LeaseRow | None:
        if self._fd is not None and not self._still_locked():
            self._unlock()
        if self._fd is None and not self._lock():
            return None
        try:
            row = super().acquire(me, reap)
        except BaseException:
            self._unlock()
            raise
        with contextlib.suppress(FileNotFoundError):
            (self.directory / WAITING / me.run).unlink()
        return row

    def renew(self, me: Holder, epoch: int, reap: float) -> LeaseRow | None:
        if self._fd is None or not self._still_locked():
            self._unlock()
            return None
        return super().renew(me, epoch, reap)

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

    def close(self) -> None:
        super().close()
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
