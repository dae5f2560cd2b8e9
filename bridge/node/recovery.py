"""Recovery on open: the queues, messages and duplicate ids the store kept, back in
memory, and the configured addresses declared."""

from __future__ import annotations

from bridge.config.node import NodeConfig, Routing
from bridge.node.large import LargeMessages
from bridge.node.queue import STORED
from bridge.node.routing import Router
from bridge.node.writes import log
from bridge.store.interfaces import IMessageStore
from bridge.store.records import Recovered


class Recovery:
    """Opens the store and refills the router and the large-message counts from it."""

    def __init__(
        self, config: NodeConfig, store: IMessageStore, router: Router, large: LargeMessages
    ) -> None:
        self._config = config
        self._store = store
        self._router = router
        self._large = large

    async def open(self) -> None:
        """Recover queues, messages and duplicate ids; declare configured addresses."""
        router = self._router
        recovered = await self._store.open(self._config.global_max_size)
        router.next_id = recovered.highest_message_id + 1
        router.recovered_ids = dict(recovered.duplicate_ids)
        self._recover(recovered)
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

    def _recover(self, recovered: Recovered) -> None:
        router = self._router
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
                    continue
                if message.large is not None:
                    self._large.held(message.id, 1)
                queue.add(message, max(stored.delivery_count, message.delivered_before))
