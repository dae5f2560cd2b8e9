"""What the headers of STOMP frames say, read and written, sans-IO: CONNECT's versions
and heart-beats, destinations, SUBSCRIBE's acknowledgement mode and durability, NACK's
``requeue``, and a message's own headers on a MESSAGE frame. A header that does not say
something this node understands is a :class:`StompError`, which the session answers with
an ERROR frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from bridge.heads.stomp.destinations import Destination, DestinationError, parse_destination
from bridge.heads.stomp.frames import Version, encodable
from bridge.message import BRIDGE_HEADERS, DELIVERY_COUNT, HeaderValue

SERVER = "txbridge/0.1.0"
VERSIONS = (Version.V1_2, Version.V1_1, Version.V1_0)
DELIVERY_COUNT_HEADER = "delivery-count"
"""On a redelivery's MESSAGE, with ``redelivered:true``: how many times the node has
handed the message out. A first delivery carries neither (it is 1)."""

SET_BY_NODE = frozenset({"message-id", "subscription", "ack", "redelivered", DELIVERY_COUNT_HEADER})
"""Headers the node sets on MESSAGE frames: a SEND that sets one is refused."""
SEND_FRAME_HEADERS = frozenset(
    {"destination", "content-length", "receipt", "transaction", "persistent"}
)
"""Headers of the SEND frame itself, not of the message (``persistent`` is its
durability)."""
MESSAGE_FRAME_HEADERS = (
    SET_BY_NODE | {"destination", "content-length", "persistent", DELIVERY_COUNT} | BRIDGE_HEADERS
)
"""Left out of a message's own headers on a MESSAGE frame: the frame's own, and the nodes'
bookkeeping (a bridge's duplicate id and path, and the deliveries elsewhere, which
``delivery-count`` includes), which only lengthens every bridged frame for each client
to parse."""


class StompError(Exception):
    """What the client did wrong: the ERROR frame's ``message`` and its body."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(f"{message}: {detail}")
        self.message = message
        self.detail = detail


class AckMode(Enum):
    AUTO = "auto"
    CLIENT = "client"
    CLIENT_INDIVIDUAL = "client-individual"


def negotiate(accepted: str | None) -> Version | None:
    """The highest version both sides speak (CONNECT's ``accept-version``), if any."""
    if accepted is None:
        return Version.V1_0
    offered = {part.strip() for part in accepted.split(",")}
    return next((version for version in VERSIONS if version.value in offered), None)


def heart_beat(text: str) -> tuple[int, int]:
    """CONNECT's ``heart-beat``: what the client sends at, and wants to receive at."""
    send, comma, receive = text.partition(",")
    if comma and send.strip().isdigit() and receive.strip().isdigit():
        return int(send), int(receive)
    raise StompError("malformed header", f"heart-beat {text!r} is not two numbers: 'cx,cy'")


_DESTINATIONS: dict[str, Destination] = {}
_DESTINATIONS_KEPT = 1024
"""Parsed destinations, kept (a few, the most used are re-added) for the hot path."""


def destination_of(headers: dict[str, str]) -> Destination:
    """The frame's ``destination``, parsed."""
    text = headers.get("destination")
    if text is None:
        raise StompError("missing header", "the frame needs a 'destination' header")
    found = _DESTINATIONS.get(text)
    if found is not None:
        return found
    try:
        parsed = parse_destination(text)
    except DestinationError as error:
        raise StompError("bad destination", str(error)) from None
    if len(_DESTINATIONS) >= _DESTINATIONS_KEPT:
        _DESTINATIONS.clear()
    _DESTINATIONS[text] = parsed
    return parsed


def ack_mode(text: str) -> AckMode:
    """SUBSCRIBE's ``ack``."""
    try:
        return AckMode(text)
    except ValueError:
        raise StompError(
            "bad header", f"ack {text!r} is not one of auto, client, client-individual"
        ) from None


def requeue_of(text: str) -> bool:
    """RabbitMQ's ``requeue`` header of NACK: true or false, in any case."""
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise StompError("bad header", f"requeue {text!r} is not true or false")
    return lowered == "true"


def names_durable(headers: Mapping[str, str]) -> bool:
    """Whether SUBSCRIBE/UNSUBSCRIBE names a durable subscription (RabbitMQ's
    ``durable``/``persistent``, ActiveMQ's ``activemq.subscriptionName``)."""
    return (
        headers.get("durable") == "true"
        or headers.get("persistent") == "true"
        or "activemq.subscriptionName" in headers
    )


def message_headers(headers: Mapping[str, HeaderValue], version: Version) -> list[tuple[str, str]]:
    """A message's own headers as STOMP headers: strings as they are, booleans as
    true/false, numbers in decimal, bytes as UTF-8 text. Those the node sets on MESSAGE
    frames, the nodes' bookkeeping (``MESSAGE_FRAME_HEADERS``), and those the version
    cannot carry, are left out."""
    out = []
    for key, value in headers.items():
        if key in MESSAGE_FRAME_HEADERS:
            continue
        if isinstance(value, str):
            text = value
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, bytes):
            text = value.decode("utf-8", "replace")
        else:
            text = str(value)
        if version is Version.V1_2 or encodable(version, key, text):
            out.append((key, text))
    return out
