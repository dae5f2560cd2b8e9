"""MESSAGE frames: what a subscription's delivery becomes on the wire.

``message_frame`` builds the frame for any version, as ``serialize`` then writes it.
``message_head`` writes the head of a STOMP 1.2 MESSAGE straight from a template, for
the hot path: a message whose headers need no escape (nearly every one) costs no frame
object and no generic serialization, and its bytes are the same as ``serialize``'s of
``message_frame``'s frame (a property test holds the two together).
"""

from __future__ import annotations

from bridge.heads.stomp.frames import Command, Frame, Version
from bridge.heads.stomp.headers import DELIVERY_COUNT_HEADER, AckMode, message_headers
from bridge.heads.stomp.subscriptions import Subscription
from bridge.message import Message

_AUTO = AckMode.AUTO
_V1_2 = Version.V1_2
_MESSAGE = Command.MESSAGE
_NEEDS_ESCAPE = ("\\", "\r", "\n", ":")

_AGAIN = "redelivered:true\ndelivery-count:"
_PERSISTENT = "persistent:true\n"


def message_frame(
    subscription: Subscription,
    delivery_id: int,
    count: int,
    message: Message,
    version: Version,
    *,
    body: bytes,
    size: int,
) -> Frame:
    """The MESSAGE frame of delivery ``delivery_id`` (the ``count``th of ``message``),
    with ``body`` (empty for a large message, whose ``size`` bytes follow it)."""
    headers = [
        ("subscription", subscription.id),
        ("message-id", str(message.id)),
        ("destination", subscription.destination),
    ]
    if subscription.ack is not _AUTO and version is _V1_2:
        headers.append(("ack", f"{subscription.key}-{delivery_id}"))
    headers.append(("content-length", str(size)))
    if count > 1:
        headers += (("redelivered", "true"), (DELIVERY_COUNT_HEADER, str(count)))
    if message.durable:
        headers.append(("persistent", "true"))
    if message.headers:
        headers += message_headers(message.headers, version)
    return Frame(_MESSAGE, tuple(headers), body)


def message_head(
    subscription: Subscription, delivery_id: int, count: int, message: Message
) -> bytes | None:
    """The head of the STOMP 1.2 MESSAGE frame ``message_frame`` makes for a message in
    memory, its blank line included, written from a template; None where a header needs
    an escape (then ``message_frame`` and ``serialize`` make it)."""
    lines = subscription.head_lines
    if lines is None:
        lines = subscription.head_lines = _head_lines(subscription)
    if not lines:
        return None
    own = ""
    if message.headers:
        pairs = message_headers(message.headers, _V1_2)
        if pairs:
            own = "".join([f"{key}:{value}\n" for key, value in pairs])
            if (
                own.count(":") != len(pairs)
                or own.count("\n") != len(pairs)
                or "\\" in own
                or "\r" in own
            ):
                return None
    start, destination = lines
    ack = "" if subscription.ack is _AUTO else f"ack:{subscription.key}-{delivery_id}\n"
    again = f"{_AGAIN}{count}\n" if count > 1 else ""
    return (
        f"{start}{message.id}\n{destination}{ack}content-length:{len(message.body)}\n"
        f"{again}{_PERSISTENT if message.durable else ''}{own}\n"
    ).encode()


def _head_lines(subscription: Subscription) -> tuple[str, str] | tuple[()]:
    """What a subscription's MESSAGE heads start with, up to ``message-id:``'s value, and
    their ``destination`` line; empty where its id or destination needs an escape."""
    named = subscription.id + subscription.destination
    if any(character in named for character in _NEEDS_ESCAPE):
        return ()
    return (
        f"MESSAGE\nsubscription:{subscription.id}\nmessage-id:",
        f"destination:{subscription.destination}\n",
    )
