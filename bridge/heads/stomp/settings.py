"""How the node's STOMP connections behave: its acceptors' settings."""

from __future__ import annotations

import attrs

from bridge.heads.stomp.frames import Limits


@attrs.frozen
class StompSettings:
    """How the node's STOMP connections behave (from the acceptor's configuration)."""

    limits: Limits = attrs.Factory(Limits)
    ttl: float | None = 60.0
    """Drop a peer silent for this long (before CONNECT, or when it sends heart-beats:
    then at least twice its interval)."""
    heart_beat: float | None = 20.0
    """The interval the node offers to send heart-beats at, and asks to receive them."""
    prefetch: int = 1000
    """Unacknowledged messages per subscription when SUBSCRIBE names none (0: no limit)."""
    high_water: int = 128 * 1024
    low_water: int = 32 * 1024
    max_unstored: int = 512 * 1024
    """Body bytes of persistent sends waiting for the store before reading pauses (about
    Artemis's journal buffer, 490 KiB): a producer goes at the store's pace, and what
    waits for the writer stays small (a message handed to it is in memory twice: itself
    and its encoded row)."""
    io_size: int | None = 256 * 1024
    """Bytes read or sent per socket call (as the core transport's ``io_size``)."""
    read_size: int | None = None
    """Bytes read per socket call (None: ``io_size``)."""
    close_timeout: float = 10.0
    """Seconds a closing connection may take to send what it holds before it is cut: a
    peer that does not read must not keep it (and the node's shutdown) waiting."""
    tcp_no_delay: bool = True
    """Small frames (receipts, acknowledgements) leave at once, not after the peer's
    delayed acknowledgement of the last one (``TCP_NODELAY``)."""
