"""Bytes a connection holds in frames that are not whole yet, sans-IO.

A peer that announces a large frame and sends part of it makes the node hold those bytes
until the rest comes. Three bounds keep that in check:

- before login, a connection's frames may be at most ``prelogin_size`` bytes (a CONNECT
  frame's worth), so nobody who has not logged in costs more than that;
- after login, each connection may hold ``prelogin_size`` bytes of its own, and anything
  beyond it is drawn from a node-wide :class:`PartialFrameBudget` (as ``global-max-size``
  bounds queued messages). A connection that would take more than is left is closed,
  naming the budget: the total never exceeds it;
- a frame must arrive whole within ``timeout`` seconds of its first byte, whatever
  heart-beats the peer negotiated; time in which this side chose not to read does not
  count.
"""

from __future__ import annotations

import attrs

DEFAULT_PRELOGIN_SIZE = 64 * 1024
DEFAULT_FRAME_TIMEOUT = 30.0
DEFAULT_BUDGET = 64 * 1024 * 1024


class PartialFrameBudget:
    """The bytes all connections together may hold in partial frames beyond each one's
    own allowance (None: no limit)."""

    def __init__(self, limit: int | None = DEFAULT_BUDGET) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"the partial-frame budget must be 0 or more, got {limit}")
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        """Draw ``size`` bytes; False (and nothing drawn) if that would exceed the limit."""
        if self.limit is not None and self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used -= size


@attrs.frozen
class PartialFrameLimits:
    """How an acceptor bounds partial frames (see the module's docstring)."""

    prelogin_size: int = DEFAULT_PRELOGIN_SIZE
    timeout: float | None = DEFAULT_FRAME_TIMEOUT
    budget: PartialFrameBudget | None = attrs.field(default=None, eq=False)

    def __attrs_post_init__(self) -> None:
        if self.prelogin_size < 1:
            raise ValueError(f"prelogin_size must be positive, got {self.prelogin_size}")
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be positive or None, got {self.timeout}")


class BudgetExhausted(Exception):
    """A connection would hold more than the node-wide partial-frame budget has left."""


class HeldBytes:
    """One connection's partial frame: how many bytes it holds, what it drew from the
    budget for them, and since when it has been holding some."""

    def __init__(self, limits: PartialFrameLimits) -> None:
        self._limits = limits
        self._drawn = 0
        self._since: float | None = None

    @property
    def drawn(self) -> int:
        """Bytes this connection holds against the node-wide budget."""
        return self._drawn

    def holding(self, size: int, now: float) -> None:
        """The connection now holds ``size`` bytes of frames not yet whole. Raises
        BudgetExhausted (having given back what it drew) if the budget cannot cover them."""
        if not size:
            self._since = None
            self.release()
            return
        if self._since is None:
            self._since = now
        need = max(0, size - self._limits.prelogin_size)
        budget = self._limits.budget
        if budget is None or need == self._drawn:
            return
        if need < self._drawn:
            budget.give(self._drawn - need)
        elif not budget.take(need - self._drawn):
            self.release()
            raise BudgetExhausted(
                f"{size} bytes held in a partial frame would exceed the node's "
                f"partial-frame-budget of {budget.limit} bytes ({budget.used} in use)"
            )
        self._drawn = need

    def not_reading(self, now: float) -> None:
        """This side chose not to read: the frame's time restarts (it is not the peer's
        slowness)."""
        if self._since is not None:
            self._since = now

    def overdue(self, now: float) -> str | None:
        """Why the connection must close if its frame is older than the timeout, else
        None."""
        timeout = self._limits.timeout
        if self._since is None or timeout is None or now - self._since <= timeout:
            return None
        return (
            f"a frame begun {now - self._since:.1f}s ago is still not whole "
            f"(frame-timeout {timeout:g}s)"
        )

    def release(self) -> None:
        """Give back what was drawn (the bytes are gone: delivered, or dropped)."""
        if self._drawn and self._limits.budget is not None:
            self._limits.budget.give(self._drawn)
        self._drawn = 0
