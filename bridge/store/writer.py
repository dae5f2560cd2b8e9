"""The SQLite writer: the one SQLite connection of a store, used only on its writer thread.

It opens the file, reads back everything on start, and writes each batch as one SQLite
transaction, which the commit makes durable (WAL with ``synchronous=FULL``: the commit
returns after the write-ahead log is synced to disk). On start it also empties the pages
(paged non-durable messages do not outlive the node) and deletes large-message files no
stored message owns: bodies of non-durable messages, and of sends cut off mid-message,
which are therefore never delivered half.

Delivery counts are stored when a delivery comes back (a consumer closed, a NACK), not
before each delivery. So a close records that the node stopped cleanly, and an open that
finds no such record (the node was killed or crashed) counts one more delivery for every
stored message: any of them may have been delivered unacknowledged just before, and its
next delivery must say "redelivered" (JMS's rule: the flag means "may have been seen").
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from zope.interface import implementer

from bridge.ha.lock import LeaseToken
from bridge.message import Message
from bridge.store.errors import CommitFailed, Fenced
from bridge.store.interfaces import IStoreWriter
from bridge.store.large import FREE_BODIES, BodyFiles, FreeBodies
from bridge.store.operations import Operation, Outcome, WriterState
from bridge.store.records import Recovered
from bridge.store.recovery import load, missing, stored_message
from bridge.store.schema import CHECK_TOKEN, connect
from bridge.store.sqlite_operations import apply_all, load_state, save_state

_MOVE_TOKEN = "UPDATE live_lock SET holder = :holder, epoch = :epoch WHERE name = :lease"
_SET_CLEAN_STOP = "INSERT OR REPLACE INTO store_state (key, value) VALUES ('clean_stop', ?)"


@implementer(IStoreWriter)
class Writer:
    """Opens, recovers, writes batches and closes, on the writer thread."""

    def __init__(self, path: Path, busy_timeout: float, token: LeaseToken | None = None) -> None:
        self.path = path
        self.token = token
        """With HA on a shared store directory: the fencing token every write transaction
        checks just before its commit (:mod:`bridge.store.file_lock`)."""
        self.name = str(path)
        self.body_files = BodyFiles(path.parent)
        self.free_bodies = FreeBodies(path.parent / FREE_BODIES)
        self._busy_timeout = busy_timeout
        self._connection: sqlite3.Connection | None = None
        self._cursor: sqlite3.Cursor | None = None
        self._state = WriterState(queues=set(), highest_message_id=0)
        self._replica = False

    def open_replica(self) -> None:
        """Open a backup's copy of its live node's store to apply the live node's batches:
        nothing recovered, nothing marked (the copy keeps the live node's marks, so that
        the backup, taking over, recovers as after a crash)."""
        connection = connect(self.path, self._busy_timeout)
        self._state = load_state(connection.cursor())
        self._connection, self._cursor = connection, connection.cursor()
        self._replica = True

    def open(self, load_limit: int = -1) -> Recovered:
        connection = connect(self.path, self._busy_timeout)
        try:
            cursor = connection.cursor()
            self._state = load_state(cursor)
            after_crash = self._mark_running(cursor)
            recovered = self._recover(cursor, load_limit, after_crash)
            self.body_files.remove_orphans(
                message_id
                for (message_id,) in cursor.execute(
                    "SELECT id FROM messages WHERE large IS NOT NULL"
                )
            )
            self.free_bodies.clear()
        except BaseException:
            connection.close()
            raise
        self._connection, self._cursor = connection, cursor
        return recovered

    def run(self, operations: Sequence[Operation]) -> list[Outcome]:
        """Apply ``operations`` in one transaction and commit it: the outcome of each, or
        ``CommitFailed`` (nothing written) if SQLite fails."""
        assert self._cursor is not None, "the writer is not open"
        cursor, state = self._cursor, self._state
        highest = state.highest_message_id
        try:
            cursor.execute("BEGIN IMMEDIATE")
            outcomes = apply_all(cursor, state, operations)
            if state.highest_message_id != highest:
                save_state(cursor, state)
            self._check_token(cursor)
            cursor.execute("COMMIT")
        except Fenced:
            self._undo(cursor)
            raise
        except sqlite3.Error as error:
            self._undo(cursor)
            raise CommitFailed(
                f"{self.path}: a batch of {len(operations)} operations could not be "
                f"committed and none of them was written: {error}"
            ) from error
        return outcomes

    def move_token(self, token: LeaseToken) -> None:
        """Move the live lock in the store from this writer's token to ``token`` (a newer
        activation sequence of the same holder: a live node going on without its backup,
        docs/ha.md "Quorum vote") in one transaction, and write under it from now on;
        ``Fenced`` if the store no longer carries this writer's token."""
        assert self._cursor is not None, "the writer is not open"
        cursor = self._cursor
        try:
            cursor.execute("BEGIN IMMEDIATE")
            self._check_token(cursor)
            cursor.execute(_MOVE_TOKEN, token.params())
            cursor.execute("COMMIT")
        except BaseException:
            self._undo(cursor)
            raise
        self.token = token

    def read(self, message_ids: Sequence[int], transient: Sequence[int]) -> dict[int, Message]:
        """Stored messages (``message_ids``) and paged ones (``transient``), by id; a
        missing one is a ``StoreError``."""
        assert self._cursor is not None, "the writer is not open"
        return self._read(self._cursor, message_ids, transient)

    def delete_body(self, path: str, reusable: bool) -> None:
        self.free_bodies.discard(path, reusable)

    def _read(
        self, cursor: sqlite3.Cursor, message_ids: Sequence[int], transient: Sequence[int]
    ) -> dict[int, Message]:
        found: dict[int, Message] = {}
        for table, ids in (("messages", message_ids), ("paged_messages", transient)):
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                marks = ",".join("?" * len(part))
                columns = "id, data, large" if table == "messages" else "id, data, NULL"
                rows = cursor.execute(f"SELECT {columns} FROM {table} WHERE id IN ({marks})", part)
                for message_id, data, large in rows:
                    found[message_id] = stored_message(
                        self.name, self.body_files.attach, message_id, data, large
                    )
        missing(self.name, (*message_ids, *transient), found)
        return found

    def close(self) -> None:
        """Close, recording the clean stop (every delivery count is stored by now), unless
        the store is another node's now."""
        if self._connection is not None and self._replica:
            self._connection.close()
            self._connection = self._cursor = None
        if self._connection is not None:
            cursor = self._cursor
            assert cursor is not None
            try:
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    self._check_token(cursor)
                    cursor.execute(_SET_CLEAN_STOP, (1,))
                    cursor.execute("COMMIT")
                except Fenced:
                    cursor.execute("ROLLBACK")  # closed all the same, the mark left alone
                except BaseException:
                    cursor.execute("ROLLBACK")
                    raise
            finally:
                self._connection.close()
                self._connection = self._cursor = None

    def _check_token(self, cursor: sqlite3.Cursor) -> None:
        """Inside the write transaction: the store must still carry this node's holder and
        epoch, or nothing of the transaction is written."""
        token = self.token
        if token is not None and cursor.execute(CHECK_TOKEN, token.params()).fetchone() is None:
            raise Fenced(
                f"{self.name}: the live lock no longer carries epoch {token.epoch} of "
                f"{token.holder}: another node is live; nothing of this batch was written"
            )

    def _mark_running(self, cursor: sqlite3.Cursor) -> bool:
        """Record that the node runs (not stopped cleanly), and empty the pages; True if
        the last run did not stop cleanly either, in which case every stored message counts
        one delivery more. A store from before the record counts as not stopped cleanly."""
        cursor.execute("BEGIN IMMEDIATE")
        try:
            self._check_token(cursor)
            row = cursor.execute(
                "SELECT value FROM store_state WHERE key = 'clean_stop'"
            ).fetchone()
            after_crash = row is None or row[0] == 0
            cursor.execute("DELETE FROM paged_messages")
            if after_crash:
                cursor.execute("UPDATE message_refs SET delivery_count = delivery_count + 1")
            cursor.execute(_SET_CLEAN_STOP, (0,))
            cursor.execute("COMMIT")
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        return after_crash

    def _undo(self, cursor: sqlite3.Cursor) -> None:
        assert self._connection is not None
        if self._connection.in_transaction:
            cursor.execute("ROLLBACK")
        self._state = load_state(cursor)

    def _recover(self, cursor: sqlite3.Cursor, load_limit: int, after_crash: bool) -> Recovered:
        return load(
            lambda statement: cursor.execute(statement).fetchall(),
            "rowid",
            lambda ids: self._read(cursor, ids, ()),
            load_limit=load_limit,
            highest_message_id=self._state.highest_message_id,
            after_crash=after_crash,
        )
