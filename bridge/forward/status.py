"""What a bridge shows of itself: its state and counters, read by the management API."""

from __future__ import annotations

from enum import StrEnum

import attrs


class BridgeState(StrEnum):
    """A bridge's life cycle (Artemis's names)."""

    STARTING = "STARTING"
    STARTED = "STARTED"
    PAUSING = "PAUSING"
    PAUSED = "PAUSED"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


@attrs.frozen
class BridgeSnapshot:
    """One bridge now."""

    name: str
    state: BridgeState
    queue: str
    targets: tuple[str, ...]
    connected_to: str | None
    """The target URL the bridge is connected to now, if any."""
    last_error: str | None
    messages_forwarded: int
    bytes_forwarded: int
    messages_skipped: int
    """Messages not forwarded because they had been through the target node already (a
    bridge cycle) or the transformer dropped them."""
    pending_confirmations: int
    paused_writability_seconds: float
    """Time spent not taking messages because the target connection was not writable or
    the confirmation window was full."""
    paused_credits_seconds: float
    """Time spent not taking messages for want of the target's producer credits."""
    reconnects: int
    source: str
    """The file and key that declared it (``bridges.d/a.toml bridge[0]``)."""
    pending_ack_timeout: float
    """How long a pause or stop may wait for confirmations (so a caller knows how long to
    wait for one)."""
