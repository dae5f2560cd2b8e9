"""Large message bodies as files in a folder beside the store, one file per message.

The node writes a large message's body chunk by chunk through a ``BodyFile``
(``IMessageStore.new_body``) before adding the message, and reads it back through
``open_body``; the add syncs the file (``sync_body``) before the message's row is
committed. Files no stored
message owns (bodies of non-durable messages, of sends cut off mid-message) are removed
when the store opens, so a half-written body is never delivered.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import attrs
from twisted.logger import Logger
from zope.interface import implementer

from bridge.message import LargeBody, Message
from bridge.store.errors import InvalidOperation, StoreError
from bridge.store.interfaces import IBodyWriter

LARGE_MESSAGES = "large-messages"
"""The folder beside the store holding large messages' bodies."""

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


@implementer(IBodyWriter)
class BodyFile:
    """A large body being written to its file, chunk by chunk (unbuffered: a chunk is
    already large)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self.name = str(path)
        self._file: IO[bytes] | None = open(path, "wb", buffering=0)  # noqa: SIM115
        self.size = 0

    def write(self, data: bytes) -> None:
        assert self._file is not None, "the body was finished or aborted"
        self._file.write(data)
        self.size += len(data)

    def finish(self) -> LargeBody:
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


def deleted_while_open(file: IO[bytes]) -> bool:
    """Whether ``file``'s name is gone (its body discarded while it was read), so that
    closing it frees the file."""
    try:
        return os.fstat(file.fileno()).st_nlink == 0
    except (OSError, ValueError):  # (closed already: nothing to free)
        return False


def close_body(file: IO[bytes]) -> None:
    """Close a body's file; a failure is logged (a file read, not written: nothing lost)."""
    try:
        file.close()
    except OSError as error:
        log.warn(
            "large message body {name} could not be closed: {error}", name=file.name, error=error
        )
