"""The node's core: addresses and queues over the message store, without a wire.

Protocol heads (core, STOMP) and bridges call this. It keeps the rule that nothing
acknowledged is lost: a durable message reaches its queues, and its send is confirmed,
only once the store holds it; an acknowledgement is confirmed once the store has dropped
the message. A non-durable message is never written unless paged: it is routed and
confirmed at once, and it is gone after a restart.

Memory is bounded by each address's ``max-size-bytes`` and the node's ``global-max-size``
(``bridge.node.memory``): a full address pages (the message is written to the store and
its queues keep only its place, reading it back in order when consumers catch up),
blocks (the heads withhold producer credits), fails the send, or drops it. A large
message's body is written and read through the store (``new_body``, ``open_body``); it
goes when the last queue holding the message lets it go.

Duplicate detection keeps two caches per address (``bridge.node.address``): producers'
ids, and core bridges' ids (the ``BRIDGE_DUPLICATE_ID`` header), stored under the keys
``ADDRESS`` and ``$bridge.ADDRESS``. Address names starting with ``$`` are the node's own:
no client creates one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import IO

import attrs
from twisted.internet.defer import Deferred, DeferredList, FirstError, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from bridge.config.node import AddressFullPolicy, NodeConfig, Routing
from bridge.message import BRIDGE_DUPLICATE_ID, HeaderValue, LargeBody, Message
from bridge.node.address import BRIDGE_KEY_PREFIX, Address, Binding, Detection
from bridge.node.memory import AddressMemory, NodeMemory
from bridge.node.queue import STORED, TRANSIENT, UNLIMITED, Entry, Filter, Queue, Sink
from bridge.selector import compile_selector
from bridge.store.errors import TransactionRolledBack
from bridge.store.interfaces import IBodyWriter, IMessageStore
from bridge.store.records import QueueRecord, Recovered, TxId

log = Logger()


ORIGINAL_ADDRESS = "_TXB_ORIG_ADDRESS"
ORIGINAL_QUEUE = "_TXB_ORIG_QUEUE"
"""Headers of a dead letter: the address and queue it left (Artemis's ``_AMQ_ORIG_*``)."""


class NodeError(Exception):
    """An operation the node refuses, with the reason in words."""


class AddressNotFound(NodeError):
    """The address does not exist and may not be created on first use."""


class QueueNotFound(NodeError):
    """No queue of that name."""


class AddressFull(NodeError):
    """The address is full and its address-full policy is FAIL."""


Then = Callable[[Failure | None], object]
"""Told that a send waiting for its store write is safe to confirm (None), or why not."""


def _filter(text: str | None) -> Filter | None:
    return compile_selector(text).matches if text else None


@attrs.define(eq=False)
class Transaction:
    """A local transaction: its sends reach their queues, and its acknowledgements take
    effect, together at commit, or never."""

    store_tx: TxId
    sends: list[tuple[Message, list[Binding], frozenset[str] | None]] = attrs.Factory(list)
    """Each send, its bindings and, for a paged one, the queues that have it stored."""
    acknowledged: list[tuple[str, Entry]] = attrs.Factory(list)
    writes: list[Deferred[None]] = attrs.Factory(list)
    repeats: list[tuple[Message, Deferred[bool]]] = attrs.Factory(list)
    """Sends whose duplicate id's first send was still being written: at commit, each is
    a duplicate if that send committed, and one of the transaction's sends if it failed."""


_ANYCAST = Routing.ANYCAST
"""Read on every send: a module constant costs a quarter of reading it off its class."""


@attrs.frozen
class Routed:
    """Where a send went: the queues it reached, or that it was a duplicate, or dropped by
    a full address's DROP policy."""

    queues: tuple[str, ...]
    duplicate: bool = False
    dropped: bool = False


class Broker:
    """Addresses, queues and durable state, for one node."""

    def __init__(self, config: NodeConfig, store: IMessageStore) -> None:
        self.config = config
        self.store = store
        self._addresses: dict[str, Address] = {}
        self._queues: dict[str, Queue] = {}
        self._durable: set[str] = set()
        self._next_id = 1
        self._consumer_ids = 0
        self.memory = NodeMemory(config.global_max_size)
        self._large_refs: dict[int, int] = {}
        """Queues still holding each large message (its file goes at zero)."""
        self._recovered_ids: dict[str, Sequence[bytes]] = {}
        """Stored duplicate ids, by store key, of addresses not created yet since the start."""
        self._to_one: dict[str, Routed] = {}
        """The ``Routed`` of a send to one queue, by the queue's name (immutable: shared)."""
        self._moves: list[Deferred[None]] = []
        """Dead-letter moves queues started during the current call (its result waits
        for them)."""
        self._moving: set[Deferred[None]] = set()
        """Dead-letter moves not finished yet (closing waits for them)."""
        self._dead_dropped: set[str] = set()
        """Queues whose dropped dead letters were logged (once each)."""
        self._creating: dict[str, list[Deferred[None]]] = {}
        """Queues being created (stored first), and the calls waiting for each."""

    # -- start ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Recover queues, messages and duplicate ids; declare configured addresses."""
        recovered = await self.store.open(self.config.global_max_size)
        self._next_id = recovered.highest_message_id + 1
        self._recovered_ids = dict(recovered.duplicate_ids)
        self._recover(recovered)
        if recovered.after_crash:
            held = sum(len(each) for each in recovered.messages.values())
            log.warn(
                "the node did not stop cleanly last time: its {count} stored messages "
                "count one delivery more and come back flagged as redelivered",
                count=held,
            )
        for declared in self.config.addresses:
            address = self._address(declared.name, create=True)
            if address.routing is Routing.ANYCAST and declared.name not in self._queues:
                await self.create_queue(declared.name, declared.name, durable=True)

    def _recover(self, recovered: Recovered) -> None:
        for record in recovered.queues:
            address = self._addresses.get(record.address)
            if address is None:
                address = self._new_address(record.address, Routing(record.routing))
            queue = self._new_queue(record.name, address)
            address.bind(queue, _filter(record.filter), durable=True)
            self._queues[record.name] = queue
            self._durable.add(record.name)
            for stored in recovered.messages.get(record.name, ()):
                message = stored.message
                if stored.paged_size is not None:
                    address.memory.paged(stored.paged_size)
                    queue.add_paged(message, STORED, stored.paged_size, stored.delivery_count)
                    continue
                if message.large is not None:
                    self._large_refs[message.id] = self._large_refs.get(message.id, 0) + 1
                queue.add(message, stored.delivery_count)

    # -- addresses and queues -------------------------------------------------------------

    def _new_address(self, name: str, routing: Routing) -> Address:
        """Create an address, its duplicate-id caches refilled from what the store kept for
        it (whether it comes back from a queue record, the configuration or a first use)."""
        address = Address(
            name,
            routing,
            self.config.settings_for(name),
            recovered_ids=self._recovered_ids.pop(name, ()),
            recovered_bridge_ids=self._recovered_ids.pop(BRIDGE_KEY_PREFIX + name, ()),
            node_memory=self.memory,
        )
        self._addresses[name] = address
        return address

    def _new_queue(self, name: str, address: Address) -> Queue:
        return Queue(
            name,
            address.name,
            memory=address.memory,
            pager=self._page_in,
            max_deliveries=address.settings.max_delivery_attempts,
            dead_letter=self._exhausted,
        )

    def _address(self, name: str, *, create: bool, routing: Routing | None = None) -> Address:
        address = self._addresses.get(name)
        if address is not None:
            return address
        if not create and not self.may_create_address(name):
            raise self.not_creatable(name)
        return self._new_address(name, routing or self.config.routing_for(name))

    def create_address(self, name: str, routing: Routing) -> Address:
        """The address ``name`` with ``routing``: created (without queues) if missing, as
        a head creates one on first use once it checked the client may. NodeError if it
        exists with another routing, AddressNotFound for a name reserved to the node."""
        address = self._addresses.get(name)
        if address is None:
            if name.startswith("$"):
                raise self.not_creatable(name)
            return self._new_address(name, routing)
        if address.routing is not routing:
            raise NodeError(f"address {name!r} is {address.routing.value}, not {routing.value}")
        return address

    def _auto_queue(self, address: Address) -> None:
        """An anycast address created on first use gets its queue of the same name, as
        Artemis's auto-create-queues does; it is stored in the same group commit as the
        send that created it, ahead of it."""
        if address.routing is not Routing.ANYCAST or address.name in self._queues:
            return
        queue = self._new_queue(address.name, address)
        address.bind(queue, None, durable=True)
        self._queues[address.name] = queue
        self._durable.add(address.name)
        self.store.create_queue(
            QueueRecord(address.name, address.name, address.routing.value, None)
        ).addErrback(self._auto_queue_failed, address.name)

    def _auto_queue_failed(self, failure: Failure, name: str) -> None:
        log.failure("auto-created queue {name!r} could not be stored", failure, name=name)

    def auto_create(self, address_name: str) -> Address:
        """The address, created on first use if settings allow (an anycast one with its
        queue); AddressNotFound if they do not."""
        address = self._address(address_name, create=False)
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

    @property
    def addresses(self) -> Mapping[str, Address]:
        return self._addresses

    def is_durable(self, queue_name: str) -> bool:
        return queue_name in self._durable

    def next_consumer_id(self) -> int:
        """A consumer id no other consumer of this node has (heads map their clients'
        per-connection ids onto these)."""
        self._consumer_ids += 1
        return self._consumer_ids

    def queue(self, name: str) -> Queue:
        try:
            return self._queues[name]
        except KeyError:
            raise QueueNotFound(f"no queue {name!r}") from None

    @property
    def queues(self) -> Mapping[str, Queue]:
        return self._queues

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
        exist. A ``routing`` that differs from an existing address's is refused.

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
        compiled = _filter(filter)
        address = self._address(address_name, create=False, routing=routing)
        if routing is not None and address.routing is not routing:
            raise NodeError(
                f"address {address_name!r} is {address.routing.value}, not {routing.value}"
            )
        if durable:
            await self.store.create_queue(
                QueueRecord(name, address_name, address.routing.value, filter)
            )
            self._durable.add(name)
        queue = self._new_queue(name, address)
        address.bind(queue, compiled, durable)
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
            self.store.unpage(transient).addErrback(_log_failure, "releasing pages")
        if name in self._durable:
            self._durable.discard(name)
            await self.store.delete_queue(name)
        await self._release_large(entries)

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
        """A message id, for a large message whose body file is named by it before it is
        published."""
        self._next_id += 1
        return self._next_id - 1

    def new_body(self, message_id: int) -> IBodyWriter:
        """A large message's body, written chunk by chunk before it is published."""
        return self.store.new_body(message_id)

    def open_body(self, body: LargeBody) -> IO[bytes]:
        """A large message's stored body, to read chunk by chunk (``OSError`` if it
        cannot be read)."""
        return self.store.open_body(body)

    def large_body_path(self, message_id: int) -> str:
        """Where a large message's body file goes (the store's folder)."""
        return self.store.large_body_path(message_id)

    def discard(self, message: Message) -> Deferred[None]:
        """A large message that will not be published after all, or is gone for good: its
        body file goes, off the reactor thread (see ``IMessageStore.discard_body``)."""
        if message.large is None:
            return succeed(None)
        return self.store.discard_body(message.large.path)

    def publish(
        self, message: Message, *, tx: Transaction | None = None
    ) -> Routed | Deferred[Routed]:
        """Route ``message`` (its id is replaced by the node's next one, except a large
        message's, from ``allocate_id``); the result, or a Deferred of it, says it is safe
        to confirm to the producer. ``AddressFull`` if the address is full under FAIL.

        What needs no store write (non-durable, a duplicate, no durable queue, or a send in
        a transaction, which takes effect at commit) is done at once and returns the plain
        ``Routed``: the hot path of a non-durable send creates no Deferred. A large
        message's file is the node's from here: deleted if the message goes nowhere."""
        routed = self._publish(message, tx, None)
        assert routed is not None
        return routed

    def publish_then(self, message: Message, then: Then) -> Routed | None:
        """``publish`` outside a transaction without a Deferred, for the heads' hot path.

        What is done at once returns its ``Routed``, and ``then`` is not called. A send
        that waits for its store write returns None, and ``then`` is told once it is safe
        to confirm (None) or why it failed (the failure; at once, should the store refuse
        it at once)."""
        routed = self._publish(message, None, then)
        if routed is None or isinstance(routed, Routed):  # (cheaper than of Deferred, an ABC)
            return routed
        routed.addCallbacks(lambda _: then(None), then)  # paged, or stored with its id
        return None

    def _publish(
        self, message: Message, tx: Transaction | None, then: Then | None
    ) -> Routed | Deferred[Routed] | None:
        """``publish``; with ``then`` (and no transaction), a send that needs nothing but
        its add returns None and tells ``then``, as ``publish_then`` says."""
        # auto_create's work, skipped for an address that exists and needs no queue
        address = self._addresses.get(message.address)
        if address is None or (address.routing is _ANYCAST and address.name not in self._queues):
            address = self.auto_create(message.address)
        if message.large is None:
            message = message.with_id(self._next_id)
            self._next_id += 1
        detection = address.detection(message)
        if detection is not None and detection.duplicate_id in detection.cache:
            # A repeat waits while its first send is being written (that write may fail);
            # one in a transaction waits at the transaction's commit.
            settling = detection.cache.when_settled(detection.duplicate_id)
            if settling is None:
                self.discard(message)
                return Routed((), duplicate=True)
            if tx is None:
                return settling.addCallback(self._repeat_settled, message)
            tx.repeats.append((message, settling))
            return Routed(())
        bindings = address.route(message)
        memory = address.memory
        paged = False
        if bindings and (memory.paged_messages or memory.full):
            policy = memory.policy
            # (Not full, an address may still have messages the last start left paged.)
            if policy is AddressFullPolicy.PAGE:
                paged = message.large is None
            elif memory.full and policy is AddressFullPolicy.DROP:
                memory.dropped_total += 1
                self.discard(message)
                return Routed((), dropped=True)
            elif memory.full and policy is AddressFullPolicy.FAIL:
                memory.refused_total += 1
                self.discard(message)
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
                self._large_refs[message.id] = len(bindings)
            else:
                self.discard(message)
        if paged:
            return self._page(message, address, bindings, routed, tx, detection=detection)
        stored = (
            [name for name in routed.queues if name in self._durable] if message.durable else []
        )
        if not stored:
            if tx is None:
                self._enqueue(message, bindings)
            else:
                tx.sends.append((message, bindings, None))
            return routed
        if then is not None:
            self._add_then(message, bindings, stored, memory, then, detection=detection)
            return None
        store_tx = tx.store_tx if tx is not None else None
        writes = [self.store.add(message, stored, tx=store_tx)]
        self._store_detection(detection, writes, store_tx)
        if tx is not None:
            tx.sends.append((message, bindings, None))
            tx.writes.extend(writes)
            return routed
        # Held in memory while the store writes it: counted now, so that the address's
        # policy (and its producers' credits under BLOCK) sees it before it is queued.
        held = message.size * len(bindings)
        memory.add(held)
        _hold(detection)

        def written(_: None) -> Routed:
            self._after_store(message, bindings, routed, memory, held)
            _settle(detection, committed=True)
            return routed

        def not_stored(failure: Failure) -> Failure:
            memory.release(held)
            _settle(detection, committed=False)
            return failure

        return _all(writes).addCallbacks(written, not_stored)

    def _repeat_settled(self, committed: bool, message: Message) -> Routed | Deferred[Routed]:
        """A repeat that waited on its first send's write: a duplicate if that committed;
        if it failed, the repeat is the send that counts."""
        if committed:
            self.discard(message)
            return Routed((), duplicate=True)
        return self.publish(message)

    def _add_then(
        self,
        message: Message,
        bindings: list[Binding],
        stored: list[str],
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
                self._enqueue(message, bindings)
            memory.release(held)  # if queued, counted by the queues that hold it now
            _settle(detection, committed=failure is None)
            then(failure)

        if detection is None:
            self.store.add_then(message, stored, written)
            return
        _hold(detection)  # before the add, which may tell of a refusal at once
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

    def _store_detection(
        self, detection: Detection | None, writes: list[Deferred[None]], store_tx: TxId | None
    ) -> None:
        """Store a send's duplicate id with it, in the same group commit (or transaction),
        under its cache's key; a cache of size 0 keeps nothing, so nothing is stored."""
        if detection is not None and detection.cache.size:
            cache = detection.cache
            writes.append(
                self.store.store_duplicate_id(
                    detection.key, detection.duplicate_id, cache.size, tx=store_tx
                )
            )

    def _after_store(
        self,
        message: Message,
        bindings: list[Binding],
        routed: Routed,
        memory: AddressMemory,
        held: int,
    ) -> Routed:
        self._enqueue(message, bindings)
        memory.release(held)  # counted by the queues that hold it now
        return routed

    @staticmethod
    def _enqueue(message: Message, bindings: list[Binding]) -> None:
        for binding in bindings:
            binding.queue.add(message)

    # -- paging ---------------------------------------------------------------------------

    def _page(
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
            writes.append(self.store.add(message, sorted(durable), tx=store_tx))
        if transient:
            writes.append(self.store.page(message, transient, tx=store_tx))
        self._store_detection(detection, writes, store_tx)
        size = message.size
        for _ in bindings:
            address.memory.paged(size)
        if tx is not None:
            tx.sends.append((message, bindings, durable))
            tx.writes.extend(writes)
            return routed

        _hold(detection)

        def paged(_: None) -> Routed:
            self._after_page(message, bindings, durable, routed)
            _settle(detection, committed=True)
            return routed

        def not_paged(failure: Failure) -> Failure:
            self._unpage(message, address, bindings)
            _settle(detection, committed=False)
            return failure

        return _all(writes).addCallbacks(paged, not_paged)

    @staticmethod
    def _after_page(
        message: Message, bindings: list[Binding], durable: frozenset[str], routed: Routed
    ) -> Routed:
        stub, size = message.stub(), message.size
        for binding in bindings:
            where = STORED if binding.queue.name in durable else TRANSIENT
            binding.queue.add_paged(stub, where, size)
        return routed

    @staticmethod
    def _unpage(message: Message, address: Address, bindings: list[Binding]) -> None:
        """A paged send did not happen after all (its write failed, or its transaction
        rolled back): it no longer counts as paged."""
        for _ in bindings:
            address.memory.unpaged(message.size)

    def _page_in(self, queue: Queue, entries: list[Entry]) -> None:
        """Read paged entries back for ``queue`` (its pager)."""
        stored = [entry.message.id for entry in entries if entry.paged == STORED]
        paged = [entry.message.id for entry in entries if entry.paged == TRANSIENT]

        def loaded(messages: dict[int, Message]) -> None:
            taken = queue.paged_in(entries, messages)
            released = [entry.message.id for entry in taken if entry.message.id in paged_set]
            if released:
                self.store.unpage(released).addErrback(_log_failure, "releasing pages")

        def failed(failure: Failure) -> None:
            log.failure("reading back pages of queue {queue!r} failed", failure, queue=queue.name)
            queue.page_in_failed()

        paged_set = set(paged)
        self.store.read(stored, paged).addCallbacks(loaded, failed)

    # -- consuming ------------------------------------------------------------------------

    def consume(
        self,
        queue_name: str,
        consumer_id: int,
        sink: Sink,
        *,
        credits: int = UNLIMITED,
        filter: str | None = None,
    ) -> None:
        self.queue(queue_name).add_consumer(consumer_id, sink, credits, _filter(filter))

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
        queue = self.queue(queue_name)
        entries = queue.acknowledge(consumer_id, delivery_id, cumulative)
        if tx is None:
            return self._forget(queue_name, entries)
        tx.acknowledged.extend((queue_name, entry) for entry in entries)
        ids = self._stored_ids(queue_name, entries)
        if ids:
            tx.writes.append(self.store.acknowledge_many(queue_name, ids, tx=tx.store_tx))
        return succeed(None)

    # -- transactions ---------------------------------------------------------------------

    def begin(self) -> Transaction:
        return Transaction(self.store.begin())

    async def commit(self, tx: Transaction) -> None:
        """Make the transaction's work durable, then visible: its sends reach their queues.
        Its repeats of sends still being written wait for those first; a commit that cannot
        send a repeat (its address full under FAIL, or gone) rolls the transaction back."""
        try:
            await self._settle_repeats(tx)
        except BaseException:
            await self.rollback(tx)
            raise
        await _all([self.store.commit(tx.store_tx), *tx.writes])
        for message, bindings, paged in tx.sends:
            if paged is None:
                self._enqueue(message, bindings)
            else:
                self._after_page(message, bindings, paged, Routed(()))
        await self._release_large([entry for _, entry in tx.acknowledged])

    async def _settle_repeats(self, tx: Transaction) -> None:
        """Drop each repeat whose first send committed; send the others in ``tx``."""
        while tx.repeats:
            message, settling = tx.repeats.pop(0)
            if await settling:
                self.discard(message)
                continue
            try:
                self._publish(message, tx, None)
            except BaseException:
                self.discard(message)  # sent nowhere: a large one's body goes too
                raise

    async def rollback(self, tx: Transaction) -> None:
        """Forget the transaction's sends; its acknowledged messages wait again, counted."""
        self.store.rollback(tx.store_tx)
        for message, _ in tx.repeats:
            self.discard(message)
        tx.repeats.clear()
        for write in tx.writes:
            write.addErrback(lambda failure: failure.trap(TransactionRolledBack))
        for message, bindings, paged in tx.sends:
            address = self._addresses[message.address]
            _forget(address.detection(message))
            if paged is not None:
                self._unpage(message, address, bindings)
            if message.large is not None:
                self._large_refs.pop(message.id, None)
                self.discard(message)
        by_queue: dict[str, list[Entry]] = {}
        for queue_name, entry in tx.acknowledged:
            by_queue.setdefault(queue_name, []).append(entry)
        counted = []
        for queue_name, entries in by_queue.items():
            if queue_name in self._queues:
                kept = self._queues[queue_name].give_back(entries)
                counted.append(self._count_deliveries(queue_name, kept))
        await self._with_moves(_all(counted))

    def nack(
        self, queue_name: str, consumer_id: int, delivery_id: int, *, requeue: bool
    ) -> Deferred[None]:
        """Give a delivery back for redelivery, or refuse it: to the dead-letter address
        if its address has one, else it is dropped (gone for good)."""
        queue = self.queue(queue_name)
        entry = queue.nack(consumer_id, delivery_id, requeue)
        if requeue:
            kept = [] if queue.exhausted(entry) else [entry]
            return self._with_moves(self._count_deliveries(queue_name, kept))
        if self._addresses[queue.address].settings.dead_letter_address:
            return self._dead_letter(queue, [entry])
        return self._forget(queue_name, [entry])

    # -- dead letters ---------------------------------------------------------------------

    def _exhausted(self, queue: Queue, entries: list[Entry]) -> None:
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
        return _all([done, *moves])

    def _dead_letter(self, queue: Queue, entries: list[Entry]) -> Deferred[None]:
        """Entries ``queue`` let go of (exhausted, or refused without requeue) go to its
        address's dead-letter address as new messages naming where they came from; the
        store adds them there and drops them from ``queue`` in one transaction, so a
        durable one is in one place or the other whatever happens. Without a dead-letter
        address (or one that cannot take them) they are dropped and counted."""
        dla = self._addresses[queue.address].settings.dead_letter_address
        if not dla or dla.startswith("$"):
            return self._drop_dead(queue, entries, "it has no dead-letter-address")
        if dla not in self._addresses and not self.may_create_address(dla):
            return self._drop_dead(
                queue, entries, f"dead-letter-address {dla!r} does not exist and may not be created"
            )
        tx = self.begin()
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
                self.publish(copy, tx=tx)
            except NodeError as refused:
                Deferred.fromCoroutine(self.rollback(tx)).addErrback(
                    _log_failure, "rolling back a move to the dead letters"
                )
                return self._drop_dead(queue, entries, str(refused))
        ids = self._stored_ids(queue.name, entries)
        if ids:
            tx.writes.append(self.store.acknowledge_many(queue.name, ids, tx=tx.store_tx))
        moved = Deferred.fromCoroutine(self.commit(tx))
        moved.addErrback(_log_failure, f"moving messages of queue {queue.name!r} to {dla!r}")
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

    def close_consumer(
        self, queue_name: str, consumer_id: int, *, dead_letters: bool = True
    ) -> Deferred[None]:
        """Stop a consumer; its unacknowledged messages return to the queue, and their
        delivery counts are stored so a restart still knows them as redeliveries. Those
        delivered max-delivery-attempts times go to the dead letters, unless
        ``dead_letters`` is False (a bridge giving back; the node closing what consumers
        are left once the heads closed their connections)."""
        returned = self.queue(queue_name).remove_consumer(consumer_id, dead_letters)
        return self._with_moves(self._count_deliveries(queue_name, returned))

    def _forget(self, queue_name: str, entries: list[Entry]) -> Deferred[None]:
        """Drop acknowledged entries from the store: one operation however many; then
        large messages no queue holds lose their files."""
        ids = self._stored_ids(queue_name, entries)
        done = self.store.acknowledge_many(queue_name, ids) if ids else succeed(None)
        if self._large_refs:
            done.addCallback(lambda _: self._release_large(entries))
        return done

    def _release_large(self, entries: list[Entry]) -> Deferred[None]:
        """``entries`` left their queue for good: a large message held by no other queue
        loses its body file; fires once the files are gone."""
        refs = self._large_refs
        discards: list[Deferred[None]] = []
        for entry in entries:
            message = entry.message
            if message.large is None:
                continue
            left = refs.get(message.id, 1) - 1
            if left > 0:
                refs[message.id] = left
            else:
                refs.pop(message.id, None)
                discards.append(self.discard(message))
        return _all(discards)

    def _stored_ids(self, queue_name: str, entries: list[Entry]) -> list[int]:
        """The ids of the entries the store holds on this queue."""
        if queue_name not in self._durable:
            return []
        return [entry.message.id for entry in entries if entry.message.durable]

    def _count_deliveries(self, queue_name: str, entries: list[Entry]) -> Deferred[None]:
        if queue_name not in self._durable:
            return succeed(None)
        writes = [
            self.store.update_delivery_count(queue_name, entry.message.id, entry.delivery_count)
            for entry in entries
            if entry.message.durable
        ]
        return _all(writes)

    async def close(self) -> None:
        """Shut down gracefully: every consumer's unacknowledged messages return to their
        queues with their delivery counts stored, then the store finishes and closes."""
        returns = [
            self.close_consumer(name, consumer_id, dead_letters=False)
            for name, queue in self._queues.items()
            for consumer_id in queue.consumer_ids
        ]
        await _all(returns)
        await _all(list(self._moving))
        await self.store.close()


def _forget(detection: Detection | None) -> None:
    """A send that did not happen (its write failed, its transaction rolled back) leaves
    its duplicate id free, so that its resend gets through."""
    if detection is not None:
        detection.cache.discard(detection.duplicate_id)


def _hold(detection: Detection | None) -> None:
    """A send's write is pending: a repeat of it waits for the outcome."""
    if detection is not None:
        detection.cache.hold(detection.duplicate_id)


def _settle(detection: Detection | None, *, committed: bool) -> None:
    """A send's write committed or failed: tell the repeats waiting on it (a failed one
    leaves its duplicate id free, so that its resend gets through)."""
    if detection is not None:
        detection.cache.settle(detection.duplicate_id, committed)


def _log_failure(failure: Failure, what: str) -> None:
    log.failure("{what} failed", failure, what=what)


def _all(writes: list[Deferred[None]]) -> Deferred[None]:
    """One Deferred for several store writes: fires when all are durable, fails on the
    first failure with that failure."""
    if not writes:
        return succeed(None)
    if len(writes) == 1:
        return writes[0]
    done: Deferred[None] = DeferredList(
        writes, fireOnOneErrback=True, consumeErrors=True
    ).addCallback(lambda _: None)
    return done.addErrback(_first_failure)


def _first_failure(failure: Failure) -> Failure:
    """A DeferredList's FirstError, unwrapped to the store's own error."""
    error = failure.value
    return error.subFailure if isinstance(error, FirstError) else failure
