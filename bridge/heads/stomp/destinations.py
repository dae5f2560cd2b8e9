"""STOMP destinations and what they name on the node.

``/queue/NAME`` is the anycast address NAME (and its queue of the same name),
``/topic/NAME`` the multicast address NAME, ``/amq/queue/NAME`` the existing queue NAME,
whatever its address.
"""

from __future__ import annotations

import re
from enum import Enum

import attrs

MAX_NAME = 255
_NAME = re.compile(r"[^\s/#*\x00-\x1f\x7f]+")


class Kind(Enum):
    QUEUE = "/queue/"
    TOPIC = "/topic/"
    AMQ_QUEUE = "/amq/queue/"


class DestinationError(ValueError):
    """A destination this node does not understand; the message names it."""


@attrs.frozen
class Destination:
    kind: Kind
    name: str

    def __str__(self) -> str:
        return f"{self.kind.value}{self.name}"


def parse_destination(text: str) -> Destination:
    """The destination ``text`` names, or DestinationError saying why it names none."""
    for kind in (Kind.AMQ_QUEUE, Kind.QUEUE, Kind.TOPIC):
        if text.startswith(kind.value):
            name = text[len(kind.value) :]
            if not _NAME.fullmatch(name) or len(name) > MAX_NAME:
                raise DestinationError(
                    f"destination {text!r} is malformed: after {kind.value} comes a name of "
                    f"1 to {MAX_NAME} characters without spaces, '/', '#' or '*'"
                )
            return Destination(kind, name)
    raise DestinationError(
        f"destination {text!r} has an unknown prefix: use /queue/NAME, /topic/NAME or "
        "/amq/queue/NAME"
    )
