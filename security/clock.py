"""The injected clock: time comes from the caller, so tests drive it (docs/architecture.md,
rule 3)."""

from __future__ import annotations

from collections.abc import Callable

Clock = Callable[[], float]
"""Seconds since any fixed origin: ``reactor.seconds``, ``time.monotonic`` or a test clock."""
