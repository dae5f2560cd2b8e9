"""Paging: a send to a full address under PAGE is written to the store and its queues
keep only its place; they read it back, in order, when their consumers catch up."""

from __future__ import annotations

from collections.abc import Container

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from bridge.message import Message
from bridge.node.address import Address, Binding, Detection, hold, settle
from bridge.node.queue import STORED, TRANSIENT, Entry, Queue
from bridge.node.sent import Routed, Transaction
from bridge.node.writes import join, log, log_failure, store_detection
from bridge.store.interfaces import IMessageStore


class Paging:
    """Writes paged sends, and reads pages back for the queues (their pager)."""

    def __init__(self, store: IMessageStore, durable: Container[str]) -> None:
        self._store = store
        self._durable = durable

    def page(
        self,
        message: Message,
        address: Address,
        bindings: list[Binding],
        routed: Routed,
        tx: Transaction | None,
        *,
        detection: Detection | None,
    ) -> Routed | Deferred[Routed]:
        """Write the message to the store and give its queues only its place: durable
        queues have it as a stored message, the others as a page."""
        durable = frozenset(
            name for name in routed.queues if message.durable and name in self._durable
        )
        transient = [name for name in routed.queues if name not in durable]
        store_tx = tx.store_tx if tx is not None else None
        writes = []
        if durable:
            writes.append(self._store.add(message, sorted(durable), tx=store_tx))
        if transient:
            writes.append(self._store.page(message, transient, tx=store_tx))
        store_detection(self._store, detection, writes, store_tx)
        size = message.size
        for _ in bindings:
            address.memory.paged(size)
        if tx is not None:
            tx.sends.append((message, bindings, durable))
            tx.writes.extend(writes)
            return routed

        hold(detection)

        def paged(_: None) -> Routed:
            self.after_page(message, bindings, durable)
            settle(detection, committed=True)
            return routed

        def not_paged(failure: Failure) -> Failure:
            self.unpage(message, address, bindings)
            settle(detection, committed=False)
            return failure

        return join(writes).addCallbacks(paged, not_paged)

    @staticmethod
    def after_page(message: Message, bindings: list[Binding], durable: frozenset[str]) -> None:
        """A paged send is stored: its queues get its place."""
        stub, size, before = message.stub(), message.size, message.delivered_before
        for binding in bindings:
            where = STORED if binding.queue.name in durable else TRANSIENT
            binding.queue.add_paged(stub, where, size, before)

    @staticmethod
    def unpage(message: Message, address: Address, bindings: list[Binding]) -> None:
        """A paged send did not happen after all (its write failed, or its transaction
        rolled back): it no longer counts as paged."""
        for _ in bindings:
            address.memory.unpaged(message.size)

    def page_in(self, queue: Queue, entries: list[Entry]) -> None:
        """Read paged entries back for ``queue`` (its pager)."""
        stored = [entry.message.id for entry in entries if entry.paged == STORED]
        paged = [entry.message.id for entry in entries if entry.paged == TRANSIENT]

        def loaded(messages: dict[int, Message]) -> None:
            taken = queue.paged_in(entries, messages)
            released = [entry.message.id for entry in taken if entry.message.id in paged_set]
            if released:
                self._store.unpage(released).addErrback(log_failure, "releasing pages")

        def failed(failure: Failure) -> None:
            log.failure("reading back pages of queue {queue!r} failed", failure, queue=queue.name)
            queue.page_in_failed()

        paged_set = set(paged)
        self._store.read(stored, paged).addCallbacks(loaded, failed)
