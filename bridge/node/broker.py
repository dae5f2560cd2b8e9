"""The node's core: addresses and queues over the message store, without a wire.

Protocol heads (core, STOMP), bridges and the management API call ``Broker``, a façade
over modules with one job each, which it composes and which nothing else calls:

- ``bridge.node.routing`` (``Router``): the addresses and queues, their creation and
  deletion, message ids, and where each send goes (duplicate detection, the address-full
  policy, the store write of a durable send, adding it to its queues);
- ``bridge.node.paging`` (``Paging``): sends to a full address under PAGE, written to the
  store, and read back for their queues when consumers catch up;
- ``bridge.node.delivery`` (``Delivery``): consumers, acknowledgements, redelivery with
  stored delivery counts, and dead letters;
- ``bridge.node.transactions`` (``Transactions``): local transactions, their sends and
  acknowledgements taking effect together at commit, or never;
- ``bridge.node.large`` (``LargeMessages``): large messages' bodies and the queues still
  holding each, so that a body goes when the last one lets go;
- ``bridge.node.recovery`` (``Recovery``): on open, what the store kept back in memory,
  and the configured addresses declared.

The façade forwards each call by binding its delegate's method in ``__init__``, so a send
or an acknowledgement costs no extra Python call.

It keeps the rule that nothing acknowledged is lost: a durable message reaches its
queues, and its send is confirmed, only once the store holds it; an acknowledgement is
confirmed once the store has dropped the message. A non-durable message is never written
unless paged: it is routed and confirmed at once, and it is gone after a restart.

Memory is bounded by each address's ``max-size-bytes`` and the node's ``global-max-size``
(``bridge.node.memory``): a full address pages, blocks (the heads withhold producer
credits), fails the send, or drops it.

Duplicate detection keeps two caches per address (``bridge.node.address``): producers'
ids, and core bridges' ids (the ``BRIDGE_DUPLICATE_ID`` header), stored under the keys
``ADDRESS`` and ``$bridge.ADDRESS``. Address names starting with ``$`` are the node's own:
no client creates one.
"""

from __future__ import annotations

from collections.abc import Mapping

from twisted.internet.defer import Deferred

from bridge.config.node import NodeConfig
from bridge.node.address import Address
from bridge.node.delivery import ORIGINAL_ADDRESS, ORIGINAL_QUEUE, Delivery
from bridge.node.duplicates import DUPLICATE_ID_HEADER, duplicate_id
from bridge.node.errors import (
    AddressFull,
    AddressNotFound,
    BadFilter,
    NodeError,
    NotStored,
    QueueExists,
    QueueInUse,
    QueueNotFound,
    WrongRouting,
    refusal,
)
from bridge.node.large import LargeMessages
from bridge.node.memory import NodeMemory
from bridge.node.queue import Entry, Queue, QueueError
from bridge.node.recovery import Recovery
from bridge.node.routing import Router
from bridge.node.sent import Routed, Transaction
from bridge.node.transactions import Transactions
from bridge.store.errors import Unsettled
from bridge.store.interfaces import IMessageStore

__all__ = [
    "DUPLICATE_ID_HEADER",
    "ORIGINAL_ADDRESS",
    "ORIGINAL_QUEUE",
    "AddressFull",
    "AddressNotFound",
    "BadFilter",
    "Broker",
    "NodeError",
    "NotStored",
    "QueueError",
    "QueueExists",
    "QueueInUse",
    "QueueNotFound",
    "Routed",
    "Transaction",
    "Unsettled",
    "WrongRouting",
    "duplicate_id",
    "refusal",
]


class Broker:
    """Addresses, queues and durable state, for one node."""

    def __init__(self, config: NodeConfig, store: IMessageStore) -> None:
        self.config = config
        self.store = store
        self.memory = NodeMemory(config.global_max_size)
        large = LargeMessages(store)

        # The queues' dead letters and a rollback's acknowledged messages go to Delivery,
        # which needs the router and the transactions first: called back late.
        def exhausted(queue: Queue, entries: list[Entry]) -> None:
            delivery.exhausted(queue, entries)

        def give_back(queue_name: str, entries: list[Entry]) -> Deferred[None]:
            return delivery.give_back(queue_name, entries)

        router = Router(config, store, self.memory, large, dead_letter=exhausted)
        transactions = Transactions(router, large, give_back=give_back)
        delivery = Delivery(router, transactions, large)
        self._delivery = delivery
        self._recovery = Recovery(config, store, router, large)
        # routing and addresses
        self.create_address = router.create_address
        self.add_routing = router.add_routing
        self.auto_create = router.auto_create
        self.has_address = router.has_address
        self.may_create_address = router.may_create_address
        self.not_creatable = router.not_creatable
        self.is_durable = router.is_durable
        self.queue = router.queue
        self.create_queue = router.create_queue
        self.delete_queue = router.delete_queue
        self.send = router.send
        self.publish = router.publish
        self.publish_then = router.publish_then
        self.allocate_id = router.allocate_id
        self.addresses: Mapping[str, Address] = router.addresses
        self.queues: Mapping[str, Queue] = router.queues
        # large messages
        self.new_body = large.new_body
        self.open_body = large.open_body
        self.close_body = large.close_body
        self.discard = large.discard
        # queues and delivery
        self.next_consumer_id = delivery.next_consumer_id
        self.consume = delivery.consume
        self.acknowledge = delivery.acknowledge
        self.nack = delivery.nack
        self.close_consumer = delivery.close_consumer
        # transactions
        self.begin = transactions.begin
        self.commit = transactions.commit
        self.rollback = transactions.rollback

    async def open(self) -> None:
        """Recover queues, messages and duplicate ids; declare configured addresses."""
        await self._recovery.open()

    async def close(self) -> None:
        """Shut down gracefully: every consumer's unacknowledged messages return to their
        queues with their delivery counts stored, then the store finishes and closes."""
        await self._delivery.close()
        await self.store.close()
        self._recovery.closed()
