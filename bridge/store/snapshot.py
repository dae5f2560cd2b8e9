"""A SQLite store copied while it is written: the live node's side and the backup's.

The live node takes a :class:`Snapshot` on its writer thread between two batches: a read
transaction (WAL keeps its view of the file at that moment however the writer goes on)
and a hard link to every large body it holds (so that a body acknowledged meanwhile can
still be read). Off the reactor, while the node serves, SQLite's online backup copies the
database as that read transaction sees it, page by page in C, to a file beside the links,
which is sent in chunks as it is (a copy of pages, as Artemis copies its journal files:
no row is decoded or encoded); every batch written after the snapshot is sent after it.

The backup's :class:`ReplicaFile` writes those bytes to a file of its own, syncs it and
puts it in place of its store, and writes the bodies (the live lock's row comes along: it
carries the live node's activation sequence, which a backup that takes over without a
lease raises, :mod:`bridge.store.sequence`); then the batches are applied by an ordinary writer
(``Writer.open_replica``). Paged messages come along and go at the next start, as a
node's own do.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from bridge.store.errors import StoreError
from bridge.store.large import BodyFiles, sync_body
from bridge.store.schema import SCHEMA_VERSION, connect

SNAPSHOT = "replication-snapshot"
"""The folder, beside the store, of the links to the bodies a snapshot holds."""


class Snapshot:
    """The store's rows and large bodies as they were when it was taken."""

    def __init__(self, path: Path) -> None:
        """Take it: on the writer thread, between two batches."""
        self.version = SCHEMA_VERSION
        self._bodies = BodyFiles(path.parent)
        self._links = path.parent / SNAPSHOT
        shutil.rmtree(self._links, ignore_errors=True)
        self._links.mkdir(parents=True)
        self._connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            self._connection.execute("BEGIN")
            self.large_ids = [
                message_id
                for (message_id,) in self._connection.execute(
                    "SELECT id FROM messages WHERE large IS NOT NULL ORDER BY id"
                )
            ]
            for message_id in self.large_ids:
                (self._links / f"{message_id}.msg").hardlink_to(self._bodies.path_for(message_id))
        except BaseException:
            self.close()
            raise

    def body_path(self, message_id: int) -> Path:
        """The snapshot's link to a large body it holds."""
        return self._links / f"{message_id}.msg"

    def chunks(self, size: int) -> Iterator[bytes]:
        """The database file as the snapshot sees it, in chunks of ``size`` bytes. Meant
        for a thread of its own: the first chunk waits for the whole backup (SQLite's,
        which leaves the GIL while it copies)."""
        copy = self._links / "store.sqlite"
        target = sqlite3.connect(copy, isolation_level=None)
        try:
            self._connection.backup(target)
        finally:
            target.close()
        with open(copy, "rb") as file:
            while data := file.read(size):
                yield data

    def close(self) -> None:
        """End the read transaction and drop the links."""
        self._connection.close()
        shutil.rmtree(self._links, ignore_errors=True)


class ReplicaFile:
    """A backup's store being replaced by its live node's snapshot: what it held before
    is gone from the start; the snapshot's bytes go to a file beside it, which ``finish``
    syncs and puts in its place."""

    def __init__(self, path: Path, version: int) -> None:
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"the live node's store has schema version {version}, this node's "
                f"{SCHEMA_VERSION}: a backup replicates only its own version"
            )
        self.path = path
        self.bodies = BodyFiles(path.parent)
        for name in (path.name, f"{path.name}-wal", f"{path.name}-shm"):
            (path.parent / name).unlink(missing_ok=True)
        shutil.rmtree(self.bodies.path_for(0).parent, ignore_errors=True)
        self._part = path.with_name(f"{path.name}.part")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self._part, "wb")  # noqa: SIM115 (closed by finish or abort)

    def write(self, data: bytes) -> None:
        self._file.write(data)

    def finish(self, busy_timeout: float) -> None:
        """Everything is in: sync the file and the bodies (a backup that says it is in
        sync holds it all on disk), and put the file in place."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._part, self.path)
        try:
            connection = connect(self.path, busy_timeout)
        except sqlite3.Error as error:
            raise StoreError(
                f"{self.path}: the live node's copy is not a store: {error}"
            ) from error
        try:
            connection.execute("PRAGMA wal_checkpoint(FULL)")
        finally:
            connection.close()
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        folder = self.bodies.path_for(0).parent
        if folder.is_dir():
            for body in folder.iterdir():
                sync_body(str(body))

    def abort(self) -> None:
        self._file.close()
        self._part.unlink(missing_ok=True)
