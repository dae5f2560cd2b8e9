"""Tells the reactor when the fence's deadline has passed, timed by a thread of its own on
the fence's monotonic clock.

The reactor's timers follow the wall clock (``reactor.seconds()`` is ``time.time()``): a
wall clock stepped back by a minute would hold a ``callLater`` at the deadline, and the
renewals with it, for that minute while the lease expires in the database. A
``threading.Condition`` wait is timed on the monotonic clock, so the deadline fires on
time whatever the wall clock does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from twisted.internet.interfaces import IReactorFromThreads

from bridge.ha.fence import Fence


class Watchdog:
    """Calls ``passed`` on the reactor's thread once per deadline the fence sets, when it
    passes. :meth:`rearm` once a deadline is set; one moved on later (by the lease's
    thread, as a renewal lands) is read again when the earlier one comes."""

    def __init__(self, fence: Fence, reactor: IReactorFromThreads, passed: Callable[[], None]):
        self._fence = fence
        self._reactor = reactor
        self._passed = passed
        self._changed = threading.Condition()
        self._stopped = False
        self._fired_for: float | None = None
        self._thread = threading.Thread(target=self._run, name="txbridge-ha-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def rearm(self) -> None:
        with self._changed:
            self._changed.notify()

    def stop(self) -> None:
        """End the thread (it wakes at once to see it)."""
        with self._changed:
            self._stopped = True
            self._changed.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        with self._changed:
            while not self._stopped:
                deadline = self._fence.deadline
                if deadline is None or deadline == self._fired_for:
                    self._changed.wait()
                    continue
                left = deadline - self._fence.clock()
                if left > 0:
                    self._changed.wait(left)
                    continue
                self._fired_for = deadline
                self._reactor.callFromThread(self._passed)
