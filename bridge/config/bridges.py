"""Core bridges' configuration: ``[[bridge]]`` tables, in the node's file or in the
``*.toml`` files of its ``bridges-dir``.

Names follow Artemis's core bridges (``confirmation-window-size``, ``retry-interval``,
``retry-interval-multiplier``, ``max-retry-interval``, ``reconnect-attempts``,
``use-duplicate-detection``, ``concurrency``), so a user who knows Artemis can read it.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from bridge.message import Message
from transport.urls import URL

Transformer = Callable[[Message], Message]
"""Called with each message before it is forwarded; returns the message to forward."""


@attrs.frozen
class BridgeConfig:
    """One bridge, checked. ``source`` and ``key`` (``bridge[2]``) say where it was
    declared, so a runtime error (a missing queue) names the file and key too."""

    name: str
    queue: str
    targets: tuple[URL, ...]
    """The primary target, then its backups, in failover order."""
    source: str
    key: str
    forwarding_address: str | None = None
    """None: each message goes to its own address."""
    filter: str | None = None
    transformer: Transformer | None = attrs.field(default=None, eq=False)
    transformer_name: str | None = None
    user: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    confirmation_window_size: int = 1024 * 1024
    producer_window_size: int = 1024 * 1024
    """The most producer credit the bridge uses per address (-1: whatever the target
    grants)."""
    min_large_message_size: int = 100 * 1024
    retry_interval: float = 2.0
    retry_interval_multiplier: float = 1.0
    max_retry_interval: float = 2.0
    reconnect_attempts: int = -1
    use_duplicate_detection: bool = True
    concurrency: int = 1
    pending_ack_timeout: float = 60.0
    """How long pause and stop wait for outstanding confirmations before returning the
    unconfirmed messages to the queue."""
