"""The addresses and queues one connection uses, for every head: found, created on first
use and deleted, each step checked against what the client may do.

A head names what its client uses in its own words (a core queue name; a STOMP
``/queue/``, ``/topic/`` or ``/amq/queue/`` destination) and asks here: where a send
goes, which queue a consumer or a subscription reads (creating it if it may), and which
queues go with the connection. A refusal is raised as the node's error
(``PermissionDenied``, ``AddressNotFound``, ``QueueNotFound``, ``QueueExists``,
``QueueInUse``, ``BadFilter``, ``WrongRouting``), which the head words for its client.
Creations that the store must hold first are returned as Deferreds to wait for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
from twisted.internet.defer import Deferred

from bridge.config.node import Routing
from bridge.message import HeaderValue
from bridge.node.broker import (
    BadFilter,
    Broker,
    QueueExists,
    QueueInUse,
    QueueNotFound,
    WrongRouting,
)
from bridge.node.queue import Queue
from bridge.node.session import ServerSession
from bridge.selector import SelectorError, compile_selector
from security.permissions import Permission

_ANYCAST, _MULTICAST = Routing.ANYCAST, Routing.MULTICAST
_SEND = Permission.SEND

Matcher = Callable[[Mapping[str, HeaderValue]], bool]


def matcher(text: str | None) -> Matcher | None:
    """A filter's test (None: no filter), or ``BadFilter`` saying what is wrong with it."""
    if not text:
        return None
    try:
        return compile_selector(text).matches
    except SelectorError as error:
        raise BadFilter(text, str(error)) from None


@attrs.define(eq=False)
class Addressing:
    """What one connection's client uses of the node's addresses and queues."""

    _node: ServerSession
    _broker: Broker = attrs.field(init=False)
    _temporary: set[str] = attrs.field(init=False, factory=set)
    """Non-durable queues the client created, deleted with the connection."""

    def __attrs_post_init__(self) -> None:
        self._broker = self._node.broker

    # -- sends -----------------------------------------------------------------------------

    def use(self, name: str, routing: Routing) -> bool:
        """Whether address ``name`` exists. One without ``routing`` gets it where the client
        may create the address (so one name can be used both ways, as in Artemis);
        ``WrongRouting`` where it may not."""
        address = self._broker.addresses.get(name)
        if address is None:
            return False
        if routing in address.routing_types:
            return True
        if not self._broker.may_create_address(name):
            raise WrongRouting(name, address.routing is _MULTICAST)
        self._node.check(name, Permission.CREATE_ADDRESS)
        self._broker.add_routing(address, routing)
        return True

    def send_to(self, name: str, routing: Routing) -> Deferred[Any] | None:
        """A client sends to address ``name`` as ``routing``: checked, and created if
        missing (an anycast one with its queue; the creation to wait for, if any)."""
        node = self._node
        address = self._broker.addresses.get(name)
        if (address is not None and routing in address.routing_types) or self.use(name, routing):
            # (``use``'s first test written out: nearly every send meets it)
            node.check(name, _SEND)
            return None
        node.check_create(name)
        node.check(name, _SEND)
        if routing is _ANYCAST:
            return self.create_anycast(name)
        # A topic nobody subscribed to yet: its multicast address, which drops the message.
        self._broker.create_address(name, _MULTICAST)
        return None

    def send_to_queue(self, queue_name: str) -> str:
        """A client sends to the existing queue ``queue_name``: its address, checked."""
        address = self.queue_address(queue_name)
        self.use(address, _ANYCAST)
        self._node.check(address, _SEND)
        return address

    def states_routing(self, name: str) -> bool:
        """Whether a send to ``name`` states its routing type (the address has both)."""
        address = self._broker.addresses.get(name)
        return address is not None and len(address.routing_types) > 1

    def queue_address(self, queue_name: str) -> str:
        """The address of the existing queue ``queue_name``; ``QueueNotFound``."""
        queue = self._broker.queues.get(queue_name)
        if queue is None:
            raise QueueNotFound(f"no queue {queue_name!r}")
        return queue.address

    def create_anycast(self, name: str) -> Deferred[Any] | None:
        """Create the anycast address ``name`` and its queue: at once where anycast is the
        default routing (the broker stores the queue in the background, as for a send),
        else through the store, to wait for."""
        if self._node.default_routing(name) is _ANYCAST:
            self._broker.auto_create(name)
            return None
        return Deferred.fromCoroutine(
            self._broker.create_queue(name, name, durable=True, routing=_ANYCAST)
        )

    # -- consumers ---------------------------------------------------------------------------

    def consume(self, name: str, browse: bool) -> Queue:
        """The queue ``name`` a consumer reads (or browses), checked. A missing queue of an
        anycast address is created with it, as a send to it would (create-address and
        create-durable-queue permissions)."""
        broker, node = self._broker, self._node
        if name not in broker.queues and (
            not broker.has_address(name)
            and broker.may_create_address(name)
            and node.default_routing(name) is _ANYCAST
        ):
            node.check(name, Permission.CREATE_ADDRESS)
            node.check(name, Permission.CREATE_DURABLE_QUEUE, name)
            broker.auto_create(name)
        queue = broker.queue(name)
        node.check(queue.address, Permission.BROWSE if browse else Permission.CONSUME, name)
        return queue

    def consume_queue(self, queue_name: str) -> tuple[str, Routing]:
        """A consumer of the existing queue ``queue_name``: its address and how the queue
        is bound to it, checked."""
        address = self.queue_address(queue_name)
        binding = self._broker.addresses[address].binding(queue_name)
        self._node.check(address, Permission.CONSUME, queue_name)
        return address, binding.routing

    def consume_anycast(self, name: str) -> Deferred[Any] | None:
        """A consumer of the anycast address ``name``'s queue, created with the address if
        missing and the client may; the creation to wait for, if any."""
        node = self._node
        exists = self.use(name, _ANYCAST)
        if name in self._broker.queues:
            node.check(name, Permission.CONSUME, name)
            return None
        if exists and not self._broker.may_create_address(name):
            raise QueueNotFound(f"no queue {name!r}")
        if not exists:
            node.check_create(name)
        node.check(name, Permission.CREATE_DURABLE_QUEUE, name)
        node.check(name, Permission.CONSUME, name)
        return self.create_anycast(name)

    def subscribe(
        self, name: str, queue_name: str, *, durable: bool, filter: str | None
    ) -> Deferred[Any] | None:
        """A subscription to the multicast address ``name``, through its queue
        ``queue_name``: a durable one's is kept (and found again, ``QueueExists`` if it
        is not one), another one's is the subscription's alone, dropped with it or with
        the connection. The creation to wait for, if any."""
        node = self._node
        exists = self.use(name, _MULTICAST)
        if durable:
            existing = self._broker.queues.get(queue_name)
            if existing is not None:
                if existing.address != name or not self._broker.is_durable(queue_name):
                    raise QueueExists(queue_name)
                node.check(name, Permission.CONSUME, queue_name)
                return None
            permission = Permission.CREATE_DURABLE_QUEUE
        else:
            permission = Permission.CREATE_NON_DURABLE_QUEUE
        if not exists:
            node.check_create(name)
        node.check(name, permission, queue_name)
        node.check(name, Permission.CONSUME, queue_name)
        creating = Deferred.fromCoroutine(
            self._broker.create_queue(
                queue_name, name, durable=durable, filter=filter, routing=_MULTICAST
            )
        )
        if not durable:
            self._temporary.add(queue_name)
        return creating

    # -- queues ------------------------------------------------------------------------------

    def create_queue(
        self, name: str, address: str, *, durable: bool, filter: str | None, routing: Routing
    ) -> Deferred[Any]:
        """A client creates queue ``name`` on ``address`` (created too, if it may); a
        non-durable one goes with the connection. Fires once stored."""
        node = self._node
        node.check_address(address)
        permission = (
            Permission.CREATE_DURABLE_QUEUE if durable else Permission.CREATE_NON_DURABLE_QUEUE
        )
        node.check(address, permission, name)
        if name in self._broker.queues:
            raise QueueExists(name)
        matcher(filter)
        created = Deferred.fromCoroutine(
            self._broker.create_queue(
                name, address, durable=durable, filter=filter, routing=routing
            )
        )
        if not durable:
            self._temporary.add(name)
        return created

    def may_delete(self, queue_name: str) -> Queue:
        """The queue ``queue_name``, once checked that the client may delete it."""
        queue = self._broker.queue(queue_name)
        permission = (
            Permission.DELETE_DURABLE_QUEUE
            if self._broker.is_durable(queue_name)
            else Permission.DELETE_NON_DURABLE_QUEUE
        )
        self._node.check(queue.address, permission, queue_name)
        return queue

    def delete_queue(self, queue_name: str, *, durable: bool = False) -> Deferred[None]:
        """A client deletes queue ``queue_name`` (with ``durable``, only a durable one:
        ``QueueNotFound`` otherwise); ``QueueInUse`` while it has consumers. Fires once
        stored."""
        if durable and not self._broker.is_durable(queue_name):
            raise QueueNotFound(f"no durable queue {queue_name!r}")
        queue = self.may_delete(queue_name)
        if queue.consumer_ids:
            raise QueueInUse(queue_name, len(queue.consumer_ids))
        self._temporary.discard(queue_name)
        return Deferred.fromCoroutine(self._broker.delete_queue(queue_name))

    async def drop(self, queue_name: str) -> None:
        """Delete the connection's queue ``queue_name`` if it is still there and nobody
        consumes from it (a subscription's own, once its consumer closed)."""
        self._temporary.discard(queue_name)
        queue = self._broker.queues.get(queue_name)
        if queue is not None and not queue.consumer_ids:
            await self._broker.delete_queue(queue_name)

    def close(self) -> list[str]:
        """The connection is gone: its non-durable queues, to ``drop``."""
        names, self._temporary = sorted(self._temporary), set()
        return names
