"""What a bridge sends for a message it took from its queue: where to, with which headers.

A forwarded message keeps its durability, headers, body and the producer's duplicate id.
The bridge adds two headers:

- ``_TXB_BRIDGE_DUP_ID``: the source node's id and the message's id, which the target's
  bridge duplicate-id cache uses to drop a resend (after a reconnect or a crash) that it
  already has. A durable message keeps its id across the source's restarts, so its
  resend carries the same id; a non-durable one does not outlive a restart, and its id
  carries the source's incarnation too, because the node may number messages again.
- ``_TXB_BRIDGE_PATH``: the ids of the nodes whose bridges forwarded it, in order. A
  bridge never forwards a message to a node on that path, so a cycle (A -> B -> A) ends
  after one round and a chain (A -> B -> C) goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import attrs

from bridge.message import BRIDGE_DUPLICATE_ID, HeaderValue, Message

BRIDGE_PATH: Final = "_TXB_BRIDGE_PATH"


@attrs.frozen
class Origin:
    """The source node as its forwarded messages name it."""

    node_id: str
    incarnation: str
    """Different at every start of the node (non-durable message ids may repeat)."""

    def duplicate_id(self, message: Message) -> bytes:
        if message.durable:
            return f"{self.node_id}:{message.id}".encode()
        return f"{self.node_id}:{self.incarnation}:{message.id}".encode()


def path_of(message: Message) -> list[str]:
    """The node ids a message was forwarded through, oldest first."""
    path = message.headers.get(BRIDGE_PATH)
    return path.split(",") if isinstance(path, str) and path else []


@attrs.frozen
class Forward:
    """One message to send: where, what, and the bytes it counts for."""

    address: str
    headers: dict[str, HeaderValue]
    message: Message


def forward(
    message: Message,
    *,
    origin: Origin,
    target_node_id: str,
    forwarding_address: str | None,
    transformer: Callable[[Message], Message | None] | None,
    duplicate_detection: bool,
) -> Forward | None:
    """The send for ``message``, or None when it must not go: it has been through the
    target node already, or the transformer dropped it (returned None)."""
    path = path_of(message)
    if target_node_id in path:
        return None
    duplicate_id = origin.duplicate_id(message)
    if transformer is not None:
        transformed = transformer(message)
        if transformed is None:
            return None
        message = transformed
    headers = dict(message.headers)
    headers[BRIDGE_PATH] = ",".join([*path, origin.node_id])
    if duplicate_detection:
        headers[BRIDGE_DUPLICATE_ID] = duplicate_id
    else:
        headers.pop(BRIDGE_DUPLICATE_ID, None)
    return Forward(forwarding_address or message.address, headers, message)
