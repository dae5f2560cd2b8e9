"""The PostgreSQL writer: one connection to the server, used only on the store's writer thread.

It does what the SQLite writer does (``bridge.store.writer`` says what opening, recovering
and closing mean), on a server: each batch is one transaction whose commit returns once the
server's write-ahead log is on disk (``synchronous_commit`` on). Should the connection
break, the batch fails (``CommitFailed``, nothing of it written) and the next batch connects
again. Large message bodies are rows too, cached as files in the node's data directory
(``bridge.store.pg_bodies``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

import psycopg
from zope.interface import implementer

from bridge.ha.lease import CHECK_TOKEN, session_name
from bridge.ha.lock import LeaseToken
from bridge.message import Message
from bridge.store.errors import CommitFailed, Fenced, StoreError
from bridge.store.interfaces import IStoreWriter
from bridge.store.large import FREE_BODIES, BodyFiles, FreeBodies
from bridge.store.operations import Operation, Outcome, WriterState
from bridge.store.pg_bodies import PgBodies
from bridge.store.pg_operations import apply_all, load_state, save_state
from bridge.store.pg_schema import PgCursor, connect, describe, one_line
from bridge.store.records import Recovered
from bridge.store.recovery import load, missing, stored_message

_SET_CLEAN_STOP = (
    "INSERT INTO store_state (key, value) VALUES ('clean_stop', %s)"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)

Connection = psycopg.Connection[tuple[object, ...]]


@implementer(IStoreWriter)
class PostgreSQLWriter:
    """Opens, recovers, writes batches and closes, on the writer thread. ``url`` is a
    libpq URL (``postgresql://...``); a malformed one fails ``open()`` (not the
    constructor: a node reports it as it reports a server that cannot be reached)."""

    def __init__(self, url: str, data_dir: Path, token: LeaseToken | None = None) -> None:
        self.url = url
        self.token = token
        """With HA: the fencing token every transaction checks first (docs/ha.md)."""
        self._session = session_name(token.holder) if token is not None else ""
        """The sessions' ``application_name``: with HA, the node's, so that the next live
        node can end them if this node is cut off mid-transaction."""
        try:
            self.name = describe(url)
        except StoreError:
            self.name = "postgresql (a malformed URL)"  # open() says what is wrong
        self.body_files = BodyFiles(data_dir)
        self.free_bodies = FreeBodies(data_dir / FREE_BODIES)
        self._bodies = PgBodies(self.body_files)
        self._connection: Connection | None = None
        self._state = WriterState(queues=set(), highest_message_id=0)

    def open(self, load_limit: int = -1) -> Recovered:
        connection = connect(self.url, self._session)
        try:
            cursor: PgCursor = connection.cursor()
            self._state = load_state(cursor)
            cursor.execute("DELETE FROM paged_messages")
            after_crash = self._mark_running(cursor)
            recovered = self._recover(cursor, load_limit, after_crash)
            owned = cursor.execute("SELECT id FROM messages WHERE large IS NOT NULL").fetchall()
            self._check_token(cursor)
            connection.commit()
            self.body_files.remove_orphans(message_id for (message_id,) in owned)
            self.free_bodies.clear()
        except psycopg.Error as error:
            connection.close()
            raise StoreError(f"{self.name}: cannot load the store: {one_line(error)}") from None
        except Fenced:
            connection.close()
            raise
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        return recovered

    def run(self, operations: Sequence[Operation]) -> list[Outcome]:
        """Apply ``operations`` in one transaction and commit it: the outcome of each, or
        ``CommitFailed`` (nothing written) if the server fails or cannot be reached."""
        state = self._state
        highest = state.highest_message_id
        try:
            connection = self._connected()
            with connection.pipeline():
                cursor: PgCursor = connection.cursor()
                outcomes = apply_all(cursor, state, operations)
                self._bodies.copy_added(cursor, operations, outcomes)
                if state.highest_message_id != highest:
                    save_state(cursor, state)
                self._check_token(cursor)
                connection.commit()
        except Fenced:
            self._undo()
            raise
        except (psycopg.Error, StoreError) as error:
            self._undo()
            raise CommitFailed(
                f"{self.name}: a batch of {len(operations)} operations could not be "
                f"committed and none of them was written: {one_line(error)}"
            ) from error
        return outcomes

    def read(self, message_ids: Sequence[int], transient: Sequence[int]) -> dict[int, Message]:
        """Stored messages (``message_ids``) and paged ones (``transient``), by id; a
        missing one is a ``StoreError``."""
        connection = self._connected()
        cursor: PgCursor = connection.cursor()
        try:
            found = self._read(cursor, message_ids, transient)
        finally:
            connection.rollback()  # ends the read's transaction; writes none
        return found

    def delete_body(self, path: str, reusable: bool) -> None:
        self.free_bodies.discard(path, reusable)
        self._bodies.forget(path)

    def close(self) -> None:
        """Close, recording the clean stop (every delivery count is stored by now), unless
        the store is another node's now (a stale node must not mark the new live node's run
        as cleanly stopped: its crash would then count no redelivery)."""
        connection, self._connection = self._connection, None
        if connection is not None and not connection.closed:
            try:
                cursor: PgCursor = connection.cursor()
                cursor.execute(_SET_CLEAN_STOP, (1,))
                self._check_token(cursor)
                connection.commit()
            except Fenced:
                connection.rollback()  # closed all the same, the mark left to the live node
            finally:
                connection.close()

    def _check_token(self, cursor: PgCursor) -> None:
        """Last in each transaction, just before its commit: the lease must still carry
        this node's epoch. Last, not first, because the check's row lock holds off any
        acquisition until the commit: taken first, a node paused in mid-batch (a stopped
        process, a long pause) would hold every backup off until it resumed; taken last,
        only for the commit's round trip."""
        token = self.token
        if token is not None and cursor.execute(CHECK_TOKEN, token.params()).fetchone() is None:
            raise Fenced(
                f"{self.name}: the lease no longer carries epoch {token.epoch} of "
                f"{token.holder}: another node is live; nothing of this batch was written"
            )

    def _connected(self) -> Connection:
        """The connection, made again if it broke (the state read again with it)."""
        connection = self._connection
        if connection is None or connection.closed or connection.broken:
            if connection is not None:
                connection.close()
            self._connection = None
            connection = connect(self.url, self._session)
            self._state = load_state(connection.cursor())
            connection.commit()
            self._connection = connection
        return connection

    def _undo(self) -> None:
        connection = self._connection
        if connection is None or connection.closed or connection.broken:
            return  # the next batch connects again and reads the state afresh
        try:
            connection.rollback()
            self._state = load_state(connection.cursor())
            connection.commit()
        except psycopg.Error:
            connection.close()

    def _read(
        self, cursor: PgCursor, message_ids: Sequence[int], transient: Sequence[int]
    ) -> dict[int, Message]:
        found: dict[int, Message] = {}
        attach = partial(self._bodies.attach, cursor)
        if message_ids:
            # All rows first: attaching a large body runs statements on this cursor.
            for message_id, data, large in cursor.execute(
                "SELECT id, data, large FROM messages WHERE id = ANY(%s::bigint[])",
                (list(message_ids),),
            ).fetchall():
                found[message_id] = stored_message(self.name, attach, message_id, data, large)
        if transient:
            for message_id, data in cursor.execute(
                "SELECT id, data FROM paged_messages WHERE id = ANY(%s::bigint[])",
                (list(transient),),
            ):
                found[message_id] = stored_message(self.name, attach, message_id, data, None)
        missing(self.name, (*message_ids, *transient), found)
        return found

    @staticmethod
    def _mark_running(cursor: PgCursor) -> bool:
        """Record that the node runs; True if the last run did not stop cleanly either (see
        the SQLite writer)."""
        row = cursor.execute("SELECT value FROM store_state WHERE key = 'clean_stop'").fetchone()
        after_crash = row is None or row[0] == 0
        if after_crash:
            cursor.execute("UPDATE message_refs SET delivery_count = delivery_count + 1")
        cursor.execute(_SET_CLEAN_STOP, (0,))
        return after_crash

    def _recover(self, cursor: PgCursor, load_limit: int, after_crash: bool) -> Recovered:
        return load(
            lambda statement: cursor.execute(statement).fetchall(),
            "seq",
            lambda ids: self._read(cursor, ids, ()),
            load_limit=load_limit,
            highest_message_id=self._state.highest_message_id,
            after_crash=after_crash,
        )
