"""What a client session keeps of each of its consumers, across connections: its window
and credit, the deliveries the application holds unsettled (to claim after a drop,
REATTACH_CONSUMER), the large delivery arriving, and the settling that waits on a claim.

Plain bookkeeping: ``ClientSession`` decides, these remember."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

import attrs

from bridge.client.events import Delivery, Settle
from bridge.protocol import CLAIM_LIMIT, DeliverLargeBegin


@attrs.define
class Incoming:
    """A large delivery whose chunks are arriving."""

    begin: DeliverLargeBegin
    file: IO[bytes]
    remaining: int


Held = tuple[int, int, tuple[int, int]]
"""A delivery the application took and has not settled: its message id, its cost, and
the (epoch, delivery id) of the ``Delivery`` the application holds."""


@attrs.define
class Waiting:
    """An ack or nack of a held message made while its claim is unanswered: ``settle``
    runs it again with the delivery the claim gives it."""

    delivery: Delivery
    settle: Callable[[Delivery], None]
    callback: Settle | None


@attrs.define
class ConsumerState:
    """One consumer of the session, across connections: what it was opened with, its
    credit (``balance``, and ``to_grant`` not yet granted back), and what is unsettled."""

    consumer_id: int
    queue: str
    filter: str | None
    window: int
    browse_only: bool
    create_callback: Settle | None
    close_callback: Settle | None = None
    open: bool = False
    closing: bool = False
    balance: int = 0
    to_grant: int = 0
    last_delivery: int = 0
    unsettled: dict[int, None] = attrs.Factory(dict)
    large: Incoming | None = None
    held: dict[int, Held] = attrs.Factory(dict)
    """Unsettled deliveries the application took, by delivery id."""
    origins: dict[tuple[int, int], int] = attrs.Factory(dict)
    """Claimed deliveries' ids, by the (epoch, delivery id) the application knows them as."""
    claiming: dict[int, Held] = attrs.Factory(dict)
    """What the application held at the last drop, by message id, to claim."""
    waiting: list[Waiting] = attrs.Factory(list)
    """Acks and nacks of messages being claimed."""

    def hold_over(self) -> None:
        """The connection dropped: what the application holds is to be claimed on the next
        (the oldest ``CLAIM_LIMIT``, with what an unanswered claim named)."""
        claiming = self.claiming
        for held in self.held.values():
            if len(claiming) >= CLAIM_LIMIT:
                break
            claiming.setdefault(held[0], held)

    def settled(self, delivery_id: int, epoch: int) -> None:
        """Delivery ``delivery_id`` is acknowledged or refused: held no more."""
        del self.unsettled[delivery_id]
        held = self.held.pop(delivery_id, None)
        if held is not None and held[2][0] != epoch:
            del self.origins[held[2]]

    def reset(self) -> None:
        """A fresh connection: the node knows nothing of this consumer yet."""
        self.balance = self.window
        self.to_grant = 0
        self.last_delivery = 0
        self.unsettled.clear()
        self.held.clear()
        self.origins.clear()
        if self.large is not None:
            self.large.file.close()
            self.large = None
