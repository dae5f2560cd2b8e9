"""The live lock's calls from the reactor: each runs on the lock's own thread and is
bounded on the client side too, by ``query_timeout`` (a connection that hangs, or a
statement the server has not cancelled yet, fails the call in time; its late result is
dropped).

Each answer carries the node's clock skew against the database's, measured around the
statement: shown in status, never used to decide who holds the lease.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads, IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from bridge.ha.lease import LeaseTable
from bridge.ha.lock import Holder, ILiveLock, LeaseRow

_T = TypeVar("_T")


class _DaemonThread(threading.Thread):
    """A statement stuck past its timeouts must not keep the process from ending."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.daemon = True


class _LeasePool(ThreadPool):
    threadFactory = _DaemonThread


@attrs.frozen
class Observed:
    """One statement's lease row (None: the statement changed nothing) and the node's clock
    minus the database's at the time of it, in milliseconds."""

    row: LeaseRow | None
    skew: int


class LeaseClient:
    """An :class:`ILiveLock` on one thread of its own; every call gives a Deferred that fails
    with ``TimeoutError`` (``defer.TimeoutError``) after ``query_timeout``.

    ``wall_clock`` (epoch seconds) is only for measuring skew."""

    def __init__(
        self,
        lock: ILiveLock,
        reactor: Any,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.lock = lock
        self._reactor = reactor
        self._threads = IReactorFromThreads(reactor)
        self._clock = IReactorTime(reactor)
        self._wall_clock = wall_clock
        self._pool = _LeasePool(1, 1, name="txbridge-lease")
        self._pool.start()

    def _run(self, call: Callable[[], _T]) -> Deferred[_T]:
        result = deferToThreadPool(self._threads, self._pool, call)
        result.addTimeout(self.lock.query_timeout, self._clock)
        return result

    def _observed(self, call: Callable[[], LeaseRow | None]) -> Deferred[Observed]:
        def measured() -> Observed:
            before = self._wall_clock()
            row = call()
            after = self._wall_clock()
            skew = round((before + after) * 500) - row.now if row is not None else 0
            return Observed(row, skew)

        return self._run(measured)

    def acquire(self, me: Holder, reap: float) -> Deferred[Observed]:
        return self._observed(lambda: self.lock.acquire(me, reap))

    def renew(self, me: Holder, epoch: int, reap: float) -> Deferred[Observed]:
        return self._observed(lambda: self.lock.renew(me, epoch, reap))

    def mark_replica(self, me: Holder, epoch: int, replica: str) -> Deferred[Observed]:
        """With replication: name the backup in sync ("" for none); see ``LeaseTable``."""
        lock = self.lock
        assert isinstance(lock, LeaseTable), "replication keeps its lease in PostgreSQL"
        return self._observed(lambda: lock.mark_replica(me, epoch, replica))

    def waiting(self, me: Holder | None, window: float) -> Deferred[tuple[str, ...]]:
        return self._run(lambda: self.lock.waiting(me, window))

    def read(self) -> Deferred[Observed]:
        return self._observed(self.lock.read)

    def release(self, me: Holder, epoch: int) -> Deferred[Observed]:
        return self._observed(lambda: self.lock.release(me, epoch))

    def close(self) -> Deferred[None]:
        """Close the connection on the lease's thread, then end the thread: after the call
        in progress, if any, which the server's and libpq's timeouts end."""
        closing = deferToThreadPool(self._threads, self._pool, self.lock.close)
        closing.addCallback(lambda _: self._pool.stop())
        return closing
