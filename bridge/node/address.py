"""An address and the queues bound to it: where each message goes.

An address has a set of routing types, and each queue bound to it one of them. Anycast:
each message goes to ONE of the address's anycast queues whose filter it matches, the
queues taking turns (usually there is one, named like the address). Multicast: each
message goes to EVERY multicast (subscription) queue whose filter it matches. An address
with both routing types routes a message by the type its ``ROUTING_TYPE`` header states,
anycast when it states none, as Artemis does. A message no queue takes is dropped (there
is nobody to keep it for), as in Artemis.

Each address keeps two duplicate-id caches of its ``id-cache-size``: one for producers'
ids, one for the ids core bridges put on what they forward (Artemis's bridge cache), so
a busy bridge never pushes a producer's ids out, nor the other way round.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import attrs

from bridge.config.node import AddressSettings, Routing
from bridge.message import ROUTING_TYPE, Message
from bridge.node.duplicates import DuplicateIdCache
from bridge.node.memory import AddressMemory, NodeMemory
from bridge.node.queue import Filter, Queue

BRIDGE_KEY_PREFIX = "$bridge."
"""The store keeps an address's bridge ids under this prefix and its name (no address
name starts with ``$``), its producers' ids under its name."""


class AddressError(Exception):
    """A binding that cannot be made or undone, named."""


class Detection(NamedTuple):
    """How a message's repeats are found: its id, the cache that holds it and the key the
    store keeps that cache under."""

    cache: DuplicateIdCache
    key: str
    duplicate_id: bytes


def free(detection: Detection | None) -> None:
    """A send that did not happen (its write failed, its transaction rolled back) leaves
    its duplicate id free, so that its resend gets through."""
    if detection is not None:
        detection.cache.discard(detection.duplicate_id)


def hold(detection: Detection | None) -> None:
    """A send's write is pending: a repeat of it waits for the outcome."""
    if detection is not None:
        detection.cache.hold(detection.duplicate_id)


def settle(detection: Detection | None, *, committed: bool) -> None:
    """A send's write committed or failed: tell the repeats waiting on it (a failed one
    leaves its duplicate id free, so that its resend gets through)."""
    if detection is not None:
        detection.cache.settle(detection.duplicate_id, committed)


@attrs.frozen
class Binding:
    """A queue bound to an address, with the filter messages must match to reach it."""

    queue: Queue
    filter: Filter | None
    durable: bool
    routing: Routing

    def takes(self, message: Message) -> bool:
        return self.filter is None or self.filter(message.headers)


class Address:
    """An address's routing types, its bindings, its duplicate-id caches and its memory."""

    def __init__(
        self,
        name: str,
        routing_types: Routing | Iterable[Routing],
        settings: AddressSettings,
        *,
        recovered_ids: Iterable[bytes] = (),
        recovered_bridge_ids: Iterable[bytes] = (),
        node_memory: NodeMemory | None = None,
    ) -> None:
        self.name = name
        self.routing_types: frozenset[Routing] = frozenset(
            {routing_types} if isinstance(routing_types, Routing) else routing_types
        )
        if not self.routing_types:
            raise AddressError(f"address {name!r} needs a routing type")
        self.settings = settings
        self.memory = AddressMemory(
            name,
            settings.max_size_bytes,
            settings.address_full_policy,
            NodeMemory() if node_memory is None else node_memory,
        )
        self.duplicates = DuplicateIdCache(settings.id_cache_size, recovered_ids)
        self.bridge_duplicates = DuplicateIdCache(settings.id_cache_size, recovered_bridge_ids)
        self.bridge_key = BRIDGE_KEY_PREFIX + name
        """What the store keeps ``bridge_duplicates`` under."""
        self._bindings: dict[str, Binding] = {}
        self.only: Binding | None = None
        """The one binding, when there is exactly one, it has no filter and the address
        one routing type: where every send goes (read on the router's hot path)."""
        self._turn = 0

    @property
    def routing(self) -> Routing:
        """The routing type of a send that states none: anycast, if the address has it."""
        return Routing.ANYCAST if Routing.ANYCAST in self.routing_types else Routing.MULTICAST

    def add_routing(self, routing: Routing) -> None:
        """Give the address another routing type (a client used it, and may)."""
        self.routing_types = self.routing_types | {routing}
        self._bound()

    @property
    def bindings(self) -> tuple[Binding, ...]:
        return tuple(self._bindings.values())

    def binding(self, queue_name: str) -> Binding:
        try:
            return self._bindings[queue_name]
        except KeyError:
            raise AddressError(f"address {self.name!r} has no queue {queue_name!r}") from None

    def bind(
        self,
        queue: Queue,
        filter: Filter | None = None,
        durable: bool = True,
        routing: Routing | None = None,
    ) -> None:
        """Bind a queue (for multicast, a subscription) to this address, with ``routing``
        (one of the address's routing types; None: the address's ``routing``)."""
        if queue.address != self.name:
            raise AddressError(f"queue {queue.name!r} belongs to address {queue.address!r}")
        if queue.name in self._bindings:
            raise AddressError(f"address {self.name!r} already has queue {queue.name!r}")
        routing = self.routing if routing is None else routing
        if routing not in self.routing_types:
            raise AddressError(
                f"address {self.name!r} is {routing_names(self.routing_types)}, not {routing.value}"
            )
        self._bindings[queue.name] = Binding(queue, filter, durable, routing)
        self._bound()

    def unbind(self, queue_name: str) -> Binding:
        try:
            binding = self._bindings.pop(queue_name)
        except KeyError:
            raise AddressError(f"address {self.name!r} has no queue {queue_name!r}") from None
        self._bound()
        return binding

    def _bound(self) -> None:
        """The bindings changed: ``route``'s shortcut is renewed."""
        bindings = list(self._bindings.values())
        one = len(bindings) == 1 and bindings[0].filter is None and len(self.routing_types) == 1
        self.only = bindings[0] if one else None

    def detection(self, message: Message) -> Detection | None:
        """Where the message's repeats are detected: a bridge id in the bridge cache (its
        producer's id, if any, was checked where it was first sent, and is not used here),
        else its producer's duplicate id in the producers' cache; None without either."""
        bridge_id = message.bridge_duplicate_id
        if bridge_id is not None:
            return Detection(self.bridge_duplicates, self.bridge_key, bridge_id)
        if message.duplicate_id is not None:
            return Detection(self.duplicates, self.name, message.duplicate_id)
        return None

    def route(self, message: Message) -> list[Binding]:
        """The bindings the message goes to (none: it is dropped)."""
        if self.only is not None:
            return [self.only]
        routing = self.routing
        if len(self.routing_types) > 1:
            routing = _stated(message, routing)
        takers = [
            binding
            for binding in self._bindings.values()
            if binding.routing is routing and binding.takes(message)
        ]
        if routing is Routing.MULTICAST or len(takers) <= 1:
            return takers
        chosen = takers[self._turn % len(takers)]
        self._turn += 1
        return [chosen]


def _stated(message: Message, default: Routing) -> Routing:
    """The routing type the message's ``ROUTING_TYPE`` header states, else ``default``;
    AddressError for a value that names none."""
    stated = message.headers.get(ROUTING_TYPE)
    if stated is None:
        return default
    if stated == "anycast":
        return Routing.ANYCAST
    if stated == "multicast":
        return Routing.MULTICAST
    raise AddressError(f"header {ROUTING_TYPE} is {stated!r}: it is 'anycast' or 'multicast'")


def routing_names(routing_types: frozenset[Routing]) -> str:
    """The routing types in words: "anycast", "multicast" or "anycast and multicast"."""
    return " and ".join(sorted(routing.value for routing in routing_types))
