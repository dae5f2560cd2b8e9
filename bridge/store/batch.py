"""Group commit: the operations of a reactor turn share one transaction, batches in order.

``GroupCommit`` knows nothing of SQLite. It gathers submitted items and hands them, as one
batch, to ``run_batch`` (which commits them somewhere, off the reactor thread) at the end of
the reactor turn in which they arrived: the first item of a turn schedules
``callLater(0, ...)``, which runs after everything else the turn does. Only one batch runs
at a time; what arrives meanwhile waits and becomes the next batch, so under load batches
grow and each commit (one disk sync) confirms more items. Each item's Deferred fires after
its batch finished, in submission order. ``submit_then`` takes a plain callable instead of
making a Deferred, for the hot path: the batch calls it in the same order, with None or the
item's ``Failure``.

``run_batch`` returns a Deferred of one outcome per item: None (done), the exception that
item alone failed with (the rest of its batch is unaffected), or ``LATER``: the item is
not done with its batch, and whoever runs the batches tells its ``then`` itself (the
store's adds held for core bridges). If the Deferred fails, the whole batch failed and
every item of it fails with that error.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Final, Generic, TypeVar

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

T = TypeVar("T")

log = Logger()


class _Later(enum.Enum):
    LATER = "later"


LATER: Final = _Later.LATER
"""An item's outcome when its ``then`` is told later, by ``run_batch``'s owner."""

Outcome = BaseException | _Later | None
Outcomes = Sequence[Outcome]
Then = Callable[[Failure | None], object]
"""Told how an item of ``submit_then`` ended: None once its batch committed, else why not."""

_Batch = list[tuple[T, Deferred[None] | None, Then | None]]


@attrs.define
class GroupCommit(Generic[T]):
    """Batches items per reactor turn and runs one batch at a time, strictly in order."""

    clock: IReactorTime
    run_batch: Callable[[list[T]], Deferred[Outcomes]]
    commits: int = attrs.field(default=0, init=False)
    """Batches that committed."""
    committed_items: int = attrs.field(default=0, init=False)
    """Items in the batches that committed (with ``commits``, the mean batch size)."""
    failed_batches: int = attrs.field(default=0, init=False)
    _next: _Batch[T] = attrs.field(factory=list, init=False)
    _turn_end: IDelayedCall | None = attrs.field(default=None, init=False)
    _running: bool = attrs.field(default=False, init=False)
    _idle_waiters: list[Deferred[None]] = attrs.field(factory=list, init=False)

    def submit(self, item: T) -> Deferred[None]:
        """Add ``item`` to the next batch; the Deferred fires once that batch finished."""
        done: Deferred[None] = Deferred()
        self._next.append((item, done, None))
        self._schedule()
        return done

    def submit_then(self, item: T, then: Then) -> None:
        """Add ``item`` to the next batch; ``then`` is called once that batch finished."""
        self._next.append((item, None, then))
        if self._turn_end is None and not self._running:  # (``_schedule``, written out)
            self._turn_end = self.clock.callLater(0, self._end_of_turn)

    @property
    def idle(self) -> bool:
        """Nothing waits and nothing runs."""
        return not self._running and not self._next

    def when_idle(self) -> Deferred[None]:
        """Fire once every item submitted so far has finished (at once if idle)."""
        waiter: Deferred[None] = Deferred()
        if self.idle:
            waiter.callback(None)
        else:
            self._idle_waiters.append(waiter)
        return waiter

    def _schedule(self) -> None:
        if self._turn_end is None and not self._running and self._next:
            self._turn_end = self.clock.callLater(0, self._end_of_turn)

    def _end_of_turn(self) -> None:
        self._turn_end = None
        batch, self._next = self._next, []
        self._running = True
        self.run_batch([item for item, _, _ in batch]).addCallbacks(
            self._finished, self._failed, callbackArgs=(batch,), errbackArgs=(batch,)
        )

    def _finished(self, outcomes: Outcomes, batch: _Batch[T]) -> None:
        self.commits += 1
        self.committed_items += len(batch)
        self._running = False
        self._schedule()
        for (_, done, then), outcome in zip(batch, outcomes, strict=True):
            if then is not None:
                if outcome is LATER:
                    continue
                try:  # (``tell``, written out: the loop runs once per item of every batch)
                    then(None if outcome is None else Failure(outcome))
                except Exception:
                    log.failure("a group commit's callback failed")
            elif done is not None:
                assert outcome is not LATER  # (only an item with a ``then`` waits so)
                if outcome is None:
                    done.callback(None)
                else:
                    done.errback(Failure(outcome))
        self._wake_idle_waiters()

    def _failed(self, failure: Failure, batch: _Batch[T]) -> None:
        self.failed_batches += 1
        self._running = False
        self._schedule()
        for _, done, then in batch:
            if then is not None:
                tell(then, failure)
            elif done is not None:
                done.errback(failure)
        self._wake_idle_waiters()

    def _wake_idle_waiters(self) -> None:
        if self.idle and self._idle_waiters:
            waiters, self._idle_waiters = self._idle_waiters, []
            for waiter in waiters:
                waiter.callback(None)


def tell(then: Then, outcome: Failure | None) -> None:
    """Tell ``then``; what it raises is logged, and the batch's other items are still told."""
    try:
        then(outcome)
    except Exception:
        log.failure("a group commit's callback failed")
