"""Outbound bytes and writability, sans-IO: what a connection has queued, and whether
writers should go on.

A connection queues what its writers send and hands it to the transport only while the
transport produces (Twisted has not paused it). Writability is judged on the pending
bytes: those queued here plus those handed to the transport that it has not yet drained as
far as its signals tell (everything handed since its buffer was last empty, counted while
it is paused). With the high water mark reached the connection is not writable; it becomes
writable again only once the pending bytes fall to the low water mark. The gap between the
marks keeps writers from flapping, and because the queue refills the transport the moment
it drains, the pipe does not run dry while writers wake up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import attrs

DEFAULT_HIGH_WATER = 128 * 1024
DEFAULT_LOW_WATER = 32 * 1024


def check_water_marks(high: int, low: int) -> None:
    """Refuse marks that leave no room between them."""
    if not 0 <= low < high:
        raise ValueError(f"water marks must satisfy 0 <= low < high, got low={low} high={high}")


def _check_marks(instance: OutboundQueue, attribute: attrs.Attribute[int], value: int) -> None:
    check_water_marks(instance.high_water, instance.low_water)


@attrs.define(on_setattr=attrs.setters.NO_OP)
class OutboundQueue:
    """Bytes waiting to leave, and the writability they imply.

    The marks are checked when the queue is made; its counters change several times per
    frame, so no attribute assignment runs attrs' validating ``__setattr__``."""

    high_water: int = DEFAULT_HIGH_WATER
    low_water: int = attrs.field(default=DEFAULT_LOW_WATER, validator=_check_marks)
    _parts: deque[bytes] = attrs.field(factory=deque, init=False)
    _queued: int = attrs.field(default=0, init=False)
    _in_transport: int = attrs.field(default=0, init=False)
    _transport_paused: bool = attrs.field(default=False, init=False)
    _writable: bool = attrs.field(default=True, init=False)
    _changes: list[bool] = attrs.field(factory=list, init=False)

    @property
    def queued(self) -> int:
        """Bytes queued here, not yet handed to the transport."""
        return self._queued

    @property
    def pending(self) -> int:
        """Bytes that count against the water marks."""
        return self._queued + (self._in_transport if self._transport_paused else 0)

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def transport_paused(self) -> bool:
        return self._transport_paused

    def push(self, parts: Sequence[bytes], size: int) -> None:
        """Queue the parts of one frame (``size`` is their total length)."""
        self._parts.extend(parts)
        queued = self._queued = self._queued + size
        if self._writable and queued < self.high_water and not self._transport_paused:
            return  # (still writable, nearly every push: ``_update``'s first case written out)
        self._update()

    def take(self, budget: int) -> list[bytes]:
        """Remove whole parts until they reach ``budget`` bytes (or none are left), to hand
        over: the part that crosses the budget goes too, so that a large frame leaves with
        its header in one socket call."""
        parts = self._parts
        if self._queued <= budget:  # (all of it: most turns, no loop over the parts)
            out = list(parts)
            parts.clear()
            taken = self._queued
        else:
            out, taken = self._take_some(budget)
        self._queued -= taken
        self._in_transport += taken
        self._update()
        return out

    def _take_some(self, budget: int) -> tuple[list[bytes], int]:
        """Whole parts from the front up to ``budget`` bytes, the one that crosses it too."""
        parts = self._parts
        out: list[bytes] = []
        taken = 0
        while parts and taken < budget:
            part = parts.popleft()
            out.append(part)
            taken += len(part)
        return out, taken

    def take_all(self) -> list[bytes]:
        """Remove everything queued (for a last flush before closing)."""
        out = list(self._parts)
        self._parts.clear()
        self._in_transport += self._queued
        self._queued = 0
        self._update()
        return out

    def transport_producing(self) -> None:
        """A flush pass starts while the transport produces: its buffer is below its own
        limit, which is the transport's allowance and not counted here."""
        self._in_transport = 0

    def transport_paused_by_peer(self) -> None:
        self._transport_paused = True
        self._update()

    def transport_resumed(self) -> None:
        """The transport drained its buffer completely."""
        self._transport_paused = False
        self._in_transport = 0
        self._update()

    def changes_to_announce(self) -> list[bool]:
        """Every change of writability since the last call, in order.

        None is dropped or merged: a writer that saw the connection unwritable, even if
        it became writable again within the same turn, must still hear that it is
        writable again, or it waits forever.
        """
        changes, self._changes = self._changes, []
        return changes

    def _update(self) -> None:
        pending = self.pending
        if self._writable:
            if pending >= self.high_water:
                self._writable = False
                self._changes.append(False)
        elif pending <= self.low_water:
            self._writable = True
            self._changes.append(True)
