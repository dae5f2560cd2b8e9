"""Large message bodies as files in a folder beside the store, one file per message.

The node writes a large message's body chunk by chunk through a ``BodyFile``
(``IMessageStore.new_body``) before adding the message, and reads it back through
``open_body``; the add syncs the file (``sync_body``) before the message's row is
committed. Files no stored
message owns (bodies of non-durable messages, of sends cut off mid-message) are removed
when the store opens, so a half-written body is never delivered.

A discarded body's file is kept for the next body to be written over (``FreeBodies``),
up to a bound, rather than deleted: see there why.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import attrs
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from zope.interface import implementer

from bridge.message import LargeBody, Message
from bridge.store.errors import InvalidOperation, StoreError
from bridge.store.interfaces import IBodyWriter

LARGE_MESSAGES = "large-messages"
"""The folder beside the store holding large messages' bodies."""

FREE_BODIES = "large-messages-free"
"""The folder beside the store holding discarded bodies' files, kept to be written over."""

FREE_FILES = 16
"""The most discarded bodies' files kept for reuse."""

FREE_BYTES = 256 * 1024 * 1024
"""The most bytes those files hold together."""

log = Logger()


def sync_body(path: str) -> None:
    """Make a large body's file and its name durable; ``InvalidOperation`` if it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as error:
        raise InvalidOperation(f"large message body {path} cannot be opened: {error}") from None
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    folder = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def delete_body(path: str) -> None:
    """Delete a large body file; a failure is logged (the next open deletes it)."""
    try:
        Path(path).unlink(missing_ok=True)
    except OSError as error:
        log.warn(
            "large message body {path} could not be deleted: {error}; it is deleted when "
            "the store next opens",
            path=path,
            error=error,
        )


@attrs.frozen
class BodyFiles:
    """The folder ``data_dir/large-messages`` and its files."""

    data_dir: Path

    def path_for(self, message_id: int) -> Path:
        return self.data_dir / LARGE_MESSAGES / f"{message_id}.msg"

    def attach(self, store: str, message: Message, message_id: int, size: int) -> Message:
        """``message`` (a large one's header) with its body file; ``StoreError`` if the
        file is missing."""
        path = self.path_for(message_id)
        if not path.is_file():
            raise StoreError(f"{store}: large message {message_id} has no body at {path}")
        return attrs.evolve(message, large=LargeBody(str(path), size))

    def remove_orphans(self, owned_ids: Iterable[int]) -> None:
        """Delete every body file whose message is not among ``owned_ids``."""
        folder = self.data_dir / LARGE_MESSAGES
        if not folder.is_dir():
            return
        owned = {self.path_for(message_id).name for message_id in owned_ids}
        for file in folder.iterdir():
            if file.name not in owned:
                file.unlink(missing_ok=True)


@attrs.define(eq=False)
class BodyReaders:
    """Large bodies' files open for reading, by path, and the discards waiting for their
    last reader. A body discarded while it is read goes only once its readers are done:
    so its file is never freed by a reader's close on the reactor thread, nor written over
    (``FreeBodies``) while still read. On the reactor thread."""

    _open: dict[str, set[IO[bytes]]] = attrs.field(factory=dict, init=False)
    _waiting: dict[str, list[Deferred[None]]] = attrs.field(factory=dict, init=False)

    def opened(self, file: IO[bytes]) -> None:
        self._open.setdefault(file.name, set()).add(file)

    def closed(self, file: IO[bytes]) -> list[Deferred[None]]:
        """``file`` is read (closing it twice counts once, so that it never releases
        another reader's hold): the discards of its body that now may go."""
        readers = self._open.get(file.name)
        if readers is None or file not in readers:
            return []
        readers.remove(file)
        if readers:
            return []
        del self._open[file.name]
        return self._waiting.pop(file.name, [])

    def wait(self, path: str) -> Deferred[None] | None:
        """A discard of ``path``, to go once its readers are done (it fires then); None
        if nothing reads it."""
        if path not in self._open:
            return None
        waiting: Deferred[None] = Deferred()
        self._waiting.setdefault(path, []).append(waiting)
        return waiting

    def take_waiting(self) -> dict[str, list[Deferred[None]]]:
        """Every discard still waiting (the store closes: they go now)."""
        waiting, self._waiting = self._waiting, {}
        return waiting


@attrs.define(eq=False)
class FreeBodies:
    """Files of discarded large bodies, kept for the next bodies to be written over.

    A new file costs the file system its blocks and the page cache its pages, and deleting
    it gives both back (and, on a disk mounted with ``discard``, trims its blocks): writing
    over a kept file whose blocks and pages are there costs about half the CPU, syncs
    sooner, and deletes nothing (Artemis keeps its journal's files for the same reason,
    ``journal-pool-files``). At most ``files`` files holding ``max_bytes`` together; a file
    another name links to (a replication snapshot's, a batch's pin) is not kept, since its
    bytes are still read there. None outlive the store: ``clear`` empties the folder when
    the store opens. ``keep`` runs on the writer thread, ``take`` on the reactor thread."""

    folder: Path
    files: int = FREE_FILES
    max_bytes: int = FREE_BYTES
    _free: list[tuple[Path, int]] = attrs.field(factory=list, init=False)
    _bytes: int = attrs.field(default=0, init=False)
    _named: int = attrs.field(default=0, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    def clear(self) -> None:
        """Delete every kept file (the store opens: none is known)."""
        with self._lock:
            self._free.clear()
            self._bytes = 0
        shutil.rmtree(self.folder, ignore_errors=True)

    def keep(self, path: str) -> bool:
        """Keep the discarded body file at ``path`` (it is moved here); False where it
        may not be kept (no room, linked elsewhere, gone), to be deleted instead."""
        try:
            stat = os.stat(path)
            with self._lock:
                if (
                    stat.st_nlink != 1
                    or len(self._free) >= self.files
                    or self._bytes + stat.st_size > self.max_bytes
                ):
                    return False
                self._named += 1
                free = self.folder / f"{self._named}.free"
                self.folder.mkdir(exist_ok=True)
                os.rename(path, free)
                self._free.append((free, stat.st_size))
                self._bytes += stat.st_size
        except OSError:
            return False
        return True

    def discard(self, path: str, reusable: bool) -> None:
        """A body file no message needs: kept where ``reusable`` (nothing reads it) and
        ``keep`` takes it, deleted otherwise."""
        if not (reusable and self.keep(path)):
            delete_body(path)

    def take(self, path: Path) -> int | None:
        """Move a kept file to ``path`` to be written over: the bytes it holds, or None
        where none is kept (or it cannot be moved)."""
        with self._lock:
            if not self._free:
                return None
            free, size = self._free.pop()  # (the latest: its pages the likeliest cached)
            self._bytes -= size
        try:
            os.rename(free, path)
        except OSError:
            Path(free).unlink(missing_ok=True)
            return None
        return size


@implementer(IBodyWriter)
class BodyFile:
    """A large body being written to its file, chunk by chunk (unbuffered: a chunk is
    already large): a new file, or, where ``free`` keeps one, a discarded body's file
    written over and cut to this body's size at the end."""

    def __init__(self, path: Path, free: FreeBodies | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self.name = str(path)
        self._reused = None if free is None else free.take(path)
        mode = "wb" if self._reused is None else "r+b"
        self._file: IO[bytes] | None = open(path, mode, buffering=0)  # noqa: SIM115
        self.size = 0

    def write(self, data: bytes | memoryview) -> None:
        assert self._file is not None, "the body was finished or aborted"
        self._file.write(data)
        self.size += len(data)

    def finish(self) -> LargeBody:
        if self._file is not None and self._reused is not None and self._reused > self.size:
            self._file.truncate(self.size)
        self._close()
        return LargeBody(str(self._path), self.size)

    def abort(self) -> None:
        if self._file is not None:
            self._close()
            self._path.unlink(missing_ok=True)

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def open_body(body: LargeBody) -> IO[bytes]:
    """A stored large body, to read in chunks; ``OSError`` if it cannot be opened."""
    return open(body.path, "rb")


def close_body(file: IO[bytes]) -> None:
    """Close a body's file; a failure is logged (a file read, not written: nothing lost)."""
    try:
        file.close()
    except OSError as error:
        log.warn(
            "large message body {name} could not be closed: {error}", name=file.name, error=error
        )
