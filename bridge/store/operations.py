"""The store's operations as data, and how each one applies to the SQLite file.

Operations are built on the reactor thread (arguments checked, the message encoded) and
applied on the writer thread inside the batch's transaction. An operation that names
something the store does not hold raises ``InvalidOperation`` before it changes anything,
so the rest of its batch goes on; any SQLite error fails the whole batch.

Python pays per statement, so ``apply_all`` hands a run of consecutive adds, or of
consecutive acknowledgements, to SQLite as one multi-row statement per table (up to
``MAX_STATEMENT_ROWS`` rows each); should one of them be invalid, the run is undone (a
savepoint) and applied one by one, so that one alone fails. Multi-row statements, not
``executemany``: the sqlite3 module lets go of the GIL around every step into SQLite,
once per row with ``executemany``, and each time the writer thread may wait for the
reactor's thread to hand it back (measured: a batch of 350 operations took 11 ms, 3.6 ms
of it the writer's own CPU; in multi-row statements 6 ms and 2.1 ms).
"""

from __future__ import annotations

import os
import sqlite3
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Protocol

import attrs

from bridge.store.errors import InvalidOperation
from bridge.store.records import QueueRecord


@attrs.define
class WriterState:
    """What the writer thread keeps of the file to check operations cheaply: the queue
    names and the highest message id (read from the file, updated by each operation), and
    how many duplicate ids each cache got since it was last trimmed."""

    queues: set[str]
    highest_message_id: int
    untrimmed: dict[str, int] = attrs.Factory(dict)

    @classmethod
    def load(cls, cursor: sqlite3.Cursor) -> WriterState:
        queues = {name for (name,) in cursor.execute("SELECT name FROM queues")}
        (highest,) = cursor.execute(
            "SELECT value FROM store_state WHERE key = 'highest_message_id'"
        ).fetchone()
        return cls(queues=queues, highest_message_id=highest)

    def save(self, cursor: sqlite3.Cursor) -> None:
        cursor.execute(
            "UPDATE store_state SET value = ? WHERE key = 'highest_message_id'",
            (self.highest_message_id,),
        )


class Operation(Protocol):
    def apply(self, cursor: sqlite3.Cursor, state: WriterState) -> None:
        """Write this operation, or raise ``InvalidOperation`` having written nothing."""


@attrs.frozen
class AddMessage:
    """A durable message; a large one's ``data`` is its header and ``large_path`` its body's
    file, synced to disk before the row is written. ``duplicate`` is the message's
    duplicate-detection id, stored with it (one operation, so that a run of adds of a
    bridge's target stays one run of multi-row statements)."""

    message_id: int
    queues: tuple[str, ...]
    data: bytes
    large_size: int | None = None
    large_path: str | None = None
    duplicate: StoreDuplicateId | None = None

    def apply(self, cursor: sqlite3.Cursor, state: WriterState) -> None:
        for queue in self.queues:
            if queue not in state.queues:
                raise InvalidOperation(
                    f"add message {self.message_id}: there is no durable queue {queue!r}"
                )
        if self.large_path is not None:
            _sync_file(self.large_path)
        try:
            cursor.execute(
                "INSERT INTO messages (id, refs, data, large) VALUES (?, ?, ?, ?)",
                (self.message_id, len(self.queues), self.data, self.large_size),
            )
        except sqlite3.IntegrityError:
            raise InvalidOperation(
                f"add message {self.message_id}: a message with this id is already stored"
            ) from None
        cursor.executemany(
            "INSERT INTO message_refs (queue, message_id, delivery_count) VALUES (?, ?, 0)",
            [(queue, self.message_id) for queue in self.queues],
        )
        state.highest_message_id = max(state.highest_message_id, self.message_id)
        if self.duplicate is not None:
            self.duplicate.apply(cursor, state)


def _sync_file(path: str) -> None:
    """Make a large body's file and its name durable."""
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


@attrs.frozen
class PageMessage:
    """A message that only paging keeps on disk, for ``refs`` queues."""

    message_id: int
    refs: int
    data: bytes

    def apply(self, cursor: sqlite3.Cursor, state: WriterState) -> None:
        try:
            cursor.execute(
                "INSERT INTO paged_messages (id, refs, data) VALUES (?, ?, ?)",
                (self.message_id, self.refs, self.data),
            )
        except sqlite3.IntegrityError:
            raise InvalidOperation(f"page message {self.message_id}: it is paged already") from None


@attrs.frozen
class ReleasePages:
    """Queues read paged messages back (one reference each); those no queue needs go."""

    message_ids: tuple[int, ...]

    def apply(self, cursor: sqlite3.Cursor, state: WriterState) -> None:
        released = Counter(self.message_ids)
        cursor.executemany(
            "UPDATE paged_messages SET refs = refs - ? WHERE id = ?",
            [(count, message_id) for message_id, count in released.items()],
        )
        cursor.execute("DELETE FROM paged_messages WHERE refs <= 0")


@attrs.frozen
class Acknowledge:
    queue: str
    message_id: int

    def apply(self, cursor: sqlite3.Cursor, state: WriterState) -> None:
        cursor.execute(
            "DELETE FROM message_refs WHERE queue = ? AND message_id = ?",
            (self.queue, self.message_id),
        )
        if cursor.rowcount == 0:
            raise InvalidOperation(
                f"acknowledge message {self.message_id} on queue {self.queue!r}: "
                "the queue does not hold it"
            )
        cursor.execute("DELETE FROM messages WHERE id = ? AND refs = 1", (self.message_id,))
        if cursor.rowcount == 0:
            cursor.execute("UPDATE messages SET refs = refs - 1 WHERE id = ?", (self.message_id,))


@attrs.frozen
class AcknowledgeMany:
    """Several acknowledgements on one queue as one operation: all, or (the queue lacking
    one of the messages) none."""

    queue: str
    message_ids: tuple[int, ...]

    def apply(self, cursor: sqlite3.Cursor, state: WriterState) -> None:
        cursor.execute("SAVEPOINT many")
        if _release(cursor, [(self.queue, message_id) for message_id in self.message_ids]):
            cursor.execute("RELEASE many")
            return
        cursor.execute("ROLLBACK TO many")
        cursor.execute("RELEASE many")
        raise InvalidOperation(
            f"acknowledge {len(self.message_ids)} messages on queue {self.queue!r}: "
            "the queue does not hold all of them"
        )


@attrs.frozen
class UpdateDeliveryCount:
    queue: str
    message_id: int
    count: int

    def apply(self, cursor: sqlite3.Cursor, state: WriterState) -> None:
        cursor.execute(
            "UPDATE message_refs SET delivery_count = ? WHERE queue = ? AND message_id = ?",
            (self.count, self.queue, self.message_id),
        )
        if cursor.rowcount == 0:
            raise InvalidOperation(
                f"update the delivery count of message {self.message_id} on queue "
                f"{self.queue!r}: the queue does not hold it"
            )


@attrs.frozen
class CreateQueue:
    record: QueueRecord

    def apply(self, cursor: sqlite3.Cursor, state: WriterState) -> None:
        record = self.record
        if record.name in state.queues:
            raise InvalidOperation(f"create queue {record.name!r}: the queue exists")
        cursor.execute(
            "INSERT INTO queues (name, address, routing, filter) VALUES (?, ?, ?, ?)",
            (record.name, record.address, str(record.routing), record.filter),
        )
        state.queues.add(record.name)


_HELD_BY = "SELECT message_id FROM message_refs WHERE queue = ?"


@attrs.frozen
class DeleteQueue:
    name: str

    def apply(self, cursor: sqlite3.Cursor, state: WriterState) -> None:
        if self.name not in state.queues:
            raise InvalidOperation(f"delete queue {self.name!r}: there is no such queue")
        name = (self.name,)
        cursor.execute(f"DELETE FROM messages WHERE refs = 1 AND id IN ({_HELD_BY})", name)
        cursor.execute(f"UPDATE messages SET refs = refs - 1 WHERE id IN ({_HELD_BY})", name)
        cursor.execute("DELETE FROM message_refs WHERE queue = ?", name)
        cursor.execute("DELETE FROM queues WHERE name = ?", name)
        state.queues.discard(self.name)


@attrs.frozen
class StoreDuplicateId:
    address: str
    duplicate_id: bytes
    keep: int

    def apply(self, cursor: sqlite3.Cursor, state: WriterState) -> None:
        # Storing a known id again replaces its row, which makes it the newest.
        cursor.execute(
            "INSERT OR REPLACE INTO duplicate_ids (address, duplicate_id) VALUES (?, ?)",
            (self.address, self.duplicate_id),
        )
        _trim(cursor, state, self.address, self.keep, 1)


def _trim(cursor: sqlite3.Cursor, state: WriterState, address: str, keep: int, added: int) -> None:
    """``added`` ids were stored for ``address``: trim its cache to the newest ``keep``.

    Trimming scans ``keep`` index entries, so it runs once per eighth of ``keep`` ids:
    after a batch the file holds at most that many more than ``keep`` (the node's cache
    keeps exactly the newest ``keep`` of what it recovers)."""
    untrimmed = state.untrimmed.get(address, 0) + added
    if untrimmed < max(keep // 8, 1):
        state.untrimmed[address] = untrimmed
        return
    state.untrimmed[address] = 0
    cursor.execute(
        "DELETE FROM duplicate_ids WHERE address = ? AND seq <= ("
        " SELECT seq FROM duplicate_ids WHERE address = ?"
        " ORDER BY seq DESC LIMIT 1 OFFSET ?)",
        (address, address, keep),
    )


@attrs.frozen
class CommitTransaction:
    """A transaction's operations, applied all or none: the first that is invalid undoes
    the ones before it (a savepoint), and fails the transaction with its error."""

    operations: tuple[Operation, ...]

    def apply(self, cursor: sqlite3.Cursor, state: WriterState) -> None:
        queues, highest = set(state.queues), state.highest_message_id
        cursor.execute("SAVEPOINT txn")
        for outcome in apply_all(cursor, state, self.operations):
            if outcome is not None:
                cursor.execute("ROLLBACK TO txn")
                cursor.execute("RELEASE txn")
                state.queues, state.highest_message_id = queues, highest
                raise outcome
        cursor.execute("RELEASE txn")


Outcome = InvalidOperation | None


def apply_all(
    cursor: sqlite3.Cursor, state: WriterState, operations: Sequence[Operation]
) -> list[Outcome]:
    """Apply ``operations`` in order: the outcome of each (None, or why it was refused)."""
    outcomes: list[Outcome] = []
    start = 0
    while start < len(operations):
        kind = type(operations[start])
        end = start + 1
        while end < len(operations) and type(operations[end]) is kind:
            end += 1
        run = operations[start:end]
        if len(run) > 1 and kind is AddMessage:
            outcomes += _add_run(cursor, state, [op for op in run if isinstance(op, AddMessage)])
        elif len(run) > 1 and kind is Acknowledge:
            outcomes += _ack_run(cursor, state, [op for op in run if isinstance(op, Acknowledge)])
        else:
            outcomes += _one_by_one(cursor, state, run)
        start = end
    return outcomes


def _one_by_one(
    cursor: sqlite3.Cursor, state: WriterState, operations: Sequence[Operation]
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for operation in operations:
        try:
            operation.apply(cursor, state)
        except InvalidOperation as invalid:
            outcomes.append(invalid)
        else:
            outcomes.append(None)
    return outcomes


def _add_run(cursor: sqlite3.Cursor, state: WriterState, adds: list[AddMessage]) -> list[Outcome]:
    if any(queue not in state.queues for add in adds for queue in add.queues):
        return _one_by_one(cursor, state, adds)
    if any(add.large_path is not None for add in adds):
        return _one_by_one(cursor, state, adds)
    cursor.execute("SAVEPOINT run")
    try:
        _insert(
            cursor,
            "messages (id, refs, data)",
            [(add.message_id, len(add.queues), add.data) for add in adds],
        )
    except sqlite3.IntegrityError:
        cursor.execute("ROLLBACK TO run")
        cursor.execute("RELEASE run")
        return _one_by_one(cursor, state, adds)
    _insert(
        cursor,
        "message_refs (queue, message_id, delivery_count)",
        [(queue, add.message_id, 0) for add in adds for queue in add.queues],
    )
    duplicates = [add.duplicate for add in adds if add.duplicate is not None]
    if duplicates:
        _store_duplicates(cursor, state, duplicates)
    cursor.execute("RELEASE run")
    state.highest_message_id = max(state.highest_message_id, *(add.message_id for add in adds))
    return [None] * len(adds)


def _store_duplicates(
    cursor: sqlite3.Cursor, state: WriterState, duplicates: list[StoreDuplicateId]
) -> None:
    """The duplicate ids of a run of adds, in multi-row statements (a repeated id's later
    row replaces the earlier, making it the newest), each cache trimmed once."""
    _insert(
        cursor,
        "duplicate_ids (address, duplicate_id)",
        [(duplicate.address, duplicate.duplicate_id) for duplicate in duplicates],
        replace=True,
    )
    added = Counter(duplicate.address for duplicate in duplicates)
    keep = {duplicate.address: duplicate.keep for duplicate in duplicates}
    for address, count in added.items():
        _trim(cursor, state, address, keep[address], count)


def _ack_run(cursor: sqlite3.Cursor, state: WriterState, acks: list[Acknowledge]) -> list[Outcome]:
    cursor.execute("SAVEPOINT run")
    if not _release(cursor, [(ack.queue, ack.message_id) for ack in acks]):
        cursor.execute("ROLLBACK TO run")
        cursor.execute("RELEASE run")
        return _one_by_one(cursor, state, acks)
    cursor.execute("RELEASE run")
    return [None] * len(acks)


def _release(cursor: sqlite3.Cursor, refs: list[tuple[str, int]]) -> bool:
    """Drop message references (queue, message id) in two statements per table; False,
    having half done it, if a queue did not hold its message (the caller undoes it)."""
    by_queue: dict[str, list[int]] = {}
    for queue, message_id in refs:
        by_queue.setdefault(queue, []).append(message_id)
    removed = sum(
        _delete(cursor, "message_refs WHERE queue = ? AND message_id", queue, ids)
        for queue, ids in by_queue.items()
    )
    if removed != len(refs):
        return False
    # Each message loses one reference per acknowledgement; those left with none go.
    released = Counter(message_id for _, message_id in refs)
    by_count: dict[int, list[int]] = {}
    for message_id, count in released.items():
        by_count.setdefault(count, []).append(message_id)
    gone = sum(
        _delete(cursor, "messages WHERE refs = ? AND id", count, ids)
        for count, ids in by_count.items()
    )
    if gone != len(released):
        cursor.executemany(
            "UPDATE messages SET refs = refs - ? WHERE id = ?",
            [(count, message_id) for message_id, count in released.items()],
        )
    return True


MAX_STATEMENT_ROWS = 1024
"""The most rows one multi-row statement writes or deletes; longer runs take several."""

STATEMENT_ROWS = tuple(1 << k for k in range(MAX_STATEMENT_ROWS.bit_length()))
"""The row counts statements are prepared for: a part of a run is padded up to the next
of these with rows of NULLs, which the statement skips (``WHERE column1 IS NOT NULL``, or
an ``IN`` list's NULL, which matches nothing). So a run of any length up to
``MAX_STATEMENT_ROWS`` is one statement, and only eleven shapes of each exist (SQLite's
prepared statements are cached by their text; one of every length would cost megabytes).
One statement, not several: each statement lets go of the GIL and must win it back from
the busy reactor thread, which can take a millisecond, so a batch cut into tens of
statements took tens of milliseconds under load."""


def _parts(count: int) -> Iterator[tuple[int, int, int]]:
    """(start, end, rows) of the statements ``count`` rows are written or deleted in:
    ``rows`` is the statement's shape, at least ``end - start``."""
    start = 0
    while count - start > MAX_STATEMENT_ROWS:
        yield start, start + MAX_STATEMENT_ROWS, MAX_STATEMENT_ROWS
        start += MAX_STATEMENT_ROWS
    if start < count:
        yield start, count, 1 << (count - start - 1).bit_length()


def _insert(
    cursor: sqlite3.Cursor,
    table: str,
    rows: Sequence[tuple[object, ...]],
    *,
    replace: bool = False,
) -> None:
    """``INSERT INTO table`` ``rows`` (all of one width, the first value never NULL), in
    multi-row statements; ``INSERT OR REPLACE`` with ``replace``."""
    verb = "INSERT OR REPLACE" if replace else "INSERT"
    width = len(rows[0])
    one = "(" + ",".join("?" * width) + ")"
    for start, end, shape in _parts(len(rows)):
        marks = ",".join([one] * shape)
        values = [value for row in rows[start:end] for value in row]
        values += [None] * (width * (shape - (end - start)))
        cursor.execute(
            f"{verb} INTO {table} SELECT * FROM (VALUES {marks}) WHERE column1 IS NOT NULL",
            values,
        )


def _delete(cursor: sqlite3.Cursor, where: str, key: object, ids: Sequence[int]) -> int:
    """``DELETE FROM`` ``where`` (a condition on ``key`` ending in the id column) for
    ``ids``, in multi-row statements; the rows deleted."""
    deleted = 0
    for start, end, shape in _parts(len(ids)):
        marks = ",".join("?" * shape)
        padding = [None] * (shape - (end - start))
        cursor.execute(f"DELETE FROM {where} IN ({marks})", (key, *ids[start:end], *padding))
        deleted += cursor.rowcount
    return deleted
