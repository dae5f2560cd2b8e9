"""The backend-neutral message store: state, transactions and group commit.

Operations are checked and encoded on the reactor thread, batched per reactor turn
(``GroupCommit``) and written by one dedicated writer thread through the backend's writer
(``IStoreWriter``: SQLite, PostgreSQL), one database transaction per batch, batches
strictly in order. A Deferred fires after its batch's commit returned, that is, once the
operation is durable. The writer thread is started by ``open()`` and stopped by
``close()``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from threading import Thread
from typing import IO, Any, TypeVar, cast

import attrs
from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorFromThreads, IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from bridge.message import LargeBody, Message, MessageFormatError, encode_message
from bridge.store.batch import LATER, GroupCommit, Outcome, Outcomes, Then, tell
from bridge.store.errors import (
    Fenced,
    InvalidOperation,
    StoreError,
    StoreNotOpen,
    TransactionRolledBack,
    UnknownTransaction,
)
from bridge.store.interfaces import IBodyWriter, IMessageStore, IReplication, IStoreWriter
from bridge.store.large import BodyFile, BodyReaders, close_body, open_body
from bridge.store.operations import (
    Acknowledge,
    AcknowledgeMany,
    AddMessage,
    CommitTransaction,
    CreateQueue,
    DeleteQueue,
    Operation,
    PageMessage,
    ReleasePages,
    ReserveIds,
    StoreDuplicateId,
    UpdateDeliveryCount,
)
from bridge.store.records import QueueRecord, Recovered, TxId

log = Logger()
_T = TypeVar("_T")


class _State(enum.Enum):
    NEW = "new"
    OPENING = "opening"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


_OPEN = _State.OPEN
"""Checked by every add: a module constant costs a quarter of reading it off its class."""


@attrs.define
class _Transaction:
    operations: list[Operation] = attrs.field(factory=list)
    waiters: list[Deferred[None]] = attrs.field(factory=list)


@attrs.define(eq=False)
class _EarlyAdd:
    """An add of a message already on its queues (``add_early``), until its batch is
    handed to the writer: the queues that have not acknowledged it yet."""

    message: Message
    queues: list[str]
    then: Then
    duplicate: StoreDuplicateId | None = None
    """Stored whatever the queues do: a repeat must be known even once consumed."""
    on_hold: Callable[[], object] | None = None
    """Told when it is held for the bridges that have it (``hold_forwarded``)."""
    group: _Held | None = None
    """While it is held: the adds held with it."""
    was_held: bool = False
    """Held once already: written, not held again, if it must be."""


@attrs.define(eq=False)
class _Held:
    """One batch's early adds held for core bridges, written together when ``timer``
    fires unless every queue acknowledged them first."""

    adds: dict[int, _EarlyAdd] = attrs.Factory(dict)
    timer: IDelayedCall | None = None


def _encode_add(
    message: Message, queues: tuple[str, ...], duplicate: StoreDuplicateId | None
) -> AddMessage:
    """The add of ``message``, encoded; ``InvalidOperation`` if it cannot be."""
    try:
        data = encode_message(message)
    except MessageFormatError as error:
        raise InvalidOperation(f"add message {message.id}: {error}") from None
    large = message.large
    if large is None:
        return AddMessage(message.id, queues, data, duplicate=duplicate)
    return AddMessage(message.id, queues, data, large.size, large.path, duplicate)


def _duplicate_id(address: str, duplicate_id: bytes, keep: int) -> StoreDuplicateId:
    """The operation storing a message's duplicate id with it; ``InvalidOperation`` for a
    cache that keeps nothing."""
    if keep < 1:
        raise InvalidOperation(f"duplicate ids of {address!r}: keep must be at least 1")
    return StoreDuplicateId(address, duplicate_id, keep)


def _spread(results: Outcomes, places: list[int], outcomes: list[Outcome]) -> Outcomes:
    """The writer's outcomes, each in its item's place of the whole batch."""
    for place, outcome in zip(places, results, strict=True):
        outcomes[place] = outcome
    return outcomes


class _DaemonThread(Thread):
    """The writer's thread, as a daemon: a process that ends without closing the store must
    still end. The database's journal keeps it whole; what was not confirmed may be lost,
    which is what a confirmation means."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.daemon = True


class _WriterPool(ThreadPool):
    threadFactory = _DaemonThread


@implementer(IMessageStore)
class MessageStore:
    """``IMessageStore`` through a backend's ``writer``.

    ``reactor`` gives the turns (``callLater(0, ...)`` ends a turn's batch) and carries
    results back from the writer thread. With HA, ``fenced`` hears of each batch the
    writer refused for a stale epoch (``Fenced``): the node must stop serving at once.
    """

    def __init__(
        self,
        writer: IStoreWriter,
        reactor: IReactorTime,
        fenced: Callable[[], None] | None = None,
    ) -> None:
        self.name: str = writer.name
        self._fenced = fenced
        self._threads = IReactorFromThreads(reactor)
        self._pool = _WriterPool(1, 1, name=f"txbridge-store-writer {self.name}")
        self._writer = writer
        self._batches: GroupCommit[Operation | _EarlyAdd] = GroupCommit(reactor, self._run_batch)
        self._early: dict[int, _EarlyAdd] = {}
        """Early adds not handed to the writer yet, by message id, while an acknowledgement
        may still take a queue off them."""
        self._early_items = 0
        """Early adds in the batch to come (some may be out of ``_early`` already)."""
        self._hold_seconds = 0.0
        self._forwards: Callable[[str, int], bool] | None = None
        self._held: set[_Held] = set()
        """The groups of adds held for core bridges (``hold_forwarded``)."""
        self._state = _State.NEW
        self._transactions: dict[TxId, _Transaction] = {}
        self._last_tx = 0
        self._open_finished: Deferred[None] = Deferred()
        self._close_waiters: list[Deferred[None]] = []
        self.replication: IReplication | None = None
        """With HA replication on the live node: where each batch goes too."""
        self._readers = BodyReaders()

    def hold_forwarded(self, seconds: float, forwards: Callable[[str, int], bool]) -> None:
        """Hold a batch's early adds up to ``seconds`` before they are written where
        every queue that still holds one ``forwards`` it: only core bridges consume the
        queue, and the message is in flight to one of them. A bridge acknowledges a message
        once its target confirmed it, so an add every queue acknowledged meanwhile is
        never written; the rest are written when the time is up, or as soon as
        something refers to them. The rest of the batch goes on to the writer at once,
        and the batches after it too. 0: nothing is held."""
        self._hold_seconds = seconds
        self._forwards = forwards

    @property
    def commits(self) -> int:
        """Batches committed so far (one database transaction and disk sync each)."""
        return self._batches.commits

    @property
    def committed_operations(self) -> int:
        """Operations in the committed batches (a transaction's commit counts as one)."""
        return self._batches.committed_items

    def open(self, load_limit: int = -1) -> Deferred[Recovered]:
        if self._state is not _State.NEW:
            return fail(StoreNotOpen(f"{self.name}: open() can be called once"))
        self._state = _State.OPENING
        self._pool.start()
        opened = deferToThreadPool(self._threads, self._pool, self._writer.open, load_limit)
        opened.addCallbacks(self._opened, self._open_failed)
        return opened

    def _opened(self, recovered: Recovered) -> Recovered:
        self._state = _State.OPEN
        self._open_finished.callback(None)
        return recovered

    def _open_failed(self, failure: Failure) -> Failure:
        self._pool.stop()
        self._state = _State.CLOSED
        self._open_finished.callback(None)
        return failure

    def add(
        self, message: Message, queues: Sequence[str], tx: TxId | None = None
    ) -> Deferred[None]:
        try:
            operation = self._add_operation(message, queues)
        except StoreError as error:
            return fail(error)
        return self._submit(operation, tx)

    def add_then(
        self,
        message: Message,
        queues: Sequence[str],
        then: Then,
        *,
        duplicate: tuple[str, bytes, int] | None = None,
    ) -> None:
        try:
            operation = self._add_operation(message, queues, duplicate)
        except StoreError as error:
            then(Failure(error))
            return
        self._batches.submit_then(operation, then)

    def add_early(
        self,
        message: Message,
        queues: Sequence[str],
        then: Then,
        *,
        duplicate: tuple[str, bytes, int] | None = None,
        on_hold: Callable[[], object] | None = None,
    ) -> None:
        if (
            self._state is not _OPEN or not message.durable or len(queues) != 1
        ):  # (the hot path's checks in one test; the reasons below)
            self._check_add(message, queues)
        early = _EarlyAdd(
            message,
            list(queues),
            then,
            None if duplicate is None else _duplicate_id(*duplicate),
            on_hold,
        )
        self._early[message.id] = early
        self._early_items += 1
        self._batches.submit_then(early, then)

    def _add_operation(
        self,
        message: Message,
        queues: Sequence[str],
        duplicate: tuple[str, bytes, int] | None = None,
    ) -> AddMessage:
        """The operation that adds ``message`` (with ``duplicate``, as ``add_then`` says);
        ``StoreError`` if it may not be added."""
        self._check_add(message, queues)
        stored_id = None if duplicate is None else _duplicate_id(*duplicate)
        return _encode_add(message, tuple(queues), stored_id)

    def _check_add(self, message: Message, queues: Sequence[str]) -> None:
        """``StoreError`` if ``message`` may not be added to ``queues``."""
        if self._state is not _OPEN:
            raise StoreNotOpen(f"{self.name} is {self._state.value}, not open")
        if not message.durable:
            raise InvalidOperation(f"add message {message.id}: the message is not durable")
        if not queues:
            raise InvalidOperation(f"add message {message.id}: no queue given")
        if len(queues) > 1 and len(set(queues)) != len(queues):
            raise InvalidOperation(
                f"add message {message.id}: a queue is given twice in {list(queues)}"
            )

    def new_body(self, message_id: int) -> IBodyWriter:
        writer = self._writer
        return BodyFile(writer.body_files.path_for(message_id), writer.free_bodies)

    def open_body(self, body: LargeBody) -> IO[bytes]:
        file = open_body(body)
        self._readers.opened(file)
        return file

    def close_body(self, file: IO[bytes]) -> Deferred[None]:
        close_body(file)
        waiting = self._readers.closed(file)
        if waiting:
            self._delete(file.name).addBoth(_settle, waiting)
        return succeed(None)

    def large_body_path(self, message_id: int) -> str:
        return str(self._writer.body_files.path_for(message_id))

    def discard_body(self, path: str) -> Deferred[None]:
        if self.replication is not None:
            self.replication.discarded(path)
        if self._state is _OPEN and (waiting := self._readers.wait(path)) is not None:
            return waiting
        return self._delete(path)

    def _delete(self, path: str) -> Deferred[None]:
        """Delete (or keep to be written over) a body file nothing reads any more: on the
        writer thread, after the operations already issued; here and now when the store
        is closing (its thread may be gone)."""
        if self._state is not _OPEN:
            self._writer.delete_body(path, False)
            return succeed(None)
        return deferToThreadPool(self._threads, self._pool, self._writer.delete_body, path, True)

    def page(
        self, message: Message, queues: Sequence[str], tx: TxId | None = None
    ) -> Deferred[None]:
        if not queues:
            return self._refuse(f"page message {message.id}: no queue given")
        try:
            data = encode_message(message)
        except MessageFormatError as error:
            return self._refuse(f"page message {message.id}: {error}")
        return self._submit(PageMessage(message.id, len(queues), data), tx)

    def read(
        self, message_ids: Sequence[int], paged_ids: Sequence[int] = ()
    ) -> Deferred[dict[int, Message]]:
        if self._state is not _State.OPEN:
            return fail(StoreNotOpen(f"{self.name} is {self._state.value}, not open"))
        return deferToThreadPool(
            self._threads, self._pool, self._writer.read, list(message_ids), list(paged_ids)
        )

    def unpage(self, message_ids: Sequence[int]) -> Deferred[None]:
        if not message_ids:
            return self._refuse("unpage: no message given")
        return self._submit(ReleasePages(tuple(message_ids)), None)

    def acknowledge(self, queue: str, message_id: int, tx: TxId | None = None) -> Deferred[None]:
        if self._early and self._taken_early(queue, message_id, tx):
            return succeed(None)
        return self._submit(Acknowledge(queue, message_id), tx)

    def acknowledge_many(
        self, queue: str, message_ids: Sequence[int], tx: TxId | None = None
    ) -> Deferred[None]:
        if not message_ids:
            return self._refuse(f"acknowledge on queue {queue!r}: no message given")
        if len(set(message_ids)) != len(message_ids):
            return self._refuse(f"acknowledge on queue {queue!r}: a message is given twice")
        if self._early:
            taken = self._taken_early
            message_ids = [each for each in message_ids if not taken(queue, each, tx)]
            if not message_ids:
                return succeed(None)
        return self._submit(AcknowledgeMany(queue, tuple(message_ids)), tx)

    def _taken_early(self, queue: str, message_id: int, tx: TxId | None) -> bool:
        """Whether acknowledging ``message_id`` on ``queue`` took the queue off its early
        add, not handed to the writer yet (nothing to write). In a transaction, the add
        is written as it is: the commit's acknowledgement comes after it."""
        early = self._early.get(message_id)
        if early is None:
            return False
        if tx is not None or queue not in early.queues:
            self._written_as_it_is(message_id)
            return False
        early.queues.remove(queue)
        if not early.queues:
            del self._early[message_id]
            if early.group is not None:
                self._unhold(early)
                tell(early.then, None)  # consumed: nothing to write
        return True

    def _written_as_it_is(self, message_id: int) -> None:
        """No acknowledgement takes a queue off this early add any more: it is written
        as it is, before what refers to it (one held goes to the next batch now)."""
        early = self._early.pop(message_id, None)
        if early is not None and early.group is not None:
            self._unhold(early)
            self._write(early)

    def _unhold(self, early: _EarlyAdd) -> None:
        """``early`` is held no more; its group's timer goes once none is."""
        group = early.group
        assert group is not None
        early.group = None
        del group.adds[early.message.id]
        if not group.adds:
            self._held.discard(group)
            if group.timer is not None and group.timer.active():
                group.timer.cancel()

    def _write_held(self, group: _Held) -> None:
        """Its time is up (or the store closes, or a queue goes): ``group``'s adds go
        to the next batch, as the queues left them."""
        for early in list(group.adds.values()):
            self._unhold(early)
            self._write(early)

    def _write(self, early: _EarlyAdd) -> None:
        """A held add goes to the next batch (its ``then`` told once that is written)."""
        self._early_items += 1
        self._batches.submit_then(early, early.then)

    def update_delivery_count(
        self, queue: str, message_id: int, count: int, tx: TxId | None = None
    ) -> Deferred[None]:
        if count < 0:
            return self._refuse(f"delivery count of message {message_id}: {count} is negative")
        if self._early:
            self._written_as_it_is(message_id)  # before its new count
        return self._submit(UpdateDeliveryCount(queue, message_id, count), tx)

    def reserve_ids(self, upto: int) -> Deferred[None]:
        return self._submit(ReserveIds(upto), None)

    def create_queue(self, queue: QueueRecord, tx: TxId | None = None) -> Deferred[None]:
        return self._submit(CreateQueue(queue), tx)

    def delete_queue(self, name: str, tx: TxId | None = None) -> Deferred[None]:
        for group in list(self._held):
            self._write_held(group)  # before the queue goes: what they add refers to it
        return self._submit(DeleteQueue(name), tx)

    def store_duplicate_id(
        self, address: str, duplicate_id: bytes, keep: int, tx: TxId | None = None
    ) -> Deferred[None]:
        if keep < 1:
            return self._refuse(f"duplicate ids of {address!r}: keep must be at least 1")
        return self._submit(StoreDuplicateId(address, duplicate_id, keep), tx)

    def begin(self) -> TxId:
        self._check_open()
        self._last_tx += 1
        tx = TxId(self._last_tx)
        self._transactions[tx] = _Transaction()
        return tx

    def commit(self, tx: TxId) -> Deferred[None]:
        transaction = self._transactions.pop(tx, None)
        if transaction is None:
            return fail(UnknownTransaction(f"commit: no open transaction {tx}"))
        done = self._batches.submit(CommitTransaction(tuple(transaction.operations)))
        return done.addBoth(_settle, transaction.waiters)

    def rollback(self, tx: TxId) -> None:
        transaction = self._transactions.pop(tx, None)
        if transaction is None:
            raise UnknownTransaction(f"rollback: no open transaction {tx}")
        _settle(
            Failure(TransactionRolledBack(f"transaction {tx} was rolled back")), transaction.waiters
        )

    def close(self) -> Deferred[None]:
        closed: Deferred[None] = Deferred()
        self._close_waiters.append(closed)
        if len(self._close_waiters) == 1:
            Deferred.fromCoroutine(self._close()).addBoth(self._closed)
        return closed

    async def _close(self) -> None:
        if self._state is _State.OPENING:
            await self._open_finished
        if self._state is not _State.OPEN:
            self._state = _State.CLOSED
            return
        self._state = _State.CLOSING
        transactions, self._transactions = self._transactions, {}
        for tx, transaction in transactions.items():
            rolled_back = TransactionRolledBack(
                f"transaction {tx} was rolled back: the store closed"
            )
            _settle(Failure(rolled_back), transaction.waiters)
        for group in list(self._held):
            self._write_held(group)  # nobody is waited for now
        await self._batches.when_idle()
        for path, waiting in self._readers.take_waiting().items():
            done = deferToThreadPool(
                self._threads, self._pool, self._writer.delete_body, path, False
            )
            await done.addBoth(_settle, waiting)
        try:
            await deferToThreadPool(self._threads, self._pool, self._writer.close)
        finally:
            self._pool.stop()
            self._state = _State.CLOSED

    def _closed(self, result: Failure | None) -> None:
        waiters, self._close_waiters = self._close_waiters, []
        _settle(result, waiters)

    def _submit(self, operation: Operation, tx: TxId | None) -> Deferred[None]:
        if self._state is not _State.OPEN:
            return self._not_open()
        if tx is None:
            return self._batches.submit(operation)
        transaction = self._transactions.get(tx)
        if transaction is None:
            return fail(UnknownTransaction(f"no open transaction {tx}"))
        waiter: Deferred[None] = Deferred()
        transaction.operations.append(operation)
        transaction.waiters.append(waiter)
        return waiter

    def _check_open(self) -> None:
        if self._state is not _State.OPEN:
            raise StoreNotOpen(f"{self.name} is {self._state.value}, not open")

    def _not_open(self) -> Deferred[None]:
        return fail(StoreNotOpen(f"{self.name} is {self._state.value}, not open"))

    @staticmethod
    def _refuse(reason: str) -> Deferred[None]:
        return fail(InvalidOperation(reason))

    def between_batches(self, call: Callable[[], _T]) -> Deferred[_T]:
        """Run ``call`` on the writer thread after the batch now being written (if any)
        and before the next: what it reads of the store is exactly the batches handed to
        the writer so far (replication's snapshot)."""
        return deferToThreadPool(self._threads, self._pool, call)

    def _run_batch(self, items: list[Operation | _EarlyAdd]) -> Deferred[Outcomes]:
        """Hand a batch to the writer. One with early adds waits for the next reactor
        turn first: the acknowledgements its turn gathered (``ack:auto`` deliveries are
        acknowledged at the turn's end, after this call) take their queues off them
        meanwhile, and an add that every queue acknowledged is never written."""
        if not self._early_items:
            return self._run_operations(cast("list[Operation]", items))
        self._early_items = 0
        turned: Deferred[None] = Deferred()
        self._batches.clock.callLater(0, turned.callback, None)  # (the turns it batches by)
        return turned.addCallback(lambda _: self._hand_over(items))

    def _hold(self, items: list[Operation | _EarlyAdd]) -> None:
        """Hold the batch's early adds that every queue ``forwards`` (one group,
        written when its time is up); each one's owner hears it is held: with bridges,
        whose confirmation windows bound it."""
        forwards = self._forwards
        if forwards is None or self._state is not _OPEN:
            return
        early = self._early
        group = _Held()
        for item in items:
            if (
                type(item) is _EarlyAdd
                and item.queues
                and not item.was_held
                and item.duplicate is None
                and early.get(item.message.id) is item
                and all(forwards(queue, item.message.id) for queue in item.queues)
            ):
                item.group = group
                item.was_held = True
                group.adds[item.message.id] = item
        if not group.adds:
            return
        group.timer = self._batches.clock.callLater(self._hold_seconds, self._write_held, group)
        self._held.add(group)
        for item in group.adds.values():
            if item.on_hold is not None:
                try:
                    item.on_hold()
                except Exception:
                    log.failure("an early add's on_hold failed")  # it is held all the same

    def _hand_over(self, items: list[Operation | _EarlyAdd]) -> Deferred[Outcomes]:
        """The batch's early adds encoded, or left out where every queue acknowledged
        them already (their outcome: done; their duplicate id, if any, still stored) or
        where they are held for core bridges (their owners are told later), and the
        batch handed to the writer."""
        if self._hold_seconds:
            self._hold(items)
        early = self._early
        outcomes: list[Outcome] = [None] * len(items)
        operations: list[Operation] = []
        places: list[int] = []
        for place, item in enumerate(items):
            if type(item) is _EarlyAdd:
                if item.group is not None:
                    outcomes[place] = LATER  # held: its queues may still take it off
                    continue
                early.pop(item.message.id, None)  # (handed over: no more taken off)
                if item.queues:
                    try:
                        operations.append(
                            _encode_add(item.message, tuple(item.queues), item.duplicate)
                        )
                    except InvalidOperation as error:
                        outcomes[place] = error
                        continue
                elif item.duplicate is not None:
                    operations.append(item.duplicate)  # consumed: its id alone
                else:
                    continue
            else:
                operations.append(cast(Operation, item))
            places.append(place)
        if not operations:
            return succeed(outcomes)
        return self._run_operations(operations).addCallback(_spread, places, outcomes)

    def _run_operations(self, operations: list[Operation]) -> Deferred[Outcomes]:
        batch: Deferred[Outcomes] = deferToThreadPool(
            self._threads, self._pool, self._writer.run, operations
        )
        if self._fenced is not None:
            batch.addErrback(self._check_fenced)
        replication = self.replication
        if replication is None:
            return batch
        replicated = replication.replicate(operations)
        if replicated is None:
            batch.addErrback(_tell_diverged, replication)
            return batch
        parts: list[Deferred[Any]] = [batch, replicated]
        both = DeferredList(parts, consumeErrors=True).addCallback(_local_outcome, replication)
        return cast("Deferred[Outcomes]", both)

    def _check_fenced(self, failure: Failure) -> Failure:
        if failure.check(Fenced) and self._fenced is not None:
            self._fenced()
        return failure


def _tell_diverged(failure: Failure, replication: IReplication) -> Failure:
    replication.diverged(failure)
    return failure


def _local_outcome(
    results: list[tuple[bool, Any]], replication: IReplication
) -> Outcomes | Failure:
    """Both the local commit and the replication are done: the batch is confirmed only if
    both succeeded (a replication that fails means the node stopped serving before its
    backup could be told it is out of sync)."""
    (committed, outcome), (replicated, failure) = results
    if not committed:
        replication.diverged(outcome)
    elif not replicated:
        return cast(Failure, failure)
    return cast("Outcomes | Failure", outcome)


def _settle(result: Failure | None, waiters: list[Deferred[None]]) -> Failure | None:
    """Fire ``waiters`` with ``result`` (a failure fails them all) and pass it on."""
    for waiter in waiters:
        if isinstance(result, Failure):
            waiter.errback(result)
        else:
            waiter.callback(None)
    return result
