"""The store's operations as data, whatever the backend that writes them.

Operations are built on the reactor thread (arguments checked, the message encoded) and
handed, a batch at a time, to the backend's writer (``IStoreWriter.run``), which translates
each into its own statements inside the batch's transaction. An operation that names
something the store does not hold is refused (``InvalidOperation``) having changed nothing,
so the rest of its batch goes on; any database error fails the whole batch.

Backends pay per statement, so a writer takes a run of consecutive operations of one kind
(``runs``) as one unit where it can: adds, or acknowledgements, as multi-row statements.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import attrs

from bridge.store.errors import InvalidOperation
from bridge.store.records import QueueRecord


@attrs.define
class WriterState:
    """What a writer keeps of the stored data to check operations cheaply: the queue names
    and the highest message id (read when it opens, updated by each operation), and how
    many duplicate ids each cache got since it was last trimmed (PostgreSQL), or where
    each cache's ring stands (SQLite)."""

    queues: set[str]
    highest_message_id: int
    untrimmed: dict[str, int] = attrs.Factory(dict)
    rings: dict[str, DuplicateRing] = attrs.Factory(dict)
    """By address, its ring of duplicate ids, read the first time it is written to; a
    write undone (a savepoint rolled back) clears them all, to be read again."""

    def trim_due(self, address: str, keep: int, added: int) -> bool:
        """``added`` ids were stored for ``address``: True once per eighth of ``keep`` ids,
        when its cache is to be trimmed to the newest ``keep`` (trimming scans ``keep``
        index entries; between trims a cache holds at most an eighth more, older ids,
        and the node's cache keeps exactly the newest ``keep`` of what it recovers)."""
        untrimmed = self.untrimmed.get(address, 0) + added
        if untrimmed < max(keep // 8, 1):
            self.untrimmed[address] = untrimmed
            return False
        self.untrimmed[address] = 0
        return True


@attrs.define
class DuplicateRing:
    """An address's duplicate ids as a ring of ``keep`` slots: the next id stored is
    numbered ``next_seq`` and takes slot ``next_seq % keep``."""

    keep: int
    next_seq: int

    def take(self) -> tuple[int, int]:
        """The next id's slot and number."""
        seq = self.next_seq
        self.next_seq = seq + 1
        return seq % self.keep, seq


@attrs.define
class StoreDuplicateId:
    """An id for ``address``'s duplicate-detection cache, which keeps the newest ``keep``
    (storing an id again makes it the newest). (Not frozen, as ``AddMessage``.)"""

    address: str
    duplicate_id: bytes
    keep: int


@attrs.define
class AddMessage:
    """A durable message; a large one's ``data`` is its header and ``large_path`` its body's
    file, synced to disk before the row is written. ``duplicate`` is the message's
    duplicate-detection id, stored with it (one operation, so that a run of adds of a
    bridge's target stays one run of multi-row statements). (Not frozen: one is made for
    every message written, and a frozen class's ``__init__`` costs three times as much;
    nothing changes one once made.)"""

    message_id: int
    queues: tuple[str, ...]
    data: bytes
    large_size: int | None = None
    large_path: str | None = None
    duplicate: StoreDuplicateId | None = None

    def check_queues(self, state: WriterState) -> None:
        for queue in self.queues:
            if queue not in state.queues:
                raise InvalidOperation(
                    f"add message {self.message_id}: there is no durable queue {queue!r}"
                )

    def already_stored(self) -> InvalidOperation:
        return InvalidOperation(
            f"add message {self.message_id}: a message with this id is already stored"
        )


@attrs.frozen
class PageMessage:
    """A message that only paging keeps on disk, for ``refs`` queues."""

    message_id: int
    refs: int
    data: bytes

    def already_paged(self) -> InvalidOperation:
        return InvalidOperation(f"page message {self.message_id}: it is paged already")


@attrs.frozen
class ReleasePages:
    """Queues read paged messages back (one reference each); those no queue needs go."""

    message_ids: tuple[int, ...]


@attrs.frozen
class Acknowledge:
    queue: str
    message_id: int

    def not_held(self) -> InvalidOperation:
        return InvalidOperation(
            f"acknowledge message {self.message_id} on queue {self.queue!r}: "
            "the queue does not hold it"
        )


@attrs.frozen
class AcknowledgeMany:
    """Several acknowledgements on one queue as one operation: all, or (the queue lacking
    one of the messages) none."""

    queue: str
    message_ids: tuple[int, ...]

    def not_all_held(self) -> InvalidOperation:
        return InvalidOperation(
            f"acknowledge {len(self.message_ids)} messages on queue {self.queue!r}: "
            "the queue does not hold all of them"
        )


@attrs.frozen
class UpdateDeliveryCount:
    queue: str
    message_id: int
    count: int

    def not_held(self) -> InvalidOperation:
        return InvalidOperation(
            f"update the delivery count of message {self.message_id} on queue "
            f"{self.queue!r}: the queue does not hold it"
        )


@attrs.frozen
class CreateQueue:
    record: QueueRecord

    def check(self, state: WriterState) -> None:
        if self.record.name in state.queues:
            raise InvalidOperation(f"create queue {self.record.name!r}: the queue exists")


@attrs.frozen
class DeleteQueue:
    name: str

    def check(self, state: WriterState) -> None:
        if self.name not in state.queues:
            raise InvalidOperation(f"delete queue {self.name!r}: there is no such queue")


@attrs.frozen
class ReserveIds:
    """Message ids up to ``upto`` are taken: the store's highest message id rises to it, so
    that ids the node used before their messages were written (or that never were, being
    consumed first) are never given again after a restart."""

    upto: int


@attrs.frozen
class CommitTransaction:
    """A transaction's operations, applied all or none: the first that is invalid undoes
    the ones before it, and fails the transaction with its error."""

    operations: tuple[Operation, ...]


Operation = (
    AddMessage
    | PageMessage
    | ReleasePages
    | Acknowledge
    | AcknowledgeMany
    | UpdateDeliveryCount
    | CreateQueue
    | DeleteQueue
    | StoreDuplicateId
    | ReserveIds
    | CommitTransaction
)

Outcome = InvalidOperation | None


def reserve_ids(state: WriterState, op: ReserveIds) -> None:
    """Every backend's ``ReserveIds``: the writer saves the new highest id with its batch."""
    state.highest_message_id = max(state.highest_message_id, op.upto)


def runs(operations: Sequence[Operation]) -> Iterator[tuple[type[Operation], Sequence[Operation]]]:
    """The operations cut into runs of consecutive operations of one kind, in order."""
    start, count = 0, len(operations)
    while start < count:
        kind = type(operations[start])
        end = start + 1
        while end < count and type(operations[end]) is kind:
            end += 1
        yield kind, operations[start:end]
        start = end


def first_occurrences(keys: Sequence[object], done: set[object]) -> list[bool]:
    """For each of ``keys``: whether the backend did it, where ``done`` holds the keys it
    did; a key given twice was done only the first time (its later ones are refused)."""
    result = []
    seen: set[object] = set()
    for key in keys:
        result.append(key in done and key not in seen)
        seen.add(key)
    return result
