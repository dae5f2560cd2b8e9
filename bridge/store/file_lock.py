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

Release notices: a backup listening (``listen``) binds a datagram socket of its own in the
host's abstract socket namespace and names it in a file in ``notices/``; a release sends
each named socket a datagram once the lock is given up, so a backup tries the lock at once
instead of at its next ``lease-ping-time`` (as PostgreSQL's notices do for its lease).
Only nodes on one host hear each other so; a backup on another host of a shared
filesystem, like one whose live node died without releasing, takes the lock at its next
try.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from zope.interface import implementer

from bridge.ha.lock import LEASE, Holder, IReleaseNotices, IReleaseNotifier, LeaseRow
from bridge.store.sequence import ActivationSequence
from bridge.store.sqlite import FILENAME

LOCK_FILE = "live.lock"
WAITING = "waiting"
NOTICES = "notices"


@implementer(IReleaseNotifier)
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
        self._notices: FileNotices | None = None

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
        if cleared:
            with contextlib.suppress(OSError):  # (the lock is free: a notice only hastens)
                self._notify()
        return LeaseRow(str(me), epoch, 0, now) if cleared else None

    def listen(self) -> FileNotices:
        """A socket of its own hearing this lock's releases (replacing the previous one,
        if any)."""
        self._close_notices()
        self._notices = FileNotices.bind(self.directory / NOTICES)
        return self._notices

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
        self._close_notices()

    def _close_notices(self) -> None:
        notices, self._notices = self._notices, None
        if notices is not None:
            notices.close()

    def _notify(self) -> None:
        """Tell every listening backup but this node's own socket that the lock is free; a
        name whose socket is gone (its node stopped or died) is forgotten."""
        folder = self.directory / NOTICES
        mine = None if self._notices is None else self._notices.name
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.setblocking(False)
            for entry in folder.glob("*"):
                if entry.name == mine:
                    continue
                try:
                    sender.sendto(b"released", _address(entry.name))
                except (ConnectionRefusedError, FileNotFoundError):
                    entry.unlink(missing_ok=True)
                except OSError:
                    continue  # (a full queue: that backup has a notice to read already)

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


def _address(name: str) -> bytes:
    """The abstract socket address of a notices file's ``name``."""
    return b"\0txbridge-lock-" + name.encode()


@implementer(IReleaseNotices)
class FileNotices:
    """A backup's socket for release notices, and its name in the ``notices/`` folder: the
    reactor watches ``fileno`` and reads with ``received`` (``IReleaseNotices``)."""

    def __init__(self, sock: socket.socket, entry: Path) -> None:
        self._socket = sock
        self._entry = entry
        self.name = entry.name

    @classmethod
    def bind(cls, folder: Path) -> FileNotices:
        folder.mkdir(parents=True, exist_ok=True)
        entry = folder / uuid.uuid4().hex
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.bind(_address(entry.name))
            entry.touch()
        except BaseException:
            sock.close()
            raise
        return cls(sock, entry)

    def fileno(self) -> int:
        return self._socket.fileno()

    def received(self) -> int:
        """The notices that arrived, read without blocking; ``ConnectionError`` once
        closed."""
        count = 0
        while True:
            try:
                self._socket.recv(64)
            except BlockingIOError:
                return count
            except OSError as error:
                raise ConnectionError(f"listening for the lock's releases: {error}") from None
            count += 1

    def close(self) -> None:
        self._entry.unlink(missing_ok=True)
        self._socket.close()
