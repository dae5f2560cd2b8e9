"""The live node's self-fencing deadline, on a monotonic clock.

At each successful acquire or renew the deadline becomes *the start of that statement* +
``reap`` - ``margin``. The database read its clock after the statement started, so the
lease expires (by the database's clock) no sooner than ``reap`` after that start: a node
that stops serving at the deadline has stopped ``margin`` before any backup can acquire,
whatever the wall clocks say. The margin is half the slack between a healthy renewal's
latest answer (``ping`` + ``query_timeout`` after the previous start) and ``reap``, so a
renewal that is merely slow never fences, and one that fails leaves time to stop.

The deadline is set on the reactor's thread (an acquire, a fencing) and moved on by the
lease's thread as each renewal lands (:mod:`bridge.ha.renewer`), so its changes hold a
lock: a renewal that lands after the node was fenced never sets a deadline again.
"""

from __future__ import annotations

import threading
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
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False, eq=False)

    def renewed(self, started: float) -> None:
        """An acquire (or renew) that began at ``started`` (by ``clock``) succeeded."""
        with self._lock:
            self.deadline = started + self.reap - self.margin

    def extend(self, started: float) -> bool:
        """A renewal that began at ``started`` landed: move the deadline on (never back).
        False, and nothing changes, once the fence was cleared: the node stopped serving
        under that lease, and only a new acquire sets a deadline."""
        with self._lock:
            if self.deadline is None:
                return False
            self.deadline = max(self.deadline, started + self.reap - self.margin)
            return True

    def clear(self) -> None:
        with self._lock:
            self.deadline = None

    def remaining(self) -> float:
        """Seconds left before the deadline (0 when passed or unset)."""
        deadline = self.deadline
        if deadline is None:
            return 0.0
        return max(0.0, deadline - self.clock())

    @property
    def valid(self) -> bool:
        deadline = self.deadline
        return deadline is not None and self.clock() < deadline
