"""A SQLite store copied while it is written: the live node's side and the backup's.

The live node takes a :class:`Snapshot` on its writer thread between two batches: a read
transaction (WAL keeps its view of the file at that moment however the writer goes on)
and a hard link to every large body it holds (so that a body acknowledged meanwhile can
still be read). It then reads the rows in chunks, off the reactor, while serving; every
batch written after the snapshot is sent to the backup after them.

The backup's :class:`ReplicaFile` starts its store over, empty, inserts those rows and
writes the bodies; then the batches are applied by an ordinary writer
(``Writer.open_replica``).
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from bridge.store.errors import StoreError
from bridge.store.large import BodyFiles, sync_body
from bridge.store.op_codec import Row, encode_rows
from bridge.store.schema import SCHEMA_VERSION, connect

TABLES = ("store_state", "queues", "messages", "message_refs", "duplicate_ids", "live_lock")
"""What a copy holds, in the order it is sent: paged messages do not outlive the node, the
schema version is the backup's own. The live lock's row carries the live node's activation
sequence (:mod:`bridge.store.sequence`), which a backup that takes over raises."""
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

    def chunks(self, limit: int) -> Iterator[tuple[str, bytes]]:
        """Every table's rows, encoded (``op_codec.encode_rows``) in chunks of about
        ``limit`` bytes: each chunk's row count is scaled from the last chunk's size.
        Meant for a thread of its own: reading and encoding are the copy's work."""
        for table in TABLES:
            cursor = self._connection.execute(f"SELECT * FROM {table}")
            count = 64
            while rows := cursor.fetchmany(count):
                encoded = encode_rows(rows)
                yield table, encoded
                count = min(100_000, max(1, count * limit // max(len(encoded), 1)))

    def close(self) -> None:
        """End the read transaction and drop the links."""
        self._connection.close()
        shutil.rmtree(self._links, ignore_errors=True)


class ReplicaFile:
    """A backup's store being filled from its live node's snapshot: begun empty (what
    it held before is gone), rows inserted as they come, one transaction per chunk;
    ``finish`` syncs it all to disk."""

    def __init__(self, path: Path, busy_timeout: float, version: int) -> None:
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
        self._connection = connect(path, busy_timeout)
        self._connection.execute("PRAGMA synchronous = OFF")  # one sync at the end

    def insert(self, table: str, rows: list[Row]) -> None:
        if table not in TABLES:
            raise StoreError(f"a snapshot chunk names table {table!r}, not one of {TABLES}")
        if not rows:
            return
        marks = ",".join("?" * len(rows[0]))
        cursor = self._connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            cursor.executemany(f"INSERT OR REPLACE INTO {table} VALUES ({marks})", rows)
            cursor.execute("COMMIT")
        except sqlite3.Error as error:
            cursor.execute("ROLLBACK")
            raise StoreError(f"{self.path}: a snapshot chunk of {table} failed: {error}") from error

    def finish(self) -> None:
        """Everything is in: sync the file and the bodies (a backup that says it is in
        sync holds it all on disk), and close."""
        self._connection.execute("PRAGMA synchronous = FULL")
        self._connection.execute("PRAGMA wal_checkpoint(FULL)")
        self._connection.close()
        folder = self.bodies.path_for(0).parent
        if folder.is_dir():
            for body in folder.iterdir():
                sync_body(str(body))

    def abort(self) -> None:
        self._connection.close()
