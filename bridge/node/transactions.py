"""Local transactions: their sends reach their queues, and their acknowledgements take
effect, together at commit, or never (a rollback gives acknowledged messages back)."""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.defer import Deferred

from bridge.node.address import free
from bridge.node.large import LargeMessages
from bridge.node.queue import Entry
from bridge.node.routing import Router, enqueue
from bridge.node.sent import Transaction
from bridge.node.writes import join
from bridge.store.errors import TransactionRolledBack

GiveBack = Callable[[str, list[Entry]], Deferred[None]]
"""Gives a queue's acknowledged entries back for redelivery, their delivery counted."""


class Transactions:
    """Begins, commits and rolls back the node's local transactions."""

    def __init__(self, router: Router, large: LargeMessages, give_back: GiveBack) -> None:
        self._router = router
        self._store = router.store
        self._large = large
        self._give_back = give_back

    def begin(self) -> Transaction:
        return Transaction(self._store.begin())

    async def commit(self, tx: Transaction) -> None:
        """Make the transaction's work durable, then visible: its sends reach their queues.
        Its repeats of sends still being written wait for those first; a commit that cannot
        send a repeat (its address full under FAIL, or gone) rolls the transaction back."""
        try:
            await self._settle_repeats(tx)
        except BaseException:
            await self.rollback(tx)
            raise
        await join([self._store.commit(tx.store_tx), *tx.writes])
        after_page = self._router.paging.after_page
        for message, bindings, paged in tx.sends:
            if paged is None:
                enqueue(message, bindings)
            else:
                after_page(message, bindings, paged)
        await self._large.release([entry for _, entry in tx.acknowledged])

    async def _settle_repeats(self, tx: Transaction) -> None:
        """Drop each repeat whose first send committed; send the others in ``tx``."""
        while tx.repeats:
            message, settling = tx.repeats.pop(0)
            if await settling:
                self._large.discard(message)
                continue
            try:
                self._router.route(message, tx, None)
            except BaseException:
                self._large.discard(message)  # sent nowhere: a large one's body goes too
                raise

    async def rollback(self, tx: Transaction) -> None:
        """Forget the transaction's sends; its acknowledged messages wait again, counted."""
        self._store.rollback(tx.store_tx)
        for message, _ in tx.repeats:
            self._large.discard(message)
        tx.repeats.clear()
        for write in tx.writes:
            write.addErrback(lambda failure: failure.trap(TransactionRolledBack))
        addresses = self._router.addresses
        unpage = self._router.paging.unpage
        for message, bindings, paged in tx.sends:
            address = addresses[message.address]
            free(address.detection(message))
            if paged is not None:
                unpage(message, address, bindings)
            if message.large is not None:
                self._large.refs.pop(message.id, None)
                self._large.discard(message)
        by_queue: dict[str, list[Entry]] = {}
        for queue_name, entry in tx.acknowledged:
            by_queue.setdefault(queue_name, []).append(entry)
        queues = self._router.queues
        await join(
            [
                self._give_back(queue_name, entries)
                for queue_name, entries in by_queue.items()
                if queue_name in queues
            ]
        )
