"""What a client session tells its application: the events ``ClientSession.take_events``
returns, and the callables they carry.

The session is sans-IO: it hands these to its glue (``bridge.client.api``), which calls
each callback or passes each delivery on, in order."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

import attrs

from bridge.client.errors import ClientError, Refused
from bridge.message import Message
from bridge.protocol import Topology

Settle = Callable[[ClientError | None], object]
"""Called once when a send or request is settled: with None on success, else the error."""


@attrs.frozen
class AddressInfo:
    """How an address is set up on the node (its answer to ``address_info``).

    For an address that does not exist (``exists`` false), the settings it would be
    created with on first use, which it is when ``auto_create``. ``routing`` is
    "anycast", "multicast" or "anycast,multicast" (both routing types), or "" when the
    address neither exists nor would be created;
    ``max_size_bytes`` is -1 for no limit; ``address_full_policy`` is "PAGE", "BLOCK",
    "FAIL" or "DROP"; ``id_cache_size`` is how many duplicate ids it keeps.
    """

    name: str
    exists: bool
    routing: str
    max_size_bytes: int
    address_full_policy: str
    id_cache_size: int
    auto_create: bool


Answer = Callable[[AddressInfo], object]
"""Called once with a query's answer (its errors go to the query's ``Settle``)."""


# -- events ----------------------------------------------------------------------------


@attrs.frozen
class Ready:
    """The node accepted the login (CONNECTED); ``reconnected`` after an earlier drop."""

    node_name: str
    node_id: str
    producer_window_size: int
    reconnected: bool


@attrs.frozen
class LoginRefused:
    """The node refused the CONNECT; the session is closed with ``error``."""

    error: Refused


@attrs.frozen
class SendsConfirmed:
    """The node confirmed sends: each callback is to be called with None. Hot path: one
    event for every send a SEND_CONFIRMED covers."""

    callbacks: list[Settle]


@attrs.frozen
class Settled:
    """A send or request is done: call ``callback(error)`` (None: it succeeded)."""

    callback: Settle
    error: ClientError | None


@attrs.frozen
class ConsumerLost:
    """Re-creating consumer ``consumer_id`` after a reconnection failed; it is gone."""

    consumer_id: int
    error: ClientError


@attrs.frozen
class Delivery:
    """A message for consumer ``consumer_id``, to be taken by the application.

    A large message's ``message`` has an empty body, and ``body_file`` holds the body
    (spooled, positioned at its start). ``cost`` is what the consumer's credit gets back
    when the application takes it; ``epoch`` numbers the connection it came on.
    """

    consumer_id: int
    delivery_id: int
    delivery_count: int
    message: Message
    body_file: IO[bytes] | None
    cost: int
    epoch: int


@attrs.frozen
class Answered:
    """A query is answered: call ``callback(info)``."""

    callback: Answer
    info: AddressInfo


@attrs.frozen
class TopologyChanged:
    """The node sent its cluster's TOPOLOGY (after CONNECTED, and at every change)."""

    topology: Topology


@attrs.frozen
class Redirected:
    """The node does not serve the store asked for: it is served at ``urls`` (none: by no
    member now). The glue closes the connection and goes there."""

    store: str
    urls: tuple[str, ...]


Event = (
    Ready
    | LoginRefused
    | SendsConfirmed
    | Settled
    | ConsumerLost
    | Delivery
    | Answered
    | TopologyChanged
    | Redirected
)
