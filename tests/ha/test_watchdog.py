"""The watchdog fires once per deadline, on the reactor's thread, on the monotonic clock;
a renewal that moves the deadline on postpones it."""

from __future__ import annotations

import threading
import time

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from bridge.ha.fence import Fence
from bridge.ha.watchdog import Watchdog

BOUND = 30.0


@pytest_twisted.ensureDeferred
async def test_the_deadline_fires_once_on_the_reactor_thread_and_a_renewal_postpones_it():
    fence = Fence(reap=0.4, margin=0.1)
    fired: list[tuple[float, bool]] = []
    waiter: Deferred[None] = Deferred()

    def passed() -> None:
        fired.append((time.monotonic(), threading.current_thread() is threading.main_thread()))
        if not waiter.called:
            waiter.callback(None)

    watchdog = Watchdog(fence, reactor, passed)
    watchdog.start()
    try:
        first = time.monotonic()
        fence.renewed(first)
        watchdog.rearm()
        fence.renewed(first + 0.2)  # a renewal that began 0.2 s later: deadline + 0.2
        watchdog.rearm()
        await waiter.addTimeout(BOUND, reactor)
        [(when, on_reactor)] = fired
        assert on_reactor
        assert when >= first + 0.2 + 0.4 - 0.1
        assert not fence.valid
    finally:
        watchdog.stop()
    assert len(fired) == 1
