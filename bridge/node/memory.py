"""How many bytes of messages the node holds in memory, per address and in all, and what
an address does when it is full (Artemis's ``max-size-bytes``, ``global-max-size`` and
address-full policies).

An address counts the bytes (``Message.size``) of the messages its queues hold in memory:
waiting, being delivered or unacknowledged; a multicast message counts once per queue that
holds it. A paged message counts nothing here but its place in the queue (its body is in
the store); a large message counts its header (its body is a file).

An address is full at its own ``max_size`` or when the node is at its ``global_max_size``.
Full, it applies its policy: PAGE keeps accepting and pages new messages until every paged
one was read back; BLOCK withholds producer credits (``when_room``) until there is room;
FAIL refuses sends; DROP drops them. Counting is a few integer updates per message; the
check for blocked producers costs nothing while none waits.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from bridge.config.node import UNLIMITED, AddressFullPolicy


@attrs.define(eq=False)
class NodeMemory:
    """The node's total, and the addresses whose producers wait for room."""

    max_size: int = UNLIMITED
    size: int = 0
    _waiting: dict[str, AddressMemory] = attrs.Factory(dict)

    @property
    def full(self) -> bool:
        return self.max_size != UNLIMITED and self.size >= self.max_size

    @property
    def blocked_producers(self) -> int:
        """Producer grants withheld now, over every address (one per connection)."""
        return sum(len(address.waiters) for address in self._waiting.values())

    def wait(self, address: AddressMemory) -> None:
        self._waiting[address.name] = address

    def released(self) -> None:
        """Bytes left memory: wake the producers of addresses that have room again."""
        for address in [a for a in self._waiting.values() if not a.full]:
            del self._waiting[address.name]
            address.wake()


@attrs.define(eq=False)
class AddressMemory:
    """One address's bytes in memory, its paging, and its policy's counters."""

    name: str
    max_size: int
    policy: AddressFullPolicy
    node: NodeMemory
    size: int = 0
    paged_messages: int = 0
    """Messages paged (or being paged) and not read back yet, over its queues."""
    paged_bytes: int = 0
    paged_total: int = 0
    dropped_total: int = 0
    """Messages dropped by the DROP policy."""
    refused_total: int = 0
    """Sends refused by the FAIL policy."""
    waiters: list[Callable[[], None]] = attrs.Factory(list)

    @property
    def full(self) -> bool:
        node = self.node  # (its ``full`` written out: read for every message routed)
        return (self.max_size != UNLIMITED and self.size >= self.max_size) or (
            node.max_size != UNLIMITED and node.size >= node.max_size
        )

    @property
    def paging(self) -> bool:
        """Paged messages are still out: new ones are paged too, keeping the order."""
        return self.paged_messages > 0

    def add(self, size: int) -> None:
        self.size += size
        self.node.size += size

    def release(self, size: int) -> None:
        self.size -= size
        node = self.node
        node.size -= size
        if node._waiting:  # (read for every message released: no property call)
            node.released()

    def paged(self, size: int) -> None:
        self.paged_messages += 1
        self.paged_bytes += size
        self.paged_total += 1

    def unpaged(self, size: int) -> None:
        self.paged_messages -= 1
        self.paged_bytes -= size

    def when_room(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the address is no longer full (BLOCK's withheld grant)."""
        self.waiters.append(callback)
        self.node.wait(self)

    def cancel_wait(self, callback: Callable[[], None]) -> None:
        """Forget a ``when_room`` callback (its producer went away)."""
        if callback in self.waiters:
            self.waiters.remove(callback)

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for callback in waiters:
            callback()
