"""What a store keeps and gives back on start: queue definitions and recovered state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NewType

import attrs

from bridge.message import Message

TxId = NewType("TxId", int)
ROUTINGS = ("anycast", "multicast")


def _known_routing(instance: QueueRecord, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in ROUTINGS:
        raise ValueError(
            f"queue {instance.name!r}: routing must be one of {ROUTINGS}, not {value!r}"
        )


@attrs.frozen
class QueueRecord:
    """A durable queue's definition: its name, the address it is bound to, how that
    address routes ("anycast" or "multicast") and its filter (None: takes everything)."""

    name: str
    address: str
    routing: str = attrs.field(validator=_known_routing)
    filter: str | None = None


@attrs.frozen
class RecoveredMessage:
    """A stored message on one queue, with how often it was delivered there.

    With ``paged_size`` set, ``message`` is only its stub (``Message.stub``): the store
    read no more bodies than its open's ``load_limit``, and the body, of that size, is
    read back later (``IMessageStore.read``)."""

    message: Message
    delivery_count: int
    paged_size: int | None = None


@attrs.frozen
class Recovered:
    """Everything a store held when it was opened.

    ``messages`` has an entry for every queue that holds messages, each in message id
    order. ``duplicate_ids`` holds each address's duplicate-detection ids, oldest first.
    ``highest_message_id`` is the highest id ever added or reserved (0 for a new store), so
    a node continues above it even when every message was acknowledged. ``after_crash``: the
    last run did not close the store (killed or crashed), so every message's delivery
    count was raised by one (it may have been delivered unacknowledged).
    """

    queues: Sequence[QueueRecord]
    messages: Mapping[str, Sequence[RecoveredMessage]]
    duplicate_ids: Mapping[str, Sequence[bytes]]
    highest_message_id: int
    after_crash: bool = False
