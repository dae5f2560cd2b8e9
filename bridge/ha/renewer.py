"""The live node's renewals of the live lock, on the lease's own thread, whatever the
reactor is doing.

A node loading a large store, or busy under load, may hold its reactor for seconds. Its
renewals must not wait for it: the lease's thread (:mod:`bridge.ha.client`) starts one
every ``lease-ping-time``, counted from each renewal's start on the monotonic clock, and
as one lands it moves the fence's deadline on itself (:meth:`Fence.extend`). The reactor
only hears of each answer (``callFromThread``), as the activation machine's input:
renewed, refused, failed. A refusal clears the deadline at once, and no renewal follows.

The reverse must be bounded too: a node whose reactor hangs for good, while its thread
renews, would keep the lease and serve nobody. So each renewal first asks the reactor for
a heartbeat (``callFromThread``: it runs only when the reactor turns), and while the last
one answered is older than ``critical-analyzer-timeout`` (Artemis's critical analyzer)
the thread renews nothing: the deadline passes, the lease expires, a backup takes over,
and the node's own writes are refused by the fencing token.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol

from twisted.internet.interfaces import IReactorFromThreads
from twisted.logger import Logger

from bridge.ha.client import Observed, measured
from bridge.ha.fence import Fence
from bridge.ha.lock import Holder, ILiveLock

log = Logger()


class Heartbeat:
    """When the reactor last turned: :meth:`beat` runs on the reactor's thread, asked
    for by the renewer; :meth:`age` is read on the lease's thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.last = clock()

    def beat(self) -> None:
        self.last = self._clock()

    def age(self) -> float:
        return self._clock() - self.last


class RenewalAnswers(Protocol):
    """What the reactor hears of each renewal (the node's glue, which feeds the machine)."""

    def renewal_landed(self, renewer: Renewer, observed: Observed, started: float) -> None: ...
    def renewal_refused(self, renewer: Renewer, observed: Observed) -> None: ...
    def renewal_failed(self, renewer: Renewer, error: Exception) -> None: ...


class Renewer:
    """One epoch's renewals. :meth:`renew` runs on the lease's thread once :attr:`due`
    (by ``clock``) has come; everything else it touches is thread-safe or the reactor's
    (through ``callFromThread``)."""

    def __init__(
        self,
        lock: ILiveLock,
        holder: Holder,
        epoch: int,
        *,
        fence: Fence,
        reactor: IReactorFromThreads,
        answers: RenewalAnswers,
        heartbeat: Heartbeat,
        ping: float,
        critical_timeout: float,
        acquired: float,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``acquired``: when the acquire of ``epoch`` began; the first renewal is due a
        ping after it."""
        self._lock = lock
        self._holder = holder
        self.epoch = epoch
        self._fence = fence
        self._reactor = reactor
        self._answers = answers
        self.heartbeat = heartbeat
        self._ping = ping
        self._critical_timeout = critical_timeout
        self._clock = clock
        self._wall_clock = wall_clock
        self.due = acquired + ping
        """When the next renewal is to start (``inf``: none will)."""
        self._stalled = False

    def stop(self) -> None:
        """No more renewals (any thread): one in progress still answers."""
        self.due = math.inf

    def renew(self) -> None:
        """One renewal, on the lease's thread."""
        started = self._clock()
        self.due = started + self._ping
        age = self.heartbeat.age()
        self._reactor.callFromThread(self.heartbeat.beat)
        if age > self._critical_timeout:
            if not self._stalled:
                self._stalled = True
                log.critical(
                    "lease renewals stopped: the reactor has not turned for {age:.1f} s "
                    "(critical-analyzer-timeout {limit} s); the node fences at its deadline",
                    age=age,
                    limit=self._critical_timeout,
                )
            return
        self._stalled = False
        reap = self._fence.reap
        try:
            observed = measured(
                lambda: self._lock.renew(self._holder, self.epoch, reap), self._wall_clock
            )
        except Exception as error:
            # the deadline stands: the next renewal may still land before it
            self._reactor.callFromThread(self._answers.renewal_failed, self, error)
            return
        if observed.row is None:
            self.stop()
            self._fence.clear()  # fail closed now, whenever the reactor hears of it
            self._reactor.callFromThread(self._answers.renewal_refused, self, observed)
            return
        if not self._fence.extend(started):
            self.stop()  # the node stopped serving under this epoch meanwhile
            return
        self._reactor.callFromThread(self._answers.renewal_landed, self, observed, started)
