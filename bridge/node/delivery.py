"""Queues and delivery: consumers, acknowledgements, redelivery and dead letters.

``Delivery`` attaches consumers to queues, takes acknowledged messages off them (and out
of the store), gives refused or unacknowledged ones back with their delivery counts
stored, and moves those delivered max-delivery-attempts times to their address's
dead-letter address, in one store transaction (``bridge.node.transactions``).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure

from bridge.message import BRIDGE_DUPLICATE_ID, Message
from bridge.node.errors import NodeError, NotStored
from bridge.node.large import LargeMessages
from bridge.node.queue import UNLIMITED, Entry, Queue, Sink
from bridge.node.routing import Router, compile_filter
from bridge.node.sent import Transaction
from bridge.node.transactions import Transactions
from bridge.node.writes import join, log, log_failure, warn_not_stored
from bridge.store.errors import Unsettled

ORIGINAL_ADDRESS = "_TXB_ORIG_ADDRESS"
ORIGINAL_QUEUE = "_TXB_ORIG_QUEUE"
"""Headers of a dead letter: the address and queue it left (Artemis's ``_AMQ_ORIG_*``)."""


class Delivery:
    """The consuming side of the node's queues."""

    def __init__(self, router: Router, transactions: Transactions, large: LargeMessages) -> None:
        self._router = router
        self._store = router.store
        self._queues = router.queues
        self._durable = router.durable
        self._transactions = transactions
        self._large = large
        self._large_refs = large.refs
        self._consumer_ids = 0
        self._moves: list[Deferred[None]] = []
        """Dead-letter moves queues started during the current call (its result waits
        for them)."""
        self._moving: set[Deferred[None]] = set()
        """Dead-letter moves not finished yet (closing waits for them)."""
        self._dead_dropped: set[str] = set()
        """Queues whose dropped dead letters were logged (once each)."""
        self._acks_not_stored: set[str] = set()
        """Queues whose last acknowledgement the store could not write (logged once)."""

    def next_consumer_id(self) -> int:
        """A consumer id no other consumer of this node has (heads map their clients'
        per-connection ids onto these)."""
        self._consumer_ids += 1
        return self._consumer_ids

    def consume(
        self,
        queue_name: str,
        consumer_id: int,
        sink: Sink,
        *,
        credits: int = UNLIMITED,
        filter: str | None = None,
        held: bool = False,
        auto_ack: bool = False,
        forwards: bool = False,
    ) -> None:
        self._router.queue(queue_name).add_consumer(
            consumer_id,
            sink,
            credits,
            compile_filter(filter),
            held=held,
            auto_ack=auto_ack,
            forwards=forwards,
        )

    def acknowledge(
        self,
        queue_name: str,
        consumer_id: int,
        delivery_id: int,
        *,
        cumulative: bool = False,
        tx: Transaction | None = None,
    ) -> Deferred[None]:
        """Take acknowledged messages off the queue; fires when the store has dropped them.

        In a transaction they leave the consumer now and the queue at commit; a rollback
        gives them back for redelivery."""
        queue = self._router.queue(queue_name)
        entries = queue.acknowledge(consumer_id, delivery_id, cumulative)
        if tx is None:
            forgotten = self._forget(queue_name, entries)
            forgotten.addCallbacks(
                self._acknowledgement_stored,
                self._acknowledgement_not_stored,
                callbackArgs=(queue_name,),
                errbackArgs=(queue_name, entries),
            )
            return forgotten
        tx.acknowledged.extend((queue_name, entry) for entry in entries)
        ids = self._stored_ids(queue_name, entries)
        if ids:
            tx.writes.append(self._store.acknowledge_many(queue_name, ids, tx=tx.store_tx))
        return succeed(None)

    def give_back(self, queue_name: str, entries: list[Entry]) -> Deferred[None]:
        """Acknowledged entries of a rolled-back transaction wait again in their places,
        their delivery counted (those over max-delivery-attempts go to the dead letters)."""
        kept = self._queues[queue_name].give_back(entries)
        return self._with_moves(self._count_deliveries(queue_name, kept))

    def nack(
        self, queue_name: str, consumer_id: int, delivery_id: int, *, requeue: bool
    ) -> Deferred[None]:
        """Give a delivery back for redelivery, or refuse it: to the dead-letter address
        if its address has one, else it is dropped (gone for good)."""
        queue = self._router.queue(queue_name)
        entry = queue.nack(consumer_id, delivery_id, requeue)
        if requeue:
            kept = [] if queue.exhausted(entry) else [entry]
            return self._with_moves(self._count_deliveries(queue_name, kept))
        if self._router.addresses[queue.address].settings.dead_letter_address:
            return self._dead_letter(queue, [entry])
        return self._forget(queue_name, [entry])

    def close_consumer(
        self, queue_name: str, consumer_id: int, *, dead_letters: bool = True
    ) -> Deferred[None]:
        """Stop a consumer; its unacknowledged messages return to the queue, and their
        delivery counts are stored so a restart still knows them as redeliveries. Those
        delivered max-delivery-attempts times go to the dead letters, unless
        ``dead_letters`` is False (a bridge giving back; the node closing what consumers
        are left once the heads closed their connections). Counts the store cannot write
        are logged, not raised."""
        returned = self._router.queue(queue_name).remove_consumer(consumer_id, dead_letters)
        # The consumer is gone whatever the store says: counts it cannot write (a full
        # disk) are kept in memory, and the closing connection's cleanup goes on.
        counted = self._count_deliveries(queue_name, returned).addErrback(
            warn_not_stored, f"the delivery counts of queue {queue_name!r}"
        )
        return self._with_moves(counted)

    async def close(self) -> None:
        """Every consumer's unacknowledged messages return to their queues with their
        delivery counts stored; fires once the dead-letter moves under way are done too."""
        returns = [
            self.close_consumer(name, consumer_id, dead_letters=False)
            for name, queue in self._queues.items()
            for consumer_id in queue.consumer_ids
        ]
        await join(returns)
        await join(list(self._moving))

    # -- dead letters ---------------------------------------------------------------------

    def exhausted(self, queue: Queue, entries: list[Entry]) -> None:
        """A queue let go of entries delivered max-delivery-attempts times."""
        move = self._dead_letter(queue, entries)
        self._moves.append(move)
        self._moving.add(move)

        def finished(result: Failure | None) -> Failure | None:
            self._moving.discard(move)
            return result

        move.addBoth(finished)

    def _with_moves(self, done: Deferred[None]) -> Deferred[None]:
        """``done``, and the dead-letter moves the call that made it started."""
        if not self._moves:
            return done
        moves, self._moves = self._moves, []
        return join([done, *moves])

    def _dead_letter(self, queue: Queue, entries: list[Entry]) -> Deferred[None]:
        """Entries ``queue`` let go of (exhausted, or refused without requeue) go to its
        address's dead-letter address as new messages naming where they came from; the
        store adds them there and drops them from ``queue`` in one transaction, so a
        durable one is in one place or the other whatever happens. Without a dead-letter
        address (or one that cannot take them) they are dropped and counted."""
        router = self._router
        dla = router.addresses[queue.address].settings.dead_letter_address
        if not dla or dla.startswith("$"):
            return self._drop_dead(queue, entries, "it has no dead-letter-address")
        if dla not in router.addresses and not router.may_create_address(dla):
            return self._drop_dead(
                queue, entries, f"dead-letter-address {dla!r} does not exist and may not be created"
            )
        transactions = self._transactions
        tx = transactions.begin()
        for entry in entries:
            message = entry.message
            headers = {
                key: value for key, value in message.headers.items() if key != BRIDGE_DUPLICATE_ID
            }
            headers[ORIGINAL_ADDRESS] = queue.address
            headers[ORIGINAL_QUEUE] = queue.name
            copy = Message(
                0, dla, message.durable, headers, message.body, None, message.timestamp_ns
            )
            try:
                router.publish(copy, tx=tx)
            except NodeError as refused:
                Deferred.fromCoroutine(transactions.rollback(tx)).addErrback(
                    log_failure, "rolling back a move to the dead letters"
                )
                return self._drop_dead(queue, entries, str(refused))
        ids = self._stored_ids(queue.name, entries)
        if ids:
            tx.writes.append(self._store.acknowledge_many(queue.name, ids, tx=tx.store_tx))
        moved = Deferred.fromCoroutine(transactions.commit(tx))
        moved.addErrback(log_failure, f"moving messages of queue {queue.name!r} to {dla!r}")
        return moved

    def _drop_dead(self, queue: Queue, entries: list[Entry], why: str) -> Deferred[None]:
        """Drop dead letters that have nowhere to go, counted, logged once per queue."""
        queue.dropped_total += len(entries)
        if queue.name not in self._dead_dropped:
            self._dead_dropped.add(queue.name)
            log.warn(
                "messages of queue {queue!r} over max-delivery-attempts are dropped: {why}",
                queue=queue.name,
                why=why,
            )
        return self._forget(queue.name, entries)

    # -- the store's side -----------------------------------------------------------------

    def _acknowledgement_not_stored(
        self, failure: Failure, queue_name: str, entries: list[Entry]
    ) -> Failure:
        """The store did not drop acknowledged messages: they are not acknowledged after
        all. As after a rollback they wait again in their places on their queue, for
        redelivery, their delivery counted; the failure says so. Not so when the node
        stopped serving before the write was settled (``Unsettled``): the backup may hold
        the acknowledgement, and the node serves nothing more."""
        if failure.check(Unsettled):
            return failure
        queue = self._queues.get(queue_name)
        ids = ", ".join(str(entry.message.id) for entry in entries)
        which = f"message {ids} is" if len(entries) == 1 else f"messages {ids} are"
        if queue is None:
            where = f"queue {queue_name!r} is gone"
        else:
            queue.acknowledged_total -= len(entries)
            kept = queue.give_back(entries)
            # Counts the store cannot write either fail for the cause logged below.
            self._with_moves(self._count_deliveries(queue_name, kept)).addErrback(lambda _: None)
            where = f"{which} back on queue {queue_name!r}, unacknowledged"
        cause = failure.getErrorMessage()
        if queue_name not in self._acks_not_stored:
            # Once until one is stored again: a full disk must not fill the log too.
            self._acks_not_stored.add(queue_name)
            log.warn(
                "acknowledgements on queue {queue!r} are not stored ({cause}): their messages "
                "go back on the queue, unacknowledged, until the store writes again",
                queue=queue_name,
                cause=cause,
            )
        return Failure(NotStored(f"acknowledgement not stored ({cause}); {where}"))

    def _acknowledgement_stored(self, result: None, queue_name: str) -> None:
        if queue_name in self._acks_not_stored:
            self._acks_not_stored.discard(queue_name)
            log.info("acknowledgements on queue {queue!r} are stored again", queue=queue_name)
        return result

    def _forget(self, queue_name: str, entries: list[Entry]) -> Deferred[None]:
        """Drop acknowledged entries from the store: one operation however many; then
        large messages no queue holds lose their files."""
        ids = self._stored_ids(queue_name, entries)
        done = self._store.acknowledge_many(queue_name, ids) if ids else succeed(None)
        if self._large_refs:
            done.addCallback(lambda _: self._large.release(entries))
        return done

    def _stored_ids(self, queue_name: str, entries: list[Entry]) -> list[int]:
        """The ids of the entries the store holds on this queue."""
        if queue_name not in self._durable:
            return []
        unstored = self._router.unstored
        if unstored:  # queued early, their writes failed: not in the store
            return [
                entry.message.id
                for entry in entries
                if entry.message.durable and entry.message.id not in unstored
            ]
        return [entry.message.id for entry in entries if entry.message.durable]

    def _count_deliveries(self, queue_name: str, entries: list[Entry]) -> Deferred[None]:
        if queue_name not in self._durable:
            return succeed(None)
        unstored = self._router.unstored
        writes = [
            self._store.update_delivery_count(queue_name, entry.message.id, entry.delivery_count)
            for entry in entries
            if entry.message.durable and entry.message.id not in unstored
        ]
        return join(writes)
