"""How each store operation (``bridge.store.operations``) is written to PostgreSQL.

Each round trip to the server costs more than the statement, so runs take as few as they
can: a run of adds is one ``INSERT ... SELECT FROM unnest(arrays)`` per table, whatever its
length (statement text fixed, so the server keeps it prepared); a run of acknowledgements
(single or all-or-nothing) one ``DELETE ... RETURNING`` and one statement for the messages
they release; a run of paged messages one ``INSERT``, of delivery counts one ``UPDATE``.
Arrays go in binary (``%b``): as text, a run's bodies were hex-escaped and parsed again,
four times the cost of the insert itself. The writer sends a batch in pipeline mode, so
only statements whose result is read (``RETURNING``) wait for the server; the rest travel
with them. A failing statement would abort the whole transaction, so nothing is left to
fail: a repeated id is ``ON CONFLICT DO NOTHING`` and the rows ``RETURNING`` names tell
which operations took effect; the others are refused, each alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from bridge.store.errors import InvalidOperation
from bridge.store.operations import (
    Acknowledge,
    AcknowledgeMany,
    AddMessage,
    CommitTransaction,
    CreateQueue,
    DeleteQueue,
    Operation,
    Outcome,
    PageMessage,
    ReleasePages,
    ReserveIds,
    StoreDuplicateId,
    UpdateDeliveryCount,
    WriterState,
    first_occurrences,
    reserve_ids,
    runs,
)
from bridge.store.pg_bodies import check_body
from bridge.store.pg_schema import PgCursor


def load_state(cursor: PgCursor) -> WriterState:
    queues = {name for (name,) in cursor.execute("SELECT name FROM queues")}
    row = cursor.execute(
        "SELECT value FROM store_state WHERE key = 'highest_message_id'"
    ).fetchone()
    assert row is not None, "store_state lacks highest_message_id"
    return WriterState(queues=queues, highest_message_id=row[0])


def save_state(cursor: PgCursor, state: WriterState) -> None:
    cursor.execute(
        "UPDATE store_state SET value = %s WHERE key = 'highest_message_id'",
        (state.highest_message_id,),
    )


def _add_run(cursor: PgCursor, state: WriterState, adds: Sequence[AddMessage]) -> list[Outcome]:
    outcomes: list[Outcome] = [None] * len(adds)
    valid: list[int] = []
    for index, add in enumerate(adds):
        try:
            add.check_queues(state)
            if add.large_path is not None:
                check_body(add)
        except InvalidOperation as invalid:
            outcomes[index] = invalid
        else:
            valid.append(index)
    if not valid:
        return outcomes
    inserted = cursor.execute(
        "INSERT INTO messages (id, refs, data, large)"
        " SELECT * FROM unnest(%b::bigint[], %b::integer[], %b::bytea[], %b::bigint[])"
        " ON CONFLICT (id) DO NOTHING RETURNING id",
        (
            [adds[i].message_id for i in valid],
            [len(adds[i].queues) for i in valid],
            [adds[i].data for i in valid],
            [adds[i].large_size for i in valid],
        ),
    ).fetchall()
    done = first_occurrences([adds[i].message_id for i in valid], {row[0] for row in inserted})
    stored: list[AddMessage] = []
    for index, ok in zip(valid, done, strict=True):
        if ok:
            stored.append(adds[index])
        else:
            outcomes[index] = adds[index].already_stored()
    if not stored:
        return outcomes
    refs = [(queue, add.message_id) for add in stored for queue in add.queues]
    cursor.execute(
        "INSERT INTO message_refs (queue, message_id, delivery_count)"
        " SELECT q, m, 0 FROM unnest(%b::text[], %b::bigint[]) AS t(q, m)",
        ([queue for queue, _ in refs], [message_id for _, message_id in refs]),
    )
    duplicates = [add.duplicate for add in stored if add.duplicate is not None]
    if duplicates:
        _store_duplicates(cursor, state, duplicates)
    state.highest_message_id = max(state.highest_message_id, *(add.message_id for add in stored))
    return outcomes


def _store_duplicates(
    cursor: PgCursor, state: WriterState, duplicates: Sequence[StoreDuplicateId]
) -> None:
    """Store ids in one statement, in order; an id stored again becomes the newest (a new
    ``seq``), and an id given twice counts where it was given last."""
    latest: dict[tuple[str, bytes], None] = {}
    for duplicate in duplicates:
        key = (duplicate.address, duplicate.duplicate_id)
        latest.pop(key, None)
        latest[key] = None
    cursor.execute(
        "INSERT INTO duplicate_ids (address, duplicate_id)"
        " SELECT a, d FROM unnest(%b::text[], %b::bytea[]) WITH ORDINALITY AS t(a, d, n)"
        " ORDER BY n"
        " ON CONFLICT (address, duplicate_id) DO UPDATE"
        " SET seq = nextval(pg_get_serial_sequence('duplicate_ids', 'seq'))",
        ([address for address, _ in latest], [duplicate_id for _, duplicate_id in latest]),
    )
    added = Counter(duplicate.address for duplicate in duplicates)
    keep = {duplicate.address: duplicate.keep for duplicate in duplicates}
    for address, count in added.items():
        if state.trim_due(address, keep[address], count):
            cursor.execute(
                "DELETE FROM duplicate_ids WHERE address = %s AND seq <= ("
                " SELECT seq FROM duplicate_ids WHERE address = %s"
                " ORDER BY seq DESC LIMIT 1 OFFSET %s)",
                (address, address, keep[address]),
            )


def _duplicate_run(
    cursor: PgCursor, state: WriterState, run: Sequence[StoreDuplicateId]
) -> list[Outcome]:
    """A run of lone ids (a bridge's target writes one for the messages its consumers
    took before their write) in one statement; none can be refused, ``keep`` having been
    checked as each was made."""
    _store_duplicates(cursor, state, run)
    return [None] * len(run)


def _page_run(cursor: PgCursor, state: WriterState, run: Sequence[PageMessage]) -> list[Outcome]:
    """A run of paged messages in one statement (paging takes a message at a time, so an
    address paging under load gives the writer one per message); an id already paged,
    or given twice, is refused."""
    inserted = cursor.execute(
        "INSERT INTO paged_messages (id, refs, data)"
        " SELECT * FROM unnest(%b::bigint[], %b::integer[], %b::bytea[])"
        " ON CONFLICT (id) DO NOTHING RETURNING id",
        ([op.message_id for op in run], [op.refs for op in run], [op.data for op in run]),
    ).fetchall()
    done = first_occurrences([op.message_id for op in run], {row[0] for row in inserted})
    return [None if ok else op.already_paged() for op, ok in zip(run, done, strict=True)]


_BODIES_GO = (
    " bodies AS (DELETE FROM large_bodies WHERE message_id = ANY(ARRAY("
    "SELECT id FROM gone WHERE large IS NOT NULL)))"
)
"""With a ``gone`` of deleted messages (``RETURNING id, large``): their bodies' rows go
too, in the same statement (an array, so the rows are found through the index)."""


def _drop_references(cursor: PgCursor, table: str, released: Counter[int]) -> None:
    """Each of ``released``'s messages in ``table`` loses as many references as counted;
    those left with none go (a stored one with its body's rows). One statement: the
    deletes and the update touch disjoint rows."""
    bodies = f" RETURNING m.id, m.large),{_BODIES_GO}" if table == "messages" else ")"
    cursor.execute(
        f"WITH c(id, n) AS (SELECT * FROM unnest(%b::bigint[], %b::integer[])),"
        f" gone AS (DELETE FROM {table} AS m USING c WHERE m.id = c.id AND m.refs <= c.n"
        f"{bodies} UPDATE {table} AS m SET refs = m.refs - c.n FROM c"
        " WHERE m.id = c.id AND m.refs > c.n",
        (list(released), list(released.values())),
    )


def _release_pages(cursor: PgCursor, state: WriterState, op: ReleasePages) -> None:
    _drop_references(cursor, "paged_messages", Counter(op.message_ids))


def _ack_run(cursor: PgCursor, state: WriterState, acks: Sequence[Acknowledge]) -> list[Outcome]:
    keys = [(ack.queue, ack.message_id) for ack in acks]
    deleted = cursor.execute(
        "DELETE FROM message_refs AS r USING unnest(%b::text[], %b::bigint[]) AS a(q, m)"
        " WHERE r.queue = a.q AND r.message_id = a.m RETURNING r.queue, r.message_id",
        ([queue for queue, _ in keys], [message_id for _, message_id in keys]),
    ).fetchall()
    done = first_occurrences(keys, {(queue, message_id) for queue, message_id in deleted})
    released = Counter(key[1] for key, ok in zip(keys, done, strict=True) if ok)
    if released:
        _drop_references(cursor, "messages", released)
    return [None if ok else ack.not_held() for ack, ok in zip(acks, done, strict=True)]


def _acknowledge_many(cursor: PgCursor, state: WriterState, op: AcknowledgeMany) -> None:
    # The references go only if the queue holds every one (counted in the same statement).
    ids = list(op.message_ids)
    deleted = cursor.execute(
        "WITH held AS (SELECT count(*) AS n FROM message_refs"
        " WHERE queue = %s AND message_id = ANY(%b::bigint[]))"
        " DELETE FROM message_refs AS r USING held"
        " WHERE held.n = %s AND r.queue = %s AND r.message_id = ANY(%b::bigint[])"
        " RETURNING r.message_id",
        (op.queue, ids, len(ids), op.queue, ids),
    ).fetchall()
    if len(deleted) != len(ids):
        raise op.not_all_held()
    _drop_references(cursor, "messages", Counter(ids))


_ACK_MANY_RUN = (
    "WITH a(op, q, m) AS (SELECT * FROM unnest(%b::integer[], %b::text[], %b::bigint[])),"
    " held AS (SELECT a.op, count(*) AS n FROM a JOIN message_refs AS r"
    " ON r.queue = a.q AND r.message_id = a.m GROUP BY a.op),"
    " whole AS (SELECT held.op FROM held JOIN unnest(%b::integer[]) WITH ORDINALITY"
    " AS w(n, op) ON w.op = held.op WHERE held.n = w.n)"
    " DELETE FROM message_refs AS r USING a JOIN whole ON whole.op = a.op"
    " WHERE r.queue = a.q AND r.message_id = a.m RETURNING a.op"
)
"""A run of all-or-nothing acknowledgements in one statement: an operation's references
go only where its queue holds every one (``whole``, read in the statement's snapshot)."""


def _ack_many_run(
    cursor: PgCursor, state: WriterState, run: Sequence[AcknowledgeMany]
) -> list[Outcome]:
    """One round trip for the run, not one per operation (a consumer acknowledging each
    message alone sends one per message). Operations naming one message twice between
    them are applied one at a time instead: each then sees what the one before took."""
    keys = [(op.queue, message_id) for op in run for message_id in op.message_ids]
    if len(run) == 1 or len(set(keys)) != len(keys):
        return [_one(_acknowledge_many, cursor, state, op) for op in run]
    ops = [index for index, op in enumerate(run, 1) for _ in op.message_ids]
    deleted = cursor.execute(
        _ACK_MANY_RUN,
        (
            ops,
            [queue for queue, _ in keys],
            [message_id for _, message_id in keys],
            [len(op.message_ids) for op in run],
        ),
    ).fetchall()
    done = {op for (op,) in deleted}
    released = Counter(
        message_id
        for index, op in enumerate(run, 1)
        if index in done
        for message_id in op.message_ids
    )
    if released:
        _drop_references(cursor, "messages", released)
    return [None if index in done else op.not_all_held() for index, op in enumerate(run, 1)]


def _one(
    apply: Callable[[PgCursor, WriterState, Any], None],
    cursor: PgCursor,
    state: WriterState,
    op: Operation,
) -> Outcome:
    try:
        apply(cursor, state, op)
    except InvalidOperation as invalid:
        return invalid
    return None


def _delivery_count_run(
    cursor: PgCursor, state: WriterState, run: Sequence[UpdateDeliveryCount]
) -> list[Outcome]:
    """A run of delivery counts in one statement (a consumer closed with messages in
    flight gives one per message); a message counted twice keeps the later count, as one
    at a time would, and a count of a message its queue does not hold is refused."""
    last = {(op.queue, op.message_id): op.count for op in run}
    updated = cursor.execute(
        "UPDATE message_refs AS r SET delivery_count = u.c"
        " FROM unnest(%b::text[], %b::bigint[], %b::integer[]) AS u(q, m, c)"
        " WHERE r.queue = u.q AND r.message_id = u.m RETURNING r.queue, r.message_id",
        ([queue for queue, _ in last], [message_id for _, message_id in last], list(last.values())),
    ).fetchall()
    held = {(queue, message_id) for queue, message_id in updated}
    return [None if (op.queue, op.message_id) in held else op.not_held() for op in run]


def _create_queue(cursor: PgCursor, state: WriterState, op: CreateQueue) -> None:
    op.check(state)
    record = op.record
    cursor.execute(
        "INSERT INTO queues (name, address, routing, filter) VALUES (%s, %s, %s, %s)",
        (record.name, record.address, str(record.routing), record.filter),
    )
    state.queues.add(record.name)


def _delete_queue(cursor: PgCursor, state: WriterState, op: DeleteQueue) -> None:
    op.check(state)
    cursor.execute(
        "WITH c(id, n) AS (SELECT message_id, 1 FROM message_refs WHERE queue = %s),"
        " gone AS (DELETE FROM messages AS m USING c WHERE m.id = c.id AND m.refs <= c.n"
        f" RETURNING m.id, m.large),{_BODIES_GO}"
        " UPDATE messages AS m SET refs = m.refs - c.n FROM c WHERE m.id = c.id AND m.refs > c.n",
        (op.name,),
    )
    cursor.execute("DELETE FROM message_refs WHERE queue = %s", (op.name,))
    cursor.execute("DELETE FROM queues WHERE name = %s", (op.name,))
    state.queues.discard(op.name)


def _commit_transaction(cursor: PgCursor, state: WriterState, op: CommitTransaction) -> None:
    queues, highest = set(state.queues), state.highest_message_id
    cursor.execute("SAVEPOINT txn")
    for outcome in apply_all(cursor, state, op.operations):
        if outcome is not None:
            cursor.execute("ROLLBACK TO SAVEPOINT txn")
            cursor.execute("RELEASE SAVEPOINT txn")
            state.queues, state.highest_message_id = queues, highest
            raise outcome
    cursor.execute("RELEASE SAVEPOINT txn")


_RUNS: dict[type[Any], Callable[[PgCursor, WriterState, Any], list[Outcome]]] = {
    AddMessage: _add_run,
    Acknowledge: _ack_run,
    AcknowledgeMany: _ack_many_run,
    PageMessage: _page_run,
    StoreDuplicateId: _duplicate_run,
    UpdateDeliveryCount: _delivery_count_run,
}
"""Kinds written a whole run at a time."""

_APPLY: dict[type[Any], Callable[[PgCursor, WriterState, Any], None]] = {
    ReleasePages: _release_pages,
    CreateQueue: _create_queue,
    DeleteQueue: _delete_queue,
    ReserveIds: lambda cursor, state, op: reserve_ids(state, op),
    CommitTransaction: _commit_transaction,
}
"""Kinds written one at a time: they write it, or raise ``InvalidOperation`` having
written nothing."""


def apply_all(
    cursor: PgCursor, state: WriterState, operations: Sequence[Operation]
) -> list[Outcome]:
    """Apply ``operations`` in order: the outcome of each (None, or why it was refused)."""
    outcomes: list[Outcome] = []
    for kind, run in runs(operations):
        whole = _RUNS.get(kind)
        if whole is not None:
            outcomes += whole(cursor, state, run)
            continue
        apply = _APPLY[kind]
        outcomes += [_one(apply, cursor, state, operation) for operation in run]
    return outcomes
