"""The message store seam: what the node asks of any store (SQLite, PostgreSQL, replicated).

Every operation returns a Deferred that fires only once the operation is durable: after
that, a crash of the process or the machine does not undo it. Operations are applied in the
order they were issued. An operation given ``tx=`` only joins that transaction: its
Deferred fires when the commit is durable, fails with ``TransactionRolledBack`` if the
transaction is rolled back, and nothing of it is written before ``commit(tx)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING

from zope.interface import Attribute, Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure

    from bridge.message import LargeBody, Message
    from bridge.store.operations import Operation, Outcome
    from bridge.store.records import QueueRecord, Recovered, TxId


class IMessageStore(Interface):
    """Durable messages, their queues, delivery counts and duplicate-detection ids."""

    def open(load_limit: int = -1) -> Deferred[Recovered]:
        """Open (creating if needed) and load everything stored, for the node to rebuild
        its queues: messages in full up to ``load_limit`` bytes in all (-1: no limit), the
        rest as stubs to read back later. Other operations are refused until this has
        fired."""

    def add(message: Message, queues: Sequence[str], tx: TxId | None = None) -> Deferred[None]:
        """Store a durable message routed to ``queues`` (at least one, no repeats). The
        message is stored once however many queues it is on, and stays until it is
        acknowledged on every one of them. A large message's body file (``large``) is
        synced to disk with it, and opening the store removes body files no message owns."""

    def add_then(
        message: Message,
        queues: Sequence[str],
        then: Callable[[Failure | None], object],
        *,
        duplicate: tuple[str, bytes, int] | None = None,
    ) -> None:
        """``add`` outside a transaction without a Deferred, for the node's hot path:
        ``then`` is called with None once the message is durable, or with the failure
        ``add``'s Deferred would have (at once, if the add is refused). ``duplicate``
        (address, id, keep) is stored with the message, in the same operation, as
        ``store_duplicate_id`` would store it: both or neither."""

    def add_early(
        message: Message,
        queues: Sequence[str],
        then: Callable[[Failure | None], object],
        *,
        duplicate: tuple[str, bytes, int] | None = None,
        on_hold: Callable[[], object] | None = None,
    ) -> None:
        """``add_then`` for a message already on its queues: until its add is handed to
        the writer, an ``acknowledge`` of it outside a transaction takes its queue off the
        add instead of being written, and an add no queue holds any more is never written
        (``then`` still hears None in its turn) but for its ``duplicate``, which is always
        stored. A large message's body is then neither synced nor stored: the caller
        discards it, as after any last acknowledgement. ``StoreError`` at once if the add
        is refused. ``on_hold`` is told if it is held for the core bridges that have it
        (``hold_forwarded``): its bytes are then the bridges' to bound."""

    def hold_forwarded(seconds: float, forwards: Callable[[str, int], bool]) -> None:
        """Hold early adds that every queue ``forwards`` (only core bridges consume it,
        and the message is in flight to one of them) out of their batch, up to
        ``seconds``: one that every queue acknowledged meanwhile, its bridges' targets
        having confirmed it, is done and never written; the rest are written when the
        time is up or something refers to them. Other writes do not wait. 0: none is
        held."""

    def new_body(message_id: int) -> IBodyWriter:
        """Start a large message's body, written in chunks before ``add``; a body no
        stored message owns is deleted when the store next opens."""

    def open_body(body: LargeBody) -> IO[bytes]:
        """A stored large message's body, to read in chunks and close; ``OSError`` if it
        cannot be read."""

    def close_body(file: IO[bytes]) -> Deferred[None]:
        """Close what ``open_body`` gave; where the body was discarded meanwhile and this
        was its last reader, the discard goes on now. Fires once closed; a failure is
        logged, not passed on."""

    def large_body_path(message_id: int) -> str:
        """Where a large message's body file goes, for tools and tests that inspect the
        store's files; the node itself writes and reads bodies through ``new_body`` and
        ``open_body`` only."""

    def discard_body(path: str) -> Deferred[None]:
        """Delete a large body file no message needs any more, or keep it to be written
        over by a new body (``IStoreWriter.delete_body``), off the reactor thread (freeing
        a large file keeps the file system busy for milliseconds), after the operations
        already issued and once ``open_body``'s readers of it closed it; fires once it is
        gone. A failure is logged, not passed on: the file is then deleted at the next
        open, as no stored message owns it."""

    def page(message: Message, queues: Sequence[str], tx: TxId | None = None) -> Deferred[None]:
        """Keep a message that paging takes out of memory (a non-durable one, or a durable
        one for non-durable ``queues``) until ``unpage`` has been called once per queue;
        such messages are gone after the store is reopened."""

    def read(
        message_ids: Sequence[int], paged_ids: Sequence[int] = ()
    ) -> Deferred[dict[int, Message]]:
        """Read messages back by id: stored ones (``add``) and paged ones (``page``) whose
        Deferreds have fired; a missing one fails the read."""

    def unpage(message_ids: Sequence[int]) -> Deferred[None]:
        """A queue read each of these paged messages back: one reference each less."""

    def reserve_ids(upto: int) -> Deferred[None]:
        """Message ids up to ``upto`` are taken: once this fires, the ``highest_message_id``
        of every later ``open`` is at least ``upto``, whatever was added."""

    def acknowledge(queue: str, message_id: int, tx: TxId | None = None) -> Deferred[None]:
        """Remove a message from ``queue``; the message goes once no queue holds it."""

    def acknowledge_many(
        queue: str, message_ids: Sequence[int], tx: TxId | None = None
    ) -> Deferred[None]:
        """``acknowledge`` of several messages of ``queue`` (at least one, no repeats) as
        one operation with one Deferred: all of them, or, should the queue not hold one of
        them, none."""

    def update_delivery_count(
        queue: str, message_id: int, count: int, tx: TxId | None = None
    ) -> Deferred[None]:
        """Record how often the message was delivered on ``queue``."""

    def create_queue(queue: QueueRecord, tx: TxId | None = None) -> Deferred[None]:
        """Store a durable queue's definition (its name must be new)."""

    def delete_queue(name: str, tx: TxId | None = None) -> Deferred[None]:
        """Remove a queue's definition and every message reference it holds."""

    def store_duplicate_id(
        address: str, duplicate_id: bytes, keep: int, tx: TxId | None = None
    ) -> Deferred[None]:
        """Add an id to ``address``'s duplicate-detection cache, which keeps the newest
        ``keep`` ids (storing an id again makes it the newest); it may hold up to an
        eighth more between trims, older ones, which recovery hands over first."""

    def begin() -> TxId:
        """Start a transaction; operations given its id are held until it commits."""

    def commit(tx: TxId) -> Deferred[None]:
        """Write every operation of ``tx`` atomically: all of them, or (failing) none."""

    def rollback(tx: TxId) -> None:
        """Drop ``tx``: nothing of it is ever written."""

    def close() -> Deferred[None]:
        """Finish the operations already issued, roll back open transactions, release
        the store; fires once everything is written and closed."""


class IBodyWriter(Interface):
    """A large message's body being written, chunk by chunk, never whole in memory."""

    name = Attribute("Where the body goes (a file's path), for errors that name it.")

    def write(data: bytes | memoryview) -> None:
        """Append a chunk."""

    def finish() -> LargeBody:
        """The body is complete: what a message's ``large`` holds, for ``add``."""

    def abort() -> None:
        """The send was cut off or refused: the partial body goes."""


class IReplication(Interface):
    """Where a live node's store sends each batch it writes, to keep a backup's copy."""

    def replicate(operations: Sequence[Operation]) -> Deferred[None] | None:
        """A batch goes to the writer now (on the reactor thread, batches in order): a
        Deferred that fires once its confirmation may go out as far as the copy is
        concerned, or fails if it must not go out at all; None for at once."""

    def diverged(failure: Failure) -> None:
        """The batch last given to ``replicate`` failed here: a copy that took it differs."""

    def discarded(path: str) -> None:
        """A large body no message needs any more is deleted here (after the batches that
        let it go): the copy's goes too."""


class IStoreWriter(Interface):
    """A store's backend: the database a ``MessageStore`` writes through.

    The store calls every method on its one writer thread, never two at once, so a writer
    needs no locking of its own; it translates the operations (``bridge.store.operations``,
    plain data) into its own statements.
    """

    name = Attribute("What errors and logs call the store (a file, a database).")
    body_files = Attribute(
        "The folder of large bodies' files (``bridge.store.large.BodyFiles``), which the"
        " node writes and reads on the reactor thread: the bodies themselves on SQLite, a"
        " cache of the rows that hold them on PostgreSQL."
    )
    free_bodies = Attribute(
        "Discarded bodies' files kept to be written over by new bodies"
        " (``bridge.store.large.FreeBodies``), emptied when the store opens: kept on the"
        " writer thread (``delete_body``), taken on the reactor thread, so it locks."
    )

    def open(load_limit: int) -> Recovered:
        """Connect (creating or migrating the schema), note that a node runs on the store,
        and load everything stored, as ``IMessageStore.open`` says."""

    def run(operations: Sequence[Operation]) -> list[Outcome]:
        """Apply ``operations`` in order in one transaction and commit it durably: the
        outcome of each (None, or the ``InvalidOperation`` that refused it, having written
        nothing of it), or raise ``CommitFailed`` having written nothing at all."""

    def read(message_ids: Sequence[int], paged_ids: Sequence[int]) -> dict[int, Message]:
        """Stored and paged messages by id; ``StoreError`` if one is missing."""

    def delete_body(path: str, reusable: bool) -> None:
        """Delete a large body file no message needs, or, where ``reusable`` (nothing
        reads it) and ``free_bodies`` has room, keep it to be written over; a failure is
        logged, not raised."""

    def close() -> None:
        """Record the clean stop and disconnect."""
