"""What a client session keeps of each send: waiting for the windows, streaming its
large body, or sent and not yet confirmed (and resent after a drop); and the commits and
rollbacks that wait in line behind a transaction's sends."""

from __future__ import annotations

from typing import IO

import attrs

from bridge.client.events import Settle
from bridge.message import Message


class PendingSend:
    """A send waiting, streaming or unconfirmed. ``cost`` counts against the window."""

    __slots__ = (
        "callback",
        "cost",
        "file",
        "message",
        "refused",
        "remaining",
        "sequence",
        "start",
        "total",
        "tx_id",
    )

    def __init__(
        self,
        message: Message,
        tx_id: int | None,
        callback: Settle | None,
        *,
        file: IO[bytes] | None = None,
        start: int = 0,
        total: int = 0,
    ) -> None:
        self.message = message
        self.tx_id = tx_id
        self.callback = callback
        self.cost = 0  # set when encoded (``_put_send``), which measures the message
        self.file = file
        self.start = start
        self.total = total
        self.remaining = total
        self.sequence = 0
        self.refused = False


@attrs.define
class Barrier:
    """A commit or rollback, queued behind its transaction's waiting sends."""

    request_id: int
