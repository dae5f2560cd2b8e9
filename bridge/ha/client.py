"""The live lock's calls from the reactor: each runs on the lock's own thread and is
bounded on the client side too, by ``query_timeout`` (a connection that hangs, or a
statement the server has not cancelled yet, fails the call in time; its late result is
dropped).

The same thread renews the lock while the node holds it (:mod:`bridge.ha.renewer`): it
runs the calls in the order asked and, between them, a renewal each time one is due, so
that the renewals never wait for the reactor. The lock is called from that thread alone.

Each answer carries the node's clock skew against the database's, measured around the
statement: shown in status, never used to decide who holds the lease.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, Protocol, TypeVar

import attrs
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from bridge.ha.lock import (
    Holder,
    ILiveLock,
    IReleaseNotices,
    IReleaseNotifier,
    IReplicaLock,
    LeaseRow,
)

_T = TypeVar("_T")

log = Logger()


@attrs.frozen
class Observed:
    """One statement's lease row (None: the statement changed nothing) and the node's clock
    minus the database's at the time of it, in milliseconds."""

    row: LeaseRow | None
    skew: int


def measured(call: Callable[[], LeaseRow | None], wall_clock: Callable[[], float]) -> Observed:
    """``call``'s row, with the skew measured around it (``wall_clock``: epoch seconds)."""
    before = wall_clock()
    row = call()
    after = wall_clock()
    skew = round((before + after) * 500) - row.now if row is not None else 0
    return Observed(row, skew)


class Renewal(Protocol):
    """What the lease's thread runs when due (``bridge.ha.renewer.Renewer``)."""

    due: float
    """When ``renew`` is next due, on the thread's monotonic clock (inf: not now)."""

    def renew(self) -> None:
        """Renew the lease once, on the lease's thread."""

    def stop(self) -> None:
        """Renew no more."""


class LeaseThread:
    """The lock's one thread: the calls handed to it, in order, and the renewals of the
    :class:`Renewal` set, each when due (before any call waiting). A daemon thread: a
    statement stuck past its timeouts must not keep the process from ending."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._renewer: Renewal | None = None
        self._thread = threading.Thread(target=self._run, name="txbridge-lease", daemon=True)
        self._thread.start()

    def call(self, job: Callable[[], None]) -> None:
        self._calls.put(job)

    def renew_with(self, renewer: Renewal | None) -> None:
        """Renew with ``renewer`` from now on (None: renew no more); a renewal in progress
        still answers."""
        old, self._renewer = self._renewer, renewer
        if old is not None:
            old.stop()
        self._calls.put(_wake)

    def stop(self) -> None:
        """End the thread once the calls asked before are done."""
        self.renew_with(None)
        self._calls.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            renewer = self._renewer
            wait = None
            if renewer is not None and renewer.due != math.inf:
                wait = renewer.due - self._clock()
                if wait <= 0:
                    try:
                        renewer.renew()
                    except Exception:  # a bug must not end the lease's thread
                        log.failure("a renewal of the lease failed")
                        renewer.stop()
                    continue
            try:
                job = self._calls.get(timeout=wait)
            except queue.Empty:
                continue
            if job is None:
                return
            job()


def _wake() -> None:
    """Nothing: wakes the thread to see a new renewer."""


class LeaseCallTimeout(defer.TimeoutError):
    """A call to the lock had no answer within ``query_timeout``: still running on the
    lease's thread, or still waiting there behind an earlier call."""


@attrs.define
class _Timing:
    """When a call was asked and, once the lease's thread takes it up, started (the
    ``monotonic`` clock), to say why a call that timed out did, and how late it ended."""

    asked: float
    started: float | None = None


def _timed_out(timing: _Timing, query_timeout: float, now: float) -> LeaseCallTimeout:
    """The error of a call with no answer after ``query_timeout``, saying where it is."""
    limit = f"no answer within lease-query-timeout ({round(query_timeout * 1000)} ms)"
    if timing.started is None:
        return LeaseCallTimeout(
            f"{limit}: the call is still waiting for the lease's thread, busy with an earlier call"
        )
    return LeaseCallTimeout(
        f"{limit}: the database has not answered the call after {now - timing.started:.3f} s"
        + (
            f" (it waited {timing.started - timing.asked:.3f} s for the lease's thread)"
            if timing.started > timing.asked + 0.001
            else ""
        )
    )


class LeaseClient:
    """An :class:`ILiveLock` on one thread of its own; every call gives a Deferred that fails
    with :class:`LeaseCallTimeout` (a ``defer.TimeoutError``) after ``query_timeout``; an
    answer that comes later is dropped, and logged with how long it took.

    ``wall_clock`` (epoch seconds) is only for measuring skew."""

    def __init__(
        self,
        lock: ILiveLock,
        reactor: Any,
        *,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lock = lock
        self._reactor = reactor
        self._threads = IReactorFromThreads(reactor)
        self._clock = IReactorTime(reactor)
        self.wall_clock = wall_clock
        self._monotonic = monotonic
        self.thread = LeaseThread(monotonic)

    def _unbounded(self, call: Callable[[], _T], timing: _Timing | None = None) -> Deferred[_T]:
        result: Deferred[_T] = Deferred()
        clock = self._monotonic

        def job() -> None:
            if timing is not None:
                timing.started = clock()
            try:
                value: _T | Failure = call()
            except BaseException:
                value = Failure()
            self._threads.callFromThread(self._answered, result, value, timing, clock())

        self.thread.call(job)
        return result

    def _answered(
        self, result: Deferred[_T], value: _T | Failure, timing: _Timing | None, ended: float
    ) -> None:
        """On the reactor: a call's answer, or, for one that timed out already, a warning
        of how late it came (a database slower than ``query_timeout`` shows here)."""
        if not result.called:
            if isinstance(value, Failure):
                result.errback(value)
            else:
                result.callback(value)
            return
        if timing is not None and timing.started is not None:
            log.warn(
                "a call to the lease's database {outcome} {took:.3f} s after it was asked "
                "({waited:.3f} s of that waiting for the lease's thread), past "
                "lease-query-timeout ({limit} ms): dropped",
                outcome=(
                    f"failed ({value.getErrorMessage()})"
                    if isinstance(value, Failure)
                    else "answered"
                ),
                took=ended - timing.asked,
                waited=timing.started - timing.asked,
                limit=round(self.lock.query_timeout * 1000),
            )

    def _run(self, call: Callable[[], _T]) -> Deferred[_T]:
        timing = _Timing(self._monotonic())
        result = self._unbounded(call, timing)
        limit = self.lock.query_timeout

        def expired(_: object, __: float) -> NoReturn:
            raise _timed_out(timing, limit, self._monotonic())

        result.addTimeout(limit, self._clock, onTimeoutCancel=expired)
        return result

    def _observed(self, call: Callable[[], LeaseRow | None]) -> Deferred[Observed]:
        return self._run(lambda: measured(call, self.wall_clock))

    def acquire(self, me: Holder, reap: float) -> Deferred[Observed]:
        return self._observed(lambda: self.lock.acquire(me, reap))

    def renew_with(self, renewer: Renewal | None) -> None:
        """Renew on the lock's thread with ``renewer`` (None: stop renewing)."""
        self.thread.renew_with(renewer)

    def mark_replica(self, me: Holder, epoch: int, replica: str) -> Deferred[Observed]:
        """With replication: name the backup in sync ("" for none); see ``IReplicaLock``."""
        lock = self.lock
        assert IReplicaLock.providedBy(lock), "replication keeps its lease in PostgreSQL"
        return self._observed(lambda: lock.mark_replica(me, epoch, replica))

    @property
    def notifies(self) -> bool:
        """Whether the lock tells its backups of a release (``listen``)."""
        return IReleaseNotifier.providedBy(self.lock)

    def listen(self) -> Deferred[IReleaseNotices]:
        """Start listening for the lock's releases; see ``IReleaseNotifier``."""
        lock = self.lock
        assert IReleaseNotifier.providedBy(lock), "this lock sends no release notices"
        return self._run(lock.listen)

    def waiting(self, me: Holder | None, window: float) -> Deferred[tuple[str, ...]]:
        return self._run(lambda: self.lock.waiting(me, window))

    def read(self) -> Deferred[Observed]:
        return self._observed(self.lock.read)

    def release(self, me: Holder, epoch: int) -> Deferred[Observed]:
        return self._observed(lambda: self.lock.release(me, epoch))

    def close(self) -> Deferred[None]:
        """Close the connection on the lease's thread, then end the thread: after the call
        in progress, if any, which the server's and libpq's timeouts end."""
        self.thread.renew_with(None)
        closing = self._unbounded(self.lock.close)
        closing.addCallback(lambda _: self.thread.stop())
        return closing
