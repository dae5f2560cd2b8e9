"""A STOMP connection's subscriptions: by the client's ids, and by the keys that start
their ack ids; which delivery an ACK or NACK names, by ack id (STOMP 1.2, the MESSAGE's
``ack``) or by ``message-id`` (1.0 and 1.1); and what it settles (``client`` mode: every
delivery up to it, ``client-individual`` mode: that one). The deliveries themselves, their
acknowledgement and redelivery, are the node's consumer's (``bridge.node.consumer``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import attrs

from bridge.heads.stomp.frames import Command, Version
from bridge.heads.stomp.headers import AckMode, StompError
from bridge.node.consumer import Consumer

_NOTHING: Mapping[int, int] = {}


@attrs.define(eq=False)
class Subscription:
    """A SUBSCRIBE of this connection, a consumer on one queue."""

    id: str
    key: int
    """The connection's number for it, the first part of its ack ids."""
    ack: AckMode
    destination: str
    """The destination its MESSAGE frames carry."""
    address: str
    temporary: bool = False
    durable: bool = False
    by_message: dict[int, int] = attrs.Factory(dict)
    """Message id -> delivery id (for the ACK of STOMP 1.0 and 1.1, by message-id)."""
    consumer: Consumer[Subscription] = attrs.field(init=False)
    """The node's consumer, which counts what awaits acknowledgement."""
    head_lines: tuple[str, str] | tuple[()] | None = attrs.field(default=None, init=False)
    """How its STOMP 1.2 MESSAGE heads start (``message_frames``), once known: empty where
    its id or destination needs an escape."""

    @property
    def queue(self) -> str:
        return self.consumer.queue

    @queue.setter
    def queue(self, name: str) -> None:
        self.consumer.queue = name

    @property
    def unacked(self) -> Mapping[int, int]:
        """Delivery id -> message id of what awaits acknowledgement, oldest first."""
        return self.consumer.unacked or _NOTHING

    def settled(self, delivery_ids: list[int]) -> None:
        """Forget settled deliveries. A message's id names its latest delivery only: a
        NACKed message may already be out again under a new delivery id, recorded under
        the same message id, and that entry stays."""
        by_message = self.by_message
        message_ids = self.consumer.settled(delivery_ids)
        for delivery_id, message_id in zip(delivery_ids, message_ids, strict=True):
            if by_message.get(message_id) == delivery_id:
                del by_message[message_id]


class Subscriptions:
    """One connection's subscriptions."""

    def __init__(self) -> None:
        self._by_id: dict[str, Subscription] = {}
        self._by_key: dict[int, Subscription] = {}
        self._keys = 0

    def __contains__(self, sub_id: str) -> bool:
        return sub_id in self._by_id

    def __iter__(self) -> Iterator[Subscription]:
        return iter(list(self._by_id.values()))

    def __getitem__(self, sub_id: str) -> Subscription:
        return self._by_id[sub_id]

    def get(self, sub_id: str) -> Subscription | None:
        return self._by_id.get(sub_id)

    def next_key(self) -> int:
        self._keys += 1
        return self._keys

    def add(self, subscription: Subscription) -> None:
        self._by_id[subscription.id] = subscription
        self._by_key[subscription.key] = subscription

    def remove(self, subscription: Subscription) -> None:
        del self._by_id[subscription.id]
        del self._by_key[subscription.key]

    def is_open(self, subscription: Subscription) -> bool:
        """Whether ``subscription`` is still open (not unsubscribed since)."""
        return self._by_id.get(subscription.id) is subscription

    def close(self) -> list[Subscription]:
        """The connection is gone: every subscription, none open any more."""
        subscriptions = list(self._by_id.values())
        self._by_id.clear()
        self._by_key.clear()
        return subscriptions

    def settling(
        self, command: Command, headers: Mapping[str, str], version: Version | None
    ) -> tuple[Subscription, list[int]]:
        """The subscription an ACK or NACK names, and the deliveries it settles."""
        subscription, delivery_id = self._target(command, headers, version)
        if subscription.ack is AckMode.AUTO:
            raise StompError(
                "not acknowledged by the client",
                f"subscription {subscription.id!r} acknowledges automatically (ack:auto)",
            )
        if subscription.ack is AckMode.CLIENT_INDIVIDUAL:
            return subscription, [delivery_id]
        return subscription, [d for d in subscription.unacked if d <= delivery_id]

    def _target(
        self, command: Command, headers: Mapping[str, str], version: Version | None
    ) -> tuple[Subscription, int]:
        ack_id = headers.get("id")
        if version is Version.V1_2:
            if ack_id is None:
                raise StompError("missing header", f"{command} needs an 'id' header")
            key, _, delivery = ack_id.partition("-")
            subscription = self._by_key.get(int(key)) if key.isdigit() else None
            if subscription is not None and delivery.isdigit():
                delivery_id = int(delivery)
                if delivery_id in subscription.unacked:
                    return subscription, delivery_id
            raise StompError(
                "unknown ack id",
                f"{command} id {ack_id!r} names no message awaiting acknowledgement on this "
                "connection",
            )
        message_id = headers.get("message-id")
        if message_id is None or not message_id.isdigit():
            raise StompError("missing header", f"{command} needs a 'message-id' header")
        number = int(message_id)
        sub_id = headers.get("subscription")
        candidates = (
            [self._by_id[sub_id]]
            if sub_id is not None and sub_id in self._by_id
            else list(self._by_id.values())
            if sub_id is None
            else []
        )
        for subscription in candidates:
            found = subscription.by_message.get(number)
            if found is not None:
                return subscription, found
        raise StompError(
            "unknown message",
            f"{command} of message {message_id} names no message awaiting acknowledgement "
            "on this connection",
        )
