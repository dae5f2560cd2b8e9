"""How each store operation (``bridge.store.operations``) is written to the SQLite file.

Python pays per statement, so ``apply_all`` hands a run of consecutive adds, of
consecutive acknowledgements or of consecutive duplicate ids, to SQLite as one multi-row
statement per table (up to
``MAX_STATEMENT_ROWS`` rows each); should one of them be invalid, the run is undone (a
savepoint) and applied one by one, so that one alone fails. Multi-row statements, not
``executemany``: the sqlite3 module lets go of the GIL around every step into SQLite,
once per row with ``executemany``, and each time the writer thread may wait for the
reactor's thread to hand it back (measured: a batch of 350 operations took 11 ms, 3.6 ms
of it the writer's own CPU; in multi-row statements 6 ms and 2.1 ms).
"""

from __future__ import annotations

import functools
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from bridge.store.errors import InvalidOperation
from bridge.store.large import sync_body
from bridge.store.operations import (
    Acknowledge,
    AcknowledgeMany,
    AddMessage,
    CommitTransaction,
    CreateQueue,
    DeleteQueue,
    DuplicateRing,
    Operation,
    Outcome,
    PageMessage,
    ReleasePages,
    ReserveIds,
    StoreDuplicateId,
    UpdateDeliveryCount,
    WriterState,
    reserve_ids,
    runs,
)


def load_state(cursor: sqlite3.Cursor) -> WriterState:
    queues = {name for (name,) in cursor.execute("SELECT name FROM queues")}
    (highest,) = cursor.execute(
        "SELECT value FROM store_state WHERE key = 'highest_message_id'"
    ).fetchone()
    return WriterState(queues=queues, highest_message_id=highest)


def save_state(cursor: sqlite3.Cursor, state: WriterState) -> None:
    cursor.execute(
        "UPDATE store_state SET value = ? WHERE key = 'highest_message_id'",
        (state.highest_message_id,),
    )


def _add(cursor: sqlite3.Cursor, state: WriterState, op: AddMessage) -> None:
    op.check_queues(state)
    if op.large_path is not None:
        sync_body(op.large_path)
    row = (op.message_id, len(op.queues), bytearray(op.data))  # (see ``_add_run``)
    try:
        if op.large_size is None:  # (no NULL bound: it would be adapted as bytes are)
            cursor.execute("INSERT INTO messages (id, refs, data) VALUES (?, ?, ?)", row)
        else:
            cursor.execute(
                "INSERT INTO messages (id, refs, data, large) VALUES (?, ?, ?, ?)",
                (*row, op.large_size),
            )
    except sqlite3.IntegrityError:
        raise op.already_stored() from None
    cursor.executemany(
        "INSERT INTO message_refs (queue, message_id, delivery_count) VALUES (?, ?, 0)",
        [(queue, op.message_id) for queue in op.queues],
    )
    state.highest_message_id = max(state.highest_message_id, op.message_id)
    if op.duplicate is not None:
        _store_duplicate_id(cursor, state, op.duplicate)


def _page(cursor: sqlite3.Cursor, state: WriterState, op: PageMessage) -> None:
    try:
        cursor.execute(
            "INSERT INTO paged_messages (id, refs, data) VALUES (?, ?, ?)",
            (op.message_id, op.refs, op.data),
        )
    except sqlite3.IntegrityError:
        raise op.already_paged() from None


def _release_pages(cursor: sqlite3.Cursor, state: WriterState, op: ReleasePages) -> None:
    released = Counter(op.message_ids)
    cursor.executemany(
        "UPDATE paged_messages SET refs = refs - ? WHERE id = ?",
        [(count, message_id) for message_id, count in released.items()],
    )
    cursor.execute("DELETE FROM paged_messages WHERE refs <= 0")


def _acknowledge(cursor: sqlite3.Cursor, state: WriterState, op: Acknowledge) -> None:
    cursor.execute(
        "DELETE FROM message_refs WHERE queue = ? AND message_id = ?",
        (op.queue, op.message_id),
    )
    if cursor.rowcount == 0:
        raise op.not_held()
    cursor.execute("DELETE FROM messages WHERE id = ? AND refs = 1", (op.message_id,))
    if cursor.rowcount == 0:
        cursor.execute("UPDATE messages SET refs = refs - 1 WHERE id = ?", (op.message_id,))


def _acknowledge_many(cursor: sqlite3.Cursor, state: WriterState, op: AcknowledgeMany) -> None:
    cursor.execute("SAVEPOINT many")
    if _release(cursor, [(op.queue, message_id) for message_id in op.message_ids]):
        cursor.execute("RELEASE many")
        return
    cursor.execute("ROLLBACK TO many")
    cursor.execute("RELEASE many")
    raise op.not_all_held()


def _update_delivery_count(
    cursor: sqlite3.Cursor, state: WriterState, op: UpdateDeliveryCount
) -> None:
    cursor.execute(
        "UPDATE message_refs SET delivery_count = ? WHERE queue = ? AND message_id = ?",
        (op.count, op.queue, op.message_id),
    )
    if cursor.rowcount == 0:
        raise op.not_held()


def _create_queue(cursor: sqlite3.Cursor, state: WriterState, op: CreateQueue) -> None:
    op.check(state)
    record = op.record
    cursor.execute(
        "INSERT INTO queues (name, address, routing, filter) VALUES (?, ?, ?, ?)",
        (record.name, record.address, str(record.routing), record.filter),
    )
    state.queues.add(record.name)


_HELD_BY = "SELECT message_id FROM message_refs WHERE queue = ?"


def _delete_queue(cursor: sqlite3.Cursor, state: WriterState, op: DeleteQueue) -> None:
    op.check(state)
    name = (op.name,)
    cursor.execute(f"DELETE FROM messages WHERE refs = 1 AND id IN ({_HELD_BY})", name)
    cursor.execute(f"UPDATE messages SET refs = refs - 1 WHERE id IN ({_HELD_BY})", name)
    cursor.execute("DELETE FROM message_refs WHERE queue = ?", name)
    cursor.execute("DELETE FROM queues WHERE name = ?", name)
    state.queues.discard(op.name)


def _store_duplicate_id(cursor: sqlite3.Cursor, state: WriterState, op: StoreDuplicateId) -> None:
    _store_duplicates(cursor, state, [op])


def _ring(cursor: sqlite3.Cursor, state: WriterState, address: str, keep: int) -> DuplicateRing:
    """``address``'s ring of ``keep`` slots, read from the table the first time (and
    whenever ``keep`` changes)."""
    ring = state.rings.get(address)
    if ring is None or ring.keep != keep:
        ring = state.rings[address] = _read_ring(cursor, address, keep)
    return ring


def _read_ring(cursor: sqlite3.Cursor, address: str, keep: int) -> DuplicateRing:
    """``address``'s ring as stored; laid out afresh where its slots are not those of
    ``keep`` (it had another size, or it was migrated): its newest ``keep`` ids kept, in
    order, numbered again from 0 (a migrated table's numbers have gaps, which would give
    two ids one slot)."""
    rows = cursor.execute(
        "SELECT seq, slot, duplicate_id FROM duplicate_ids WHERE address = ? ORDER BY seq DESC",
        (address,),
    ).fetchall()
    if len(rows) <= keep and all(slot == seq % keep for seq, slot, _ in rows):
        return DuplicateRing(keep, rows[0][0] + 1 if rows else 0)
    kept = [duplicate_id for _, _, duplicate_id in reversed(rows[:keep])]
    cursor.execute("DELETE FROM duplicate_ids WHERE address = ?", (address,))
    if kept:
        _insert(
            cursor,
            "duplicate_ids (address, slot, seq, duplicate_id)",
            [(address, seq, seq, duplicate_id) for seq, duplicate_id in enumerate(kept)],
        )
    return DuplicateRing(keep, len(kept))


def _commit_transaction(cursor: sqlite3.Cursor, state: WriterState, op: CommitTransaction) -> None:
    queues, highest = set(state.queues), state.highest_message_id
    cursor.execute("SAVEPOINT txn")
    for outcome in apply_all(cursor, state, op.operations):
        if outcome is not None:
            cursor.execute("ROLLBACK TO txn")
            cursor.execute("RELEASE txn")
            state.queues, state.highest_message_id = queues, highest
            state.rings.clear()
            raise outcome
    cursor.execute("RELEASE txn")


_APPLY: dict[type[Any], Callable[[sqlite3.Cursor, WriterState, Any], None]] = {
    AddMessage: _add,
    PageMessage: _page,
    ReleasePages: _release_pages,
    Acknowledge: _acknowledge,
    AcknowledgeMany: _acknowledge_many,
    UpdateDeliveryCount: _update_delivery_count,
    CreateQueue: _create_queue,
    DeleteQueue: _delete_queue,
    StoreDuplicateId: _store_duplicate_id,
    ReserveIds: lambda cursor, state, op: reserve_ids(state, op),
    CommitTransaction: _commit_transaction,
}
"""Each kind of operation's statements: they write it, or raise ``InvalidOperation``
having written nothing."""


def apply_all(
    cursor: sqlite3.Cursor, state: WriterState, operations: Sequence[Operation]
) -> list[Outcome]:
    """Apply ``operations`` in order: the outcome of each (None, or why it was refused)."""
    outcomes: list[Outcome] = []
    for kind, run in runs(operations):
        if len(run) > 1 and kind is AddMessage:
            outcomes += _add_run(cursor, state, [op for op in run if isinstance(op, AddMessage)])
        elif len(run) > 1 and kind is Acknowledge:
            outcomes += _ack_run(cursor, state, [op for op in run if isinstance(op, Acknowledge)])
        elif len(run) > 1 and kind is StoreDuplicateId:
            # (a bridge's target writes a run of these for messages consumed before their
            # write; none can be refused: ``keep`` was checked as each was made)
            _store_duplicates(cursor, state, [op for op in run if isinstance(op, StoreDuplicateId)])
            outcomes += [None] * len(run)
        else:
            outcomes += _one_by_one(cursor, state, run)
    return outcomes


def _one_by_one(
    cursor: sqlite3.Cursor, state: WriterState, operations: Sequence[Operation]
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for operation in operations:
        try:
            _APPLY[type(operation)](cursor, state, operation)
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
            # (bound as a bytearray, a copy: the sqlite3 module adapts a bytes parameter
            # by a lookup that raises and clears an error, and binds a bytearray as it is)
            [(add.message_id, len(add.queues), bytearray(add.data)) for add in adds],
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
    """Duplicate ids, each in the next slot of its address's ring (replacing the oldest
    id there), in multi-row statements. An id stored again takes a slot again; the
    store, opening, takes each id once, at its newest place."""
    rows = []
    for duplicate in duplicates:
        slot, seq = _ring(cursor, state, duplicate.address, duplicate.keep).take()
        rows.append((duplicate.address, slot, seq, bytearray(duplicate.duplicate_id)))
    _insert(cursor, "duplicate_ids (address, slot, seq, duplicate_id)", rows, replace=True)


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
of these, so a run of any length up to ``MAX_STATEMENT_ROWS`` is one statement, and only
eleven shapes of each exist (SQLite's prepared statements are cached by their text; one
of every length would cost megabytes). One statement, not several: each statement lets
go of the GIL and must win it back from the busy reactor thread, which can take a
millisecond, so a batch cut into tens of statements took tens of milliseconds under load.

The padding binds integers only: an insert's padding rows are numbered past the part's
count, which the statement filters out (``_insert_statement``), and an ``IN`` list is
padded with its last id again. A NULL or a ``bytes`` parameter costs the sqlite3 module
of Python 3.11 an adaptation lookup that raises and clears an ``AttributeError``, about
2,500 instructions each: padding with NULLs cost the writer about a tenth of its
instructions per message."""


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
    """``INSERT INTO table`` ``rows`` (all of one width) in multi-row statements;
    ``INSERT OR REPLACE`` with ``replace``."""
    width = len(rows[0])
    for start, end, shape in _parts(len(rows)):
        values = [value for row in rows[start:end] for value in row]
        values += [0] * (width * (shape - (end - start)))
        values.append(end - start)
        cursor.execute(_insert_statement(replace, table, width, shape), values)


@functools.cache
def _insert_statement(replace: bool, table: str, width: int, shape: int) -> str:
    """The statement that inserts the first of ``shape`` rows of ``width`` values into
    ``table``: each row numbered (``column1``), its values after the number, and the
    count of rows to keep bound last; the rows past it are padding."""
    verb = "INSERT OR REPLACE" if replace else "INSERT"
    marks = ",".join("?" * width)
    rows = ",".join([f"({number},{marks})" for number in range(1, shape + 1)])
    columns = ",".join([f"column{number}" for number in range(2, width + 2)])
    return f"{verb} INTO {table} SELECT {columns} FROM (VALUES {rows}) WHERE column1 <= ?"


def _delete(cursor: sqlite3.Cursor, where: str, key: object, ids: Sequence[int]) -> int:
    """``DELETE FROM`` ``where`` (a condition on ``key`` ending in the id column) for
    ``ids``, in multi-row statements; the rows deleted."""
    deleted = 0
    for start, end, shape in _parts(len(ids)):
        padding = [ids[end - 1]] * (shape - (end - start))  # (an id again matches no more)
        cursor.execute(_delete_statement(where, shape), (key, *ids[start:end], *padding))
        deleted += cursor.rowcount
    return deleted


@functools.cache
def _delete_statement(where: str, shape: int) -> str:
    """The statement that deletes ``shape`` ids (the ``where`` of ``_delete``)."""
    return f"DELETE FROM {where} IN ({','.join('?' * shape)})"
