"""Recovery on open: the queues, messages and duplicate ids the store kept, back in
memory, and the configured addresses declared.

The queues are refilled in slices (:func:`twisted.internet.task.coiterate`, about 10 ms
of work per reactor turn): a store of a million messages takes seconds to put back, and
the reactor meanwhile still answers pings, the management API and the live lock's
answers (docs/ha.md, "Timings").

Loading makes millions of objects that live as long as the broker, and each full pass of
Python's garbage collector walks all of them with the interpreter held: one to two seconds
for 750,000 messages, during which no thread runs, the lease's included. So the collector
is off while the store loads, and what is loaded is then frozen out of its passes
(:func:`gc.freeze`) until the broker closes (:func:`gc.unfreeze`).

While a broker is open, the collector's youngest generation is collected after
``YOUNG_COLLECTION`` new objects instead of Python's 700. Nearly everything the node
makes is freed by its reference count, and what outlives a young collection is mostly
queued messages, which every older collection then walks again. At 700, a core bridge's
source node spent 0.43 s of 3.1-3.6 CPU s per 100,000 messages collecting and its target
0.21 s of 2.2; at 50,000, 0.06 s and none (docs/benchmarks.md). Cycles (a failure and its
frames, a Deferred chain) wait longer to be collected, at most that many objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator

from twisted.internet.task import coiterate

from bridge.config.node import NodeConfig, Routing
from bridge.node.large import LargeMessages
from bridge.node.queue import STORED
from bridge.node.routing import Router
from bridge.node.writes import log
from bridge.store.interfaces import IMessageStore
from bridge.store.records import Recovered

YOUNG_COLLECTION = 50_000
"""Net new objects that start a collection of the youngest generation while a broker is
open (Python's default: 700)."""

_before_open: list[tuple[int, int, int]] = []
"""One entry per open broker that raised the collector's thresholds: the thresholds from
before the first of them, put back when the last closes."""

SLICE = 256
"""Messages put back between two looks at the cooperator's clock."""


class Recovery:
    """Opens the store and refills the router and the large-message counts from it."""

    def __init__(
        self, config: NodeConfig, store: IMessageStore, router: Router, large: LargeMessages
    ) -> None:
        self._config = config
        self._store = store
        self._router = router
        self._large = large
        self._collecting_less = False
        """Whether this broker's open raised the collector's thresholds."""

    async def open(self) -> None:
        """Recover queues, messages and duplicate ids; declare configured addresses."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            await self._open()
            gc.freeze()
        finally:
            if collecting:
                gc.enable()
        before = _before_open[0] if _before_open else gc.get_threshold()
        _before_open.append(before)
        gc.set_threshold(YOUNG_COLLECTION, *before[1:])
        self._collecting_less = True

    def closed(self) -> None:
        """The broker closed: what its open froze goes back to the garbage collector, and
        once no broker is open, the collector's thresholds are Python's again."""
        gc.unfreeze()
        if self._collecting_less:
            self._collecting_less = False
            before = _before_open.pop()
            if not _before_open:
                gc.set_threshold(*before)

    async def _open(self) -> None:
        router = self._router
        recovered = await self._store.open(self._config.global_max_size)
        router.next_id = recovered.highest_message_id + 1
        await router.reserve_ids()
        router.recovered_ids = dict(recovered.duplicate_ids)
        await coiterate(self._recover(recovered))
        if recovered.after_crash:
            held = sum(len(each) for each in recovered.messages.values())
            log.warn(
                "the node did not stop cleanly last time: its {count} stored messages "
                "count one delivery more and come back flagged as redelivered",
                count=held,
            )
        for declared in self._config.addresses:
            address = router.address(declared.name, create=True)
            for routing in self._config.routing_types_for(declared.name) - address.routing_types:
                address.add_routing(routing)
            if Routing.ANYCAST in address.routing_types and declared.name not in router.queues:
                await router.create_queue(
                    declared.name, declared.name, durable=True, routing=Routing.ANYCAST
                )

    def _recover(self, recovered: Recovered) -> Iterator[None]:
        """Refill the queues, yielding every :data:`SLICE` messages."""
        router = self._router
        count = 0
        for record in recovered.queues:
            routing = Routing(record.routing)
            address = router.addresses.get(record.address)
            if address is None:
                address = router.new_address(record.address, {routing})
            elif routing not in address.routing_types:
                address.add_routing(routing)
            queue = router.recovered_queue(record.name, address, record.filter, routing)
            for stored in recovered.messages.get(record.name, ()):
                message = stored.message
                if stored.paged_size is not None:
                    address.memory.paged(stored.paged_size)
                    queue.add_paged(message, STORED, stored.paged_size, stored.delivery_count)
                else:
                    if message.large is not None:
                        self._large.held(message.id, 1)
                    queue.add(message, max(stored.delivery_count, message.delivered_before))
                count += 1
                if count % SLICE == 0:
                    yield
