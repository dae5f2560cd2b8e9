"""The live node's self-fencing deadline, on a monotonic clock.

At each successful acquire or renew the deadline becomes *the start of that statement* +
``reap`` - ``margin``. The database read its clock after the statement started, so the
lease expires (by the database's clock) no sooner than ``reap`` after that start: a node
that stops serving at the deadline has stopped ``margin`` before any backup can acquire,
whatever the wall clocks say. The margin is half the slack between a healthy renewal's
latest answer (``ping`` + ``query_timeout`` after the previous start) and ``reap``, so a
renewal that is merely slow never fences, and one that fails leaves time to stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs


def margin(reap: float, ping: float, query_timeout: float) -> float:
    """Seconds between the local deadline and the earliest expiry of the lease (positive
    whenever ``ping < reap / 2`` and ``query_timeout < ping``, as ``[ha]`` requires)."""
    return (reap - ping - query_timeout) / 2


@attrs.define
class Fence:
    """The deadline by which the node must have stopped serving unless it renewed."""

    reap: float
    margin: float
    clock: Callable[[], float] = time.monotonic
    deadline: float | None = None
    """None: the node holds no lease it may serve under."""

    def renewed(self, started: float) -> None:
        """An acquire or renew that began at ``started`` (by ``clock``) succeeded."""
        self.deadline = started + self.reap - self.margin

    def clear(self) -> None:
        self.deadline = None

    def remaining(self) -> float:
        """Seconds left before the deadline (0 when passed or unset)."""
        if self.deadline is None:
            return 0.0
        return max(0.0, self.deadline - self.clock())

    @property
    def valid(self) -> bool:
        return self.deadline is not None and self.clock() < self.deadline
