"""What a bridge sends for a message it took from its queue: where to, with which headers.

A forwarded message keeps its durability, headers, body and the producer's duplicate id.
The bridge adds two headers:

- ``_TXB_BRIDGE_DUP_ID``: the source node's id and the message's id, which the target's
  bridge duplicate-id cache uses to drop a resend (after a reconnect or a crash) that it
  already has. A durable message keeps its id across the source's restarts, so its
  resend carries the same id; a non-durable one does not outlive a restart, and its id
  carries the source's incarnation too, because the node may number messages again.
  A drain's bridge leaves it off a message that has its producer's duplicate id: that id
  then finds the repeats on the target, the producer's own resend there among them (a
  send whose confirmation the drain's closing of its connection cut off).
- ``_TXB_DELIVERY_COUNT``, on a message delivered before on the node it leaves, so that
  the target delivers it as a redelivery if it does not drop it as a repeat. A drain's
  message was delivered to consumers there. Any other bridge's was sent before and not
  confirmed: the target may have delivered it to an ``ack:auto`` consumer and been
  killed before its id was written (``Router._add_early_bridged``).
- ``_TXB_BRIDGE_PATH``: the ids of the nodes whose bridges forwarded it, in order. A
  bridge never forwards a message to a node on that path, so a cycle (A -> B -> A) ends
  after one round and a chain (A -> B -> C) goes on.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from bridge.message import (
    BRIDGE_DUPLICATE_ID,
    BRIDGE_PATH,
    DELIVERY_COUNT,
    HeaderValue,
    Message,
    bytes_header_encoder,
    encode_headers,
)


@attrs.frozen
class Origin:
    """The source node as its forwarded messages name it."""

    node_id: str
    incarnation: str
    """Different at every start of the node (non-durable message ids may repeat)."""


@attrs.define
class Forwarder:
    """What a lane sends to one target node for each message it takes.

    What is the same for every message (the node's entry in the path, the duplicate id's
    prefix, the target address) is worked out once, when the lane connects, so that a
    message costs its headers and two entries more, spliced onto the encoding the node
    made of it for its store where the message has none of the bridge's headers yet
    (``Message.forwarded``)."""

    origin: Origin
    target_node_id: str
    forwarding_address: str | None = None
    transformer: Callable[[Message], Message | None] | None = None
    duplicate_detection: bool = True
    moving: bool = False
    """A drain's: the producer's duplicate id, where there is one, detects repeats."""
    _durable_prefix: bytes = attrs.field(init=False)
    _transient_prefix: bytes = attrs.field(init=False)
    _first_path: bytes = attrs.field(init=False)
    """``encode_headers`` of the path of a message that no bridge forwarded before."""
    _encode_duplicate_id: Callable[[bytes], bytes] = attrs.field(init=False)
    _plain: bool = attrs.field(init=False)
    """No transformer, duplicate ids on, not a drain: every message's first hop is
    forwarded the one way ``forward`` takes first."""

    def __attrs_post_init__(self) -> None:
        # A durable message keeps its id across restarts; a non-durable one's id may be
        # given again after a restart, so its duplicate id names the incarnation too.
        self._durable_prefix = f"{self.origin.node_id}:".encode()
        self._transient_prefix = f"{self.origin.node_id}:{self.origin.incarnation}:".encode()
        self._first_path = encode_headers({BRIDGE_PATH: self.origin.node_id})
        self._encode_duplicate_id = bytes_header_encoder(BRIDGE_DUPLICATE_ID)
        self._plain = self.transformer is None and self.duplicate_detection and not self.moving

    def forward(self, message: Message, delivered_before: int = 0) -> Message | None:
        """The message to send for ``message``, or None when it must not go: it has been
        through the target node already, or the transformer dropped it (returned None).
        ``delivered_before``: the times the message was delivered here before."""
        headers = message.headers
        if self._plain and not delivered_before and headers.keys().isdisjoint(_BRIDGE_HEADERS):
            # The first hop of a message delivered here for the first time (nearly
            # every one): the path is this node, and the added headers' encoding is the
            # path's, worked out once, and the duplicate id's.
            prefix = self._durable_prefix if message.durable else self._transient_prefix
            duplicate_id = b"%s%d" % (prefix, message.id)
            return message.forwarded(
                self.forwarding_address or message.address,
                {BRIDGE_PATH: self.origin.node_id, BRIDGE_DUPLICATE_ID: duplicate_id},
                self._first_path + self._encode_duplicate_id(duplicate_id),
            )
        path = headers.get(BRIDGE_PATH)
        if isinstance(path, str) and path:
            if self.target_node_id in path.split(","):
                return None
            path = f"{path},{self.origin.node_id}"
        else:
            path = self.origin.node_id
        prefix = self._durable_prefix if message.durable else self._transient_prefix
        duplicate_id = b"%s%d" % (prefix, message.id)
        if self.transformer is not None:
            transformed = self.transformer(message)
            if transformed is None:
                return None
            message = transformed
        address = self.forwarding_address or message.address
        added: dict[str, HeaderValue] = {BRIDGE_PATH: path}
        if delivered_before:
            added[DELIVERY_COUNT] = delivered_before
        if self.duplicate_detection and not (self.moving and message.duplicate_id):
            added[BRIDGE_DUPLICATE_ID] = duplicate_id
        headers = message.headers
        if BRIDGE_DUPLICATE_ID in headers or not headers.keys().isdisjoint(added):
            # Forwarded before (a chain): the bridge's headers are this hop's.
            kept = {
                key: value
                for key, value in headers.items()
                if key not in added and key != BRIDGE_DUPLICATE_ID
            }
            message = attrs.evolve(message, headers=kept)
        return message.forwarded(address, added)


_BRIDGE_HEADERS = frozenset((BRIDGE_PATH, BRIDGE_DUPLICATE_ID, DELIVERY_COUNT))
"""The headers a bridge adds: a message with none of them is on its first hop."""
