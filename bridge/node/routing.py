"""Routing and addresses: the node's addresses and queues, and where each send goes.

``Router`` keeps the addresses (created from the configuration, a queue record or a first
use) and the queues bound to them, assigns message ids, and routes a send: duplicate
detection, the address-full policy, the store write of a durable send, and adding it to
its queues once it is safe. A send in a transaction is only recorded on it (its commit,
``bridge.node.transactions``, adds it to its queues); a paged send goes through
``bridge.node.paging``. The per-message path (``publish_then``) lives here alone.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial

from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure

from bridge.config.node import AddressFullPolicy, NodeConfig, Routing
from bridge.message import BRIDGE_DUPLICATE_ID, DELIVERY_COUNT, HeaderValue, Message
from bridge.node.address import (
    BRIDGE_KEY_PREFIX,
    Address,
    AddressError,
    Binding,
    Detection,
    hold,
    routing_names,
    settle,
)
from bridge.node.duplicates import DuplicateIdCache
from bridge.node.errors import AddressFull, AddressNotFound, NodeError, QueueNotFound
from bridge.node.large import LargeMessages
from bridge.node.memory import AddressMemory, NodeMemory
from bridge.node.paging import Paging
from bridge.node.queue import TRANSIENT, Entry, Filter, Queue
from bridge.node.sent import Routed, Transaction
from bridge.node.writes import join, log, log_failure, store_detection, warn_not_stored
from bridge.selector import compile_selector
from bridge.store.errors import StoreError, Unsettled
from bridge.store.interfaces import IMessageStore
from bridge.store.records import QueueRecord

Then = Callable[[Failure | None], object]
"""Told that a send waiting for its store write is safe to confirm (None), or why not."""

DeadLetter = Callable[[Queue, list[Entry]], None]
"""Told of entries a queue let go of, delivered max-delivery-attempts times."""


def compile_filter(text: str | None) -> Filter | None:
    """A queue's or a consumer's filter, compiled (None: everything matches)."""
    return compile_selector(text).matches if text else None


class Queued(enum.Enum):
    """``publish_then``'s answer for a send queued early, its write under way."""

    QUEUED = "queued"


QUEUED = Queued.QUEUED

ID_BLOCK = 10_000
"""Message ids reserved in the store at a time, ahead of sends queued before their writes
(Artemis's id generator reserves its ids in blocks of this size too)."""

_ANYCAST = Routing.ANYCAST
"""Read on every send: a module constant costs a quarter of reading it off its class."""


class Router:
    """The addresses and queues of one node, and the routing of sends to them."""

    def __init__(
        self,
        config: NodeConfig,
        store: IMessageStore,
        memory: NodeMemory,
        large: LargeMessages,
        dead_letter: DeadLetter,
    ) -> None:
        self.config = config
        self.store = store
        self.memory = memory
        self._large = large
        self._dead_letter = dead_letter
        self._addresses: dict[str, Address] = {}
        self._queues: dict[str, Queue] = {}
        self._durable: set[str] = set()
        self.paging = Paging(store, self._durable)
        self.next_id = 1
        self.recovered_ids: dict[str, Sequence[bytes]] = {}
        """Stored duplicate ids, by store key, of addresses not created yet since the start."""
        self._to_one: dict[str, Routed] = {}
        """The ``Routed`` of a send to one queue, by the queue's name (immutable: shared)."""
        self._ids_reserved = 0
        """Message ids up to this one are reserved in the store (``_id_reserved``)."""
        self._reserving = False
        self.unstored: set[int] = set()
        """Ids of durable messages queued early whose write failed: not in the store, so
        their acknowledgements write nothing. (Kept: a failed write is rare, and the node
        that has one is usually about to stop serving.)"""
        self._creating: dict[str, list[Deferred[None]]] = {}
        """Queues being created (stored first), and the calls waiting for each."""
        store.hold_forwarded(config.store.bridge_confirm_wait, self._forwards)

    # -- addresses and queues -------------------------------------------------------------

    @property
    def addresses(self) -> Mapping[str, Address]:
        return self._addresses

    @property
    def queues(self) -> Mapping[str, Queue]:
        return self._queues

    def _forwards(self, name: str, message_id: int) -> bool:
        """Whether the queue ``name`` ``forwards`` ``message_id`` (for the store's hold)."""
        queue = self._queues.get(name)
        return queue is not None and queue.forwards(message_id)

    @property
    def durable(self) -> set[str]:
        """The names of the stored queues."""
        return self._durable

    def new_address(self, name: str, routing_types: Iterable[Routing]) -> Address:
        """Create an address, its duplicate-id caches refilled from what the store kept for
        it (whether it comes back from a queue record, the configuration or a first use)."""
        address = Address(
            name,
            routing_types,
            self.config.settings_for(name),
            recovered_ids=self.recovered_ids.pop(name, ()),
            recovered_bridge_ids=self.recovered_ids.pop(BRIDGE_KEY_PREFIX + name, ()),
            node_memory=self.memory,
        )
        self._addresses[name] = address
        return address

    def new_queue(self, name: str, address: Address) -> Queue:
        return Queue(
            name,
            address.name,
            memory=address.memory,
            pager=self.paging.page_in,
            max_deliveries=address.settings.max_delivery_attempts,
            dead_letter=self._dead_letter,
        )

    def address(self, name: str, *, create: bool, routing: Routing | None = None) -> Address:
        """The address ``name``; created if missing and ``create`` is set or settings allow
        (with ``routing``, or the configured routing types), else AddressNotFound."""
        address = self._addresses.get(name)
        if address is not None:
            return address
        if not create and not self.may_create_address(name):
            raise self.not_creatable(name)
        types = self.config.routing_types_for(name) if routing is None else {routing}
        return self.new_address(name, types)

    def create_address(self, name: str, routing: Routing) -> Address:
        """The address ``name`` with ``routing``: created (without queues) if missing, as
        a head creates one on first use once it checked the client may; an existing one
        gets ``routing`` too if it lacks it (see ``add_routing``). AddressNotFound for a
        name reserved to the node."""
        address = self._addresses.get(name)
        if address is None:
            if name.startswith("$"):
                raise self.not_creatable(name)
            return self.new_address(name, {routing})
        self.add_routing(address, routing)
        return address

    def add_routing(self, address: Address, routing: Routing) -> None:
        """Give ``address`` the routing type ``routing`` if it lacks it, as Artemis does
        for a client that uses it where addresses may be created on first use; NodeError
        where they may not."""
        if routing in address.routing_types:
            return
        if not self.may_create_address(address.name):
            raise NodeError(
                f"address {address.name!r} is {routing_names(address.routing_types)}, not "
                f"{routing.value}, and auto-create-addresses is off for it"
            )
        address.add_routing(routing)

    def _auto_queue(self, address: Address) -> None:
        """An anycast address created on first use gets its queue of the same name, as
        Artemis's auto-create-queues does; it is stored in the same group commit as the
        send that created it, ahead of it."""
        if Routing.ANYCAST not in address.routing_types or address.name in self._queues:
            return
        queue = self.new_queue(address.name, address)
        address.bind(queue, None, durable=True, routing=Routing.ANYCAST)
        self._queues[address.name] = queue
        self._durable.add(address.name)
        self.store.create_queue(
            QueueRecord(address.name, address.name, Routing.ANYCAST.value, None)
        ).addErrback(self._auto_queue_failed, address.name)

    def _auto_queue_failed(self, failure: Failure, name: str) -> None:
        log.failure("auto-created queue {name!r} could not be stored", failure, name=name)

    def auto_create(self, address_name: str) -> Address:
        """The address, created on first use if settings allow (an anycast one with its
        queue); AddressNotFound if they do not."""
        address = self.address(address_name, create=False)
        self._auto_queue(address)
        return address

    def has_address(self, name: str) -> bool:
        return name in self._addresses

    def may_create_address(self, name: str) -> bool:
        """Whether a missing address of this name is created on first use (never one whose
        name starts with ``$``: those are the node's own, as its duplicate-id keys)."""
        return not name.startswith("$") and self.config.settings_for(name).auto_create_addresses

    @staticmethod
    def not_creatable(name: str) -> AddressNotFound:
        """The error for a missing address that ``may_create_address`` refuses, saying why."""
        why = (
            "names starting with '$' are reserved for the node"
            if name.startswith("$")
            else "auto-create-addresses is off for it"
        )
        return AddressNotFound(f"address {name!r} does not exist and {why}")

    def is_durable(self, queue_name: str) -> bool:
        return queue_name in self._durable

    def queue(self, name: str) -> Queue:
        try:
            return self._queues[name]
        except KeyError:
            raise QueueNotFound(f"no queue {name!r}") from None

    def recovered_queue(
        self, name: str, address: Address, filter: str | None, routing: Routing
    ) -> Queue:
        """A stored queue back from the store, bound to its address as it was."""
        queue = self.new_queue(name, address)
        address.bind(queue, compile_filter(filter), durable=True, routing=routing)
        self._queues[name] = queue
        self._durable.add(name)
        return queue

    async def create_queue(
        self,
        name: str,
        address_name: str,
        *,
        durable: bool,
        filter: str | None = None,
        routing: Routing | None = None,
    ) -> Queue:
        """Create a queue bound to an address (created too if settings allow, with
        ``routing`` or the configured default); durable queues are stored before they
        exist. The queue's routing type is ``routing``, else the address's ``routing``; an
        existing address lacking it gets it where ``add_routing`` allows.

        A call for a queue another call is still creating waits for it, and gets that
        queue if it is on the same address with the same durability."""
        while name in self._creating:
            waiter: Deferred[None] = Deferred()
            self._creating[name].append(waiter)
            await waiter
            queue = self._queues.get(name)
            same = queue is not None and queue.address == address_name
            if same and queue is not None and self.is_durable(name) is durable:
                return queue
        if name in self._queues:
            raise NodeError(f"queue {name!r} already exists")
        waiters = self._creating[name] = []
        try:
            return await self._create_queue(
                name, address_name, durable=durable, filter=filter, routing=routing
            )
        finally:
            del self._creating[name]
            for waiting in waiters:
                waiting.callback(None)

    async def _create_queue(
        self,
        name: str,
        address_name: str,
        *,
        durable: bool,
        filter: str | None,
        routing: Routing | None,
    ) -> Queue:
        compiled = compile_filter(filter)
        address = self.address(address_name, create=False, routing=routing)
        if routing is None:
            routing = address.routing
        self.add_routing(address, routing)
        if durable:
            await self.store.create_queue(QueueRecord(name, address_name, routing.value, filter))
            self._durable.add(name)
        queue = self.new_queue(name, address)
        address.bind(queue, compiled, durable, routing)
        self._queues[name] = queue
        return queue

    async def delete_queue(self, name: str) -> None:
        """Delete a queue and its messages; refused while it has consumers.

        It is gone at once (nothing more is routed to it, a second delete finds nothing);
        the Deferred fires when the store has dropped it too."""
        queue = self.queue(name)
        if queue.consumer_ids:
            raise NodeError(f"queue {name!r} has {len(queue.consumer_ids)} consumer(s)")
        self._addresses[queue.address].unbind(name)
        del self._queues[name]
        entries = queue.clear()
        transient = [entry.message.id for entry in entries if entry.paged == TRANSIENT]
        if transient:
            self.store.unpage(transient).addErrback(log_failure, "releasing pages")
        if name in self._durable:
            self._durable.discard(name)
            await self.store.delete_queue(name)
        await self._large.release(entries)

    # -- sending --------------------------------------------------------------------------

    def send(
        self,
        address_name: str,
        body: bytes,
        headers: Mapping[str, HeaderValue] | None = None,
        *,
        durable: bool,
        duplicate_id: bytes | None = None,
        timestamp_ns: int = 0,
        tx: Transaction | None = None,
    ) -> Deferred[Routed]:
        """Route a message given by its parts; the Deferred fires once it is safe to confirm
        to the producer (``publish`` without building the message first)."""
        message = Message(
            0, address_name, durable, dict(headers or {}), body, duplicate_id, timestamp_ns
        )
        routed = self.publish(message, tx=tx)
        return succeed(routed) if isinstance(routed, Routed) else routed

    def allocate_id(self) -> int:
        """A message id, for a message built to be published ``numbered`` (a large
        message's body file is named by it before it is published)."""
        self.next_id += 1
        return self.next_id - 1

    def publish(
        self, message: Message, *, tx: Transaction | None = None, numbered: bool = False
    ) -> Routed | Deferred[Routed]:
        """Route ``message`` (its id is replaced by the node's next one, except a large
        message's and, with ``numbered``, any: a head that numbers its messages with
        ``allocate_id`` as it builds them spares the node a copy of each); the result, or
        a Deferred of it, says it is safe to confirm to the producer. ``AddressFull`` if
        the address is full under FAIL.

        What needs no store write (non-durable, a duplicate, no durable queue, or a send in
        a transaction, which takes effect at commit) is done at once and returns the plain
        ``Routed``: the hot path of a non-durable send creates no Deferred. A large
        message's file is the node's from here: deleted if the message goes nowhere."""
        routed = self.route(message, tx, None, numbered=numbered)
        assert routed is not None and routed is not QUEUED  # (only with ``then``)
        return routed

    def publish_then(
        self,
        message: Message,
        then: Then,
        *,
        early: bool = False,
        numbered: bool = False,
        on_hold: Callable[[], object] | None = None,
    ) -> Routed | Queued | None:
        """``publish`` outside a transaction without a Deferred, for the heads' hot path.

        What is done at once returns its ``Routed``, and ``then`` is not called. A send
        that waits for its store write returns None, and ``then`` is told once it is safe
        to confirm (None) or why it failed (the failure; at once, should the store refuse
        it at once). With ``early`` (nothing of its connection waits to be queued before
        it), a durable send that may be delivered before it is written (``early``) is
        queued at once and returns ``QUEUED``; ``then`` is told as before, and ``on_hold``
        if its write waits for the core bridges that have it (``hold_forwarded``)."""
        if (
            early
            and numbered
            and message.durable
            and not message.headers
            and message.duplicate_id is None
            and message.large is None
            and (address := self._addresses.get(message.address)) is not None
            and address.only is not None
        ):
            # The commonest durable send (a STOMP SEND without headers of its own, to an
            # address with one queue), as ``route`` routes it, its tests made in one go:
            # nothing to create, one binding, no repeat to detect, not paging nor full,
            # its queue durable and its id reserved: queued early.
            only = address.only
            name = only.queue.name
            memory = address.memory
            if (
                name in self._durable
                and not memory.paged_messages
                and not memory.full
                and (_ANYCAST not in address.routing_types or address.name in self._queues)
                and (
                    message.id <= self._ids_reserved - ID_BLOCK // 2
                    or self._id_reserved(message.id)
                )
            ):
                return self._add_early(message, [only], (name,), then, on_hold)
        elif (
            message.durable
            and message.duplicate_id is None
            and type(bridge_id := message.headers.get(BRIDGE_DUPLICATE_ID)) is bytes
            and (address := self._addresses.get(message.address)) is not None
            and address.only is not None
        ):
            # A core bridge's send (nearly every send a bridge's target takes), as
            # ``route`` and ``_add_then`` route and store it, their tests made in one go:
            # one binding, a bridge id neither seen nor in a cache of size 0, not paging
            # nor full, its queue durable. Its id is stored with it, and until its write
            # ends a repeat waits for the outcome. A large one comes this way only to be
            # queued early (its body file then needs no sync if it is consumed first).
            only = address.only
            name = only.queue.name
            memory = address.memory
            cache = address.bridge_duplicates
            if (
                name in self._durable
                and cache.size
                and bridge_id not in cache
                and not memory.paged_messages
                and not memory.full
                and (_ANYCAST not in address.routing_types or address.name in self._queues)
            ):
                large = message.large
                if not numbered and large is None:
                    message = message.with_id(self.next_id)
                    self.next_id += 1
                if (
                    early
                    and only.queue.consumed_when_delivered
                    and DELIVERY_COUNT not in message.headers
                    and (
                        message.id <= self._ids_reserved - ID_BLOCK // 2
                        or self._id_reserved(message.id)
                    )
                ):
                    cache.add(bridge_id)
                    if large is not None:
                        self._large.refs[message.id] = 1
                    return self._add_early_bridged(message, only.queue, address, bridge_id, then)
                if large is not None:
                    return self._route_then(message, then, early, numbered, on_hold)
                cache.add(bridge_id)
                held = message.size
                memory.add(held)
                cache.hold(bridge_id)

                def written(failure: Failure | None) -> None:
                    if failure is None:
                        only.queue.add(
                            message,
                            message.delivered_before if DELIVERY_COUNT in message.headers else 0,
                        )
                    memory.release(held)
                    cache.settle(bridge_id, failure is None)
                    then(failure)

                self.store.add_then(
                    message, (name,), written, duplicate=(address.bridge_key, bridge_id, cache.size)
                )
                return None
        return self._route_then(message, then, early, numbered, on_hold)

    def _route_then(
        self,
        message: Message,
        then: Then,
        early: bool,
        numbered: bool,
        on_hold: Callable[[], object] | None,
    ) -> Routed | Queued | None:
        """``publish_then`` through ``route``: every send its fast paths do not take."""
        routed = self.route(message, None, then, early, numbered, on_hold=on_hold)
        if routed is QUEUED or routed is None or isinstance(routed, Routed):
            return routed  # (the hot path first; an isinstance of Deferred costs more)
        routed.addCallbacks(lambda _: then(None), then)  # paged, or stored with its id
        return None

    def route(
        self,
        message: Message,
        tx: Transaction | None,
        then: Then | None,
        early: bool = False,
        numbered: bool = False,
        *,
        on_hold: Callable[[], object] | None = None,
    ) -> Routed | Deferred[Routed] | Queued | None:
        """``publish``; with ``then`` (and no transaction), a send that needs nothing but
        its add returns None (or ``QUEUED``) and tells ``then`` (and ``on_hold``), as
        ``publish_then`` says."""
        # auto_create's work, skipped for an address that exists and needs no queue
        address = self._addresses.get(message.address)
        if address is None or (
            _ANYCAST in address.routing_types and address.name not in self._queues
        ):
            address = self.auto_create(message.address)
        if not numbered and message.large is None:
            message = message.with_id(self.next_id)
            self.next_id += 1
        detection = (
            address.detection(message)
            if message.duplicate_id is not None or BRIDGE_DUPLICATE_ID in message.headers
            else None  # (most sends carry neither id: two calls spared)
        )
        if detection is not None and detection.duplicate_id in detection.cache:
            # A repeat waits while its first send is being written (that write may fail);
            # one in a transaction waits at the transaction's commit.
            settling = detection.cache.when_settled(detection.duplicate_id)
            if settling is None:
                self._large.discard(message)
                return Routed((), duplicate=True)
            if tx is None:
                return settling.addCallback(self._repeat_settled, message)
            tx.repeats.append((message, settling))
            return Routed(())
        try:
            bindings = address.route(message)
        except AddressError as error:
            self._large.discard(message)
            raise NodeError(str(error)) from None
        memory = address.memory
        paged = False
        if bindings and (memory.paged_messages or memory.full):
            policy = memory.policy
            # (Not full, an address may still have messages the last start left paged.)
            if policy is AddressFullPolicy.PAGE:
                paged = message.large is None
            elif memory.full and policy is AddressFullPolicy.DROP:
                memory.dropped_total += 1
                self._large.discard(message)
                return Routed((), dropped=True)
            elif memory.full and policy is AddressFullPolicy.FAIL:
                memory.refused_total += 1
                self._large.discard(message)
                raise AddressFull(
                    f"address {address.name!r} is full ({memory.size} bytes in memory, "
                    f"max-size-bytes {memory.max_size}, global-max-size "
                    f"{memory.node.max_size}) and its address-full-policy is FAIL"
                )
        if detection is not None:
            detection.cache.add(detection.duplicate_id)
        routed = self._routed(bindings)
        if message.large is not None:
            if bindings:
                self._large.refs[message.id] = len(bindings)
            else:
                self._large.discard(message)
        if paged:
            return self.paging.page(message, address, bindings, routed, tx, detection=detection)
        queues = routed.queues
        stored: Sequence[str] = (
            ()
            if not message.durable
            else queues  # (one durable queue, the hot path: no list built)
            if len(queues) == 1 and queues[0] in self._durable
            else [name for name in queues if name in self._durable]
        )
        if not stored:
            if tx is None:
                enqueue(message, bindings)
            else:
                tx.sends.append((message, bindings, None))
            return routed
        if then is not None:
            if (
                early
                and detection is None
                and message.large is None
                and (
                    message.id <= self._ids_reserved - ID_BLOCK // 2  # (``_id_reserved``'s
                    or self._id_reserved(message.id)  # first test, written out)
                )
            ):
                return self._add_early(message, bindings, stored, then, on_hold)
            self._add_then(message, bindings, stored, memory, then, detection=detection)
            return None
        store_tx = tx.store_tx if tx is not None else None
        writes = [self.store.add(message, stored, tx=store_tx)]
        store_detection(self.store, detection, writes, store_tx)
        if tx is not None:
            tx.sends.append((message, bindings, None))
            tx.writes.extend(writes)
            return routed
        # Held in memory while the store writes it: counted now, so that the address's
        # policy (and its producers' credits under BLOCK) sees it before it is queued.
        held = message.size * len(bindings)
        memory.add(held)
        hold(detection)

        def written(_: None) -> Routed:
            enqueue(message, bindings)
            memory.release(held)  # counted by the queues that hold it now
            settle(detection, committed=True)
            return routed

        def not_stored(failure: Failure) -> Failure:
            memory.release(held)
            settle(detection, committed=False)
            return failure

        return join(writes).addCallbacks(written, not_stored)

    def _repeat_settled(self, committed: bool, message: Message) -> Routed | Deferred[Routed]:
        """A repeat that waited on its first send's write: a duplicate if that committed;
        if it failed, the repeat is the send that counts."""
        if committed:
            self._large.discard(message)
            return Routed((), duplicate=True)
        return self.publish(message)

    def _add_early(
        self,
        message: Message,
        bindings: list[Binding],
        stored: Sequence[str],
        then: Then,
        on_hold: Callable[[], object] | None = None,
    ) -> Queued | None:
        """Queue a durable send at once, its store write under way, as Artemis and
        RabbitMQ deliver before the disk sync: ``then`` hears of the write. A message
        every queue acknowledged before its write began is never written: it was
        consumed, which is what the producer's confirmation then means. Without a
        duplicate id, a crash before the write loses nothing a resend would not bring
        again; with one, the send takes ``_add_then``'s path, so that a repeat is always
        known."""
        try:
            self.store.add_early(
                message, stored, partial(self._early_written, message, then), on_hold=on_hold
            )
        except StoreError as error:
            then(Failure(error))
            return None
        enqueue(message, bindings)
        return QUEUED

    def _add_early_bridged(
        self, message: Message, queue: Queue, address: Address, bridge_id: bytes, then: Then
    ) -> Queued | None:
        """Queue a core bridge's first send of a message at once, its write (with its
        bridge id) under way, where every consumer of its queue acknowledges what it is
        handed as it is handed (``ack:auto``): one that took it before its write began
        leaves only its id to write. A repeat waits for the write, then is a duplicate
        (the message is on its queue even if the write failed). A kill -9 before the write
        loses the id, not the message: the bridge sends it again, marked as sent before
        (``DELIVERY_COUNT``), and it is delivered as a redelivery, as an ``ack:auto``
        delivery the crash cut off its acknowledgement would be. A consumer that
        acknowledges later gets its queue's bridged messages only once they are written
        (``_add_then``), so for it a kill -9 of the node never repeats one."""
        cache = address.bridge_duplicates
        cache.hold(bridge_id)
        written = partial(self._early_bridged_written, message, cache, bridge_id, then)
        try:
            self.store.add_early(
                message,
                (queue.name,),
                written,
                duplicate=(address.bridge_key, bridge_id, cache.size),
            )
        except StoreError as error:
            cache.settle(bridge_id, committed=False)
            then(Failure(error))
            return None
        queue.add(message)
        return QUEUED

    def _early_bridged_written(
        self,
        message: Message,
        cache: DuplicateIdCache,
        bridge_id: bytes,
        then: Then,
        failure: Failure | None,
    ) -> None:
        """An early bridged send's write ended. Its id stays known either way: the message
        is on its queue, so a repeat is a duplicate."""
        cache.settle(bridge_id, committed=True)
        self._early_written(message, then, failure)

    def _id_reserved(self, message_id: int) -> bool:
        """Whether ``message_id`` is reserved in the store, so that it may be seen before
        its message is written: a core bridge names what it forwards by its id, and an id
        given again after a restart would pass for a repeat. Half a block in, the next
        block is reserved."""
        reserved = self._ids_reserved
        if message_id > reserved - ID_BLOCK // 2 and not self._reserving:
            self.reserve_ids()
        return message_id <= reserved

    def reserve_ids(self) -> Deferred[None]:
        """Reserve the next block of ids; fires once it is stored (failed: logged, and
        sends go on without early delivery until a reservation is stored). Recovery
        reserves the first block before the node serves: a send that is not early keeps
        its connection's later sends from being early while it waits, so under a steady
        load one late send would make them all late."""
        self._reserving = True
        upto = max(self.next_id, self._ids_reserved) + ID_BLOCK
        done = self.store.reserve_ids(upto)
        return done.addCallbacks(self._reserved, self._not_reserved, callbackArgs=(upto,))

    def _reserved(self, _: None, upto: int) -> None:
        self._ids_reserved = upto
        self._reserving = False

    def _not_reserved(self, failure: Failure) -> None:
        self._reserving = False
        warn_not_stored(failure, "message ids reserved ahead")

    def _early_written(self, message: Message, then: Then, failure: Failure | None) -> None:
        """An early send's write ended. Failed, the message is on its queues (it may have
        been delivered) but not in the store: its acknowledgement writes nothing, and
        the producer hears that the outcome is unknown (``Unsettled``), not a refusal
        that a resend would turn into a second copy."""
        if failure is None:
            then(None)
            return
        self.unstored.add(message.id)
        if not failure.check(Unsettled):
            failure = Failure(
                Unsettled(
                    f"message {message.id} is queued but its store write failed: "
                    f"{failure.getErrorMessage()}"
                )
            )
        then(failure)

    def _add_then(
        self,
        message: Message,
        bindings: list[Binding],
        stored: Sequence[str],
        memory: AddressMemory,
        then: Then,
        *,
        detection: Detection | None,
    ) -> None:
        """Store a send and queue it once it is durable, then tell ``then``: one store
        operation (its duplicate id, if any, goes with it) and no Deferred. Its memory is
        counted meanwhile, as ``publish`` does, and a repeat waits for its outcome."""
        held = message.size * len(bindings)
        memory.add(held)

        def written(failure: Failure | None) -> None:
            if failure is None:
                enqueue(message, bindings)
            memory.release(held)  # if queued, counted by the queues that hold it now
            settle(detection, committed=failure is None)
            then(failure)

        if detection is None:
            self.store.add_then(message, stored, written)
            return
        hold(detection)  # before the add, which may tell of a refusal at once
        cache = detection.cache
        if not cache.size:  # a cache of size 0 keeps nothing, so nothing is stored
            self.store.add_then(message, stored, written)
            return
        duplicate = (detection.key, detection.duplicate_id, cache.size)
        self.store.add_then(message, stored, written, duplicate=duplicate)

    def _routed(self, bindings: list[Binding]) -> Routed:
        if len(bindings) != 1:
            return Routed(tuple([binding.queue.name for binding in bindings]))
        name = bindings[0].queue.name
        routed = self._to_one.get(name)
        if routed is None:
            routed = self._to_one[name] = Routed((name,))
        return routed


def enqueue(message: Message, bindings: list[Binding]) -> None:
    """A routed send, safe now, reaches its queues (a message a drain moved here counts
    its deliveries on from the node it left)."""
    before = message.delivered_before if DELIVERY_COUNT in message.headers else 0
    for binding in bindings:
        binding.queue.add(message, before)
