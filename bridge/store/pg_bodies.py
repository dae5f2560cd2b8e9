"""Large message bodies on PostgreSQL: chunk rows in the database, files as a local cache.

The durable copy of a body is its rows in ``large_bodies`` (``CHUNK`` bytes each), written
in the transaction that adds the message and deleted in the one that removes it, so a
backup that takes over on the shared database reads every body the live node confirmed.
The node still reads and writes bodies as files in its data directory (``BodyFiles``): a
send writes the file chunk by chunk, the add copies it into rows, and a body the node did
not write in this run (after a restart, after a failover) is written back from the rows to
its file when its message is loaded or read. A chunk at a time either way, so no body is
ever whole in memory. Everything here runs on the store's writer thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from bridge.message import LargeBody, Message
from bridge.store.errors import InvalidOperation, StoreError
from bridge.store.large import BodyFiles
from bridge.store.operations import AddMessage, CommitTransaction, Operation, Outcome

if TYPE_CHECKING:
    from bridge.store.pg_schema import PgCursor

CHUNK = 256 * 1024
"""Bytes per row: big enough that a 100 MiB body is 400 rows, small enough to hold."""


def check_body(add: AddMessage) -> None:
    """``InvalidOperation`` unless ``add``'s body file is there, whole."""
    assert add.large_path is not None
    try:
        size = os.stat(add.large_path).st_size
    except OSError as error:
        raise InvalidOperation(
            f"large message body {add.large_path} cannot be opened: {error}"
        ) from None
    if size != add.large_size:
        raise InvalidOperation(
            f"large message body {add.large_path} holds {size} bytes, not {add.large_size}"
        )


def _added(operations: Sequence[Operation], outcomes: Sequence[Outcome]) -> Iterator[AddMessage]:
    """The adds of large messages that took effect (a committed transaction's included)."""
    for operation, outcome in zip(operations, outcomes, strict=True):
        if outcome is not None:
            continue
        if isinstance(operation, AddMessage) and operation.large_path is not None:
            yield operation
        elif isinstance(operation, CommitTransaction):
            yield from _added(operation.operations, [None] * len(operation.operations))


@attrs.define
class PgBodies:
    """The bodies of one PostgreSQL store: its rows, and ``files``, their local cache."""

    files: BodyFiles
    _fresh: set[str] = attrs.field(factory=set)
    """Cache files this process wrote or checked against the rows: only these are read
    as they are. Any other file of the folder may be stale (a body of an id another node
    reused after this one crashed), so it is written again from the rows first."""

    def copy_added(
        self, cursor: PgCursor, operations: Sequence[Operation], outcomes: Sequence[Outcome]
    ) -> None:
        """Copy the bodies of the large messages that ``operations`` added into rows, in
        the batch's transaction; ``StoreError`` (the batch fails) if a file cannot be read."""
        for add in _added(operations, outcomes):
            assert add.large_path is not None
            try:
                self._copy(cursor, add.message_id, add.large_path)
            except OSError as error:
                raise StoreError(
                    f"large message body {add.large_path} could not be read: {error}"
                ) from None
            self._fresh.add(add.large_path)

    @staticmethod
    def _copy(cursor: PgCursor, message_id: int, path: str) -> None:
        connection = cursor.connection
        with open(path, "rb") as file:
            for seq, chunk in enumerate(iter(lambda: file.read(CHUNK), b"")):
                # A nested pipeline syncs on exit: each chunk is sent before the next is
                # read, so the client holds one chunk, not the whole body.
                with connection.pipeline():
                    cursor.execute(
                        "INSERT INTO large_bodies (message_id, seq, data) VALUES (%s, %s, %b)",
                        (message_id, seq, chunk),
                    )

    def attach(
        self, cursor: PgCursor, store: str, message: Message, message_id: int, size: int
    ) -> Message:
        """``message`` (a large one's header) with its body's cache file, written from the
        rows unless this process already did; ``StoreError`` if the body is not stored."""
        path = self.files.path_for(message_id)
        if str(path) not in self._fresh:
            self._restore(cursor, store, message_id, size, path)
            self._fresh.add(str(path))
        return attrs.evolve(message, large=LargeBody(str(path), size))

    def _restore(
        self, cursor: PgCursor, store: str, message_id: int, size: int, path: Path
    ) -> None:
        row = cursor.execute(
            "SELECT count(*), coalesce(sum(octet_length(data)), 0) FROM large_bodies"
            " WHERE message_id = %s",
            (message_id,),
        ).fetchone()
        assert row is not None
        chunks, stored = row
        if chunks == 0 and path.is_file() and path.stat().st_size == size:
            return  # written by a version-1 store, which kept bodies only as files
        if stored != size:
            raise StoreError(
                f"{store}: large message {message_id} has {stored} of its {size} body bytes stored"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        with open(partial, "wb") as file:
            for seq in range(chunks):
                found = cursor.execute(
                    "SELECT data FROM large_bodies WHERE message_id = %s AND seq = %s",
                    (message_id, seq),
                ).fetchone()
                if found is None:
                    raise StoreError(f"{store}: large message {message_id} lacks chunk {seq}")
                file.write(found[0])
        os.replace(partial, path)  # a reader of the old file keeps reading the old one

    def forget(self, path: str) -> None:
        """The body's file was deleted: read it from the rows again should it be needed."""
        self._fresh.discard(path)
