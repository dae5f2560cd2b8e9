"""The renewals on the lease's thread, with a fake clock, a scripted lock and a reactor that
does not run: landed renewals move the deadline on by themselves, a refusal clears it and
fences once the reactor hears of it, and a reactor that has not turned for
critical-analyzer-timeout stops the renewals."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import pytest

from bridge.ha.activation import Activation, HaState
from bridge.ha.client import LeaseThread, Observed
from bridge.ha.fence import Fence, margin
from bridge.ha.lock import Holder, LeaseRow
from bridge.ha.renewer import Heartbeat, Renewer
from tests.ha.test_activation import Clock, Recorder

PING, REAP, QUERY_TIMEOUT, CRITICAL = 1.0, 5.0, 0.5, 4.0
EPOCH = 3
BOUND = 30.0


class Lock:
    """The lease's renew, scripted: renews (the row), refuses (None) or fails (raises)."""

    query_timeout = QUERY_TIMEOUT

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.answer = "renew"
        self.renewals: list[float] = []

    def renew(self, me: Holder, epoch: int, reap: float) -> LeaseRow | None:
        self.renewals.append(self.clock.now)
        if self.answer == "fail":
            raise ConnectionError("the database is gone")
        if self.answer == "refuse":
            return None
        now = round(self.clock.now * 1000)
        return LeaseRow(str(me), epoch, now + round(reap * 1000), now)


class StoppedReactor:
    """A reactor that is not turning: what the threads ask of it waits, in order."""

    def __init__(self) -> None:
        self.waiting: list[tuple[Callable[..., object], tuple[Any, ...]]] = []

    def callFromThread(self, call: Callable[..., object], *args: Any) -> None:
        self.waiting.append((call, args))

    def turn(self) -> None:
        waiting, self.waiting = self.waiting, []
        for call, args in waiting:
            call(*args)

    def asked(self, name: str) -> int:
        return sum(1 for call, _ in self.waiting if getattr(call, "__name__", "") == name)


class Glue:
    """What the node's glue does with the answers (bridge.ctl.ha.HaNode), on the machine."""

    def __init__(self, machine: Activation) -> None:
        self.machine = machine
        self.renewed: list[float] = []

    def renewal_landed(self, renewer: Renewer, observed: Observed, started: float) -> None:
        self.renewed.append(started)
        self.machine.inputs.renewed(started)

    def renewal_refused(self, renewer: Renewer, observed: Observed) -> None:
        self.machine.inputs.lease_lost()

    def renewal_failed(self, renewer: Renewer, error: Exception) -> None:
        self.machine.inputs.renew_failed()


class Node:
    """A node LIVE at epoch 3 since the clock's now, renewing with a stopped reactor."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.lock = Lock(self.clock)
        self.reactor = StoppedReactor()
        fence = Fence(REAP, margin(REAP, PING, QUERY_TIMEOUT), self.clock)
        self.machine = Activation(Recorder(), fence)
        self.glue = Glue(self.machine)
        self.machine.inputs.start()
        acquired = self.clock.now
        self.machine.inputs.acquired(acquired)
        self.machine.inputs.started()
        self.heartbeat = Heartbeat(self.clock)
        self.renewer = Renewer(
            self.lock,  # type: ignore[arg-type]
            Holder("a"),
            EPOCH,
            fence=fence,
            reactor=self.reactor,
            answers=self.glue,
            heartbeat=self.heartbeat,
            ping=PING,
            critical_timeout=CRITICAL,
            acquired=acquired,
            clock=self.clock,
            wall_clock=self.clock,
        )

    @property
    def fence(self) -> Fence:
        return self.machine.fence

    def renew_when_due(self) -> float:
        """The lease's thread: wait for the next renewal (the clock jumps), run it."""
        self.clock.now = self.renewer.due
        started = self.clock.now
        self.renewer.renew()
        return started


def test_landed_renewals_move_the_deadline_on_while_the_reactor_does_not_turn() -> None:
    node = Node()
    for _ in range(3):  # 3 s: the reactor never beats, well within critical-analyzer-timeout
        started = node.renew_when_due()
        assert node.fence.deadline == started + REAP - node.fence.margin
    assert node.fence.valid and node.machine.serving
    assert node.glue.renewed == []  # the reactor heard nothing yet
    assert node.reactor.asked("renewal_landed") == 3
    node.reactor.turn()
    assert node.glue.renewed == node.lock.renewals
    assert node.machine.state is HaState.LIVE


def test_a_slow_reactor_hears_of_a_passed_deadline_after_a_renewal_moved_it() -> None:
    """The watchdog's word comes late: the glue checks the fence, which a renewal that
    landed meanwhile has moved on, so nobody is fenced."""
    node = Node()
    node.clock.now = node.fence.deadline or 0.0  # passed; the reactor is busy
    assert not node.fence.valid
    node.renewer.due = node.clock.now
    node.renew_when_due()
    assert node.fence.valid
    node.reactor.turn()
    if not node.fence.valid:  # the glue's deadline check
        node.machine.inputs.deadline_passed()
    assert node.machine.state is HaState.LIVE


def test_a_refusal_clears_the_deadline_at_once_stops_renewing_and_fences() -> None:
    node = Node()
    node.renew_when_due()
    node.lock.answer = "refuse"
    node.renew_when_due()
    assert node.fence.deadline is None and not node.machine.serving
    assert node.renewer.due == math.inf
    node.reactor.turn()
    assert node.machine.state is HaState.FENCED
    assert node.machine.reason == "the lease is no longer this node's"


def test_a_failed_renewal_leaves_the_deadline_and_the_next_one_is_a_ping_later() -> None:
    node = Node()
    started = node.renew_when_due()
    deadline = node.fence.deadline
    node.lock.answer = "fail"
    failed = node.renew_when_due()
    assert node.fence.deadline == deadline
    assert node.renewer.due == failed + PING
    node.reactor.turn()
    assert node.machine.state is HaState.LIVE
    node.lock.answer = "renew"
    assert node.renew_when_due() == started + 2 * PING
    assert node.fence.deadline == started + 2 * PING + REAP - node.fence.margin


def test_a_reactor_that_does_not_turn_for_the_critical_timeout_stops_the_renewals() -> None:
    node = Node()
    while node.clock.now + PING - node.heartbeat.last <= CRITICAL:
        node.renew_when_due()
    renewed = list(node.lock.renewals)
    deadline = node.fence.deadline
    assert deadline is not None
    while node.fence.valid:
        node.renew_when_due()  # asks for a beat, renews nothing
    assert node.lock.renewals == renewed and node.fence.deadline == deadline
    assert node.reactor.asked("beat") > len(renewed)  # the node fences at its deadline
    node.reactor.turn()  # the reactor turns again: the beats it was asked for land
    node.renew_when_due()
    assert len(node.lock.renewals) == len(renewed) + 1


def test_a_renewal_that_lands_after_the_fence_was_cleared_sets_no_deadline() -> None:
    node = Node()
    node.machine.inputs.lease_lost()  # a store write found a newer epoch, say
    assert node.fence.deadline is None
    node.renew_when_due()
    assert node.fence.deadline is None
    assert node.renewer.due == math.inf
    assert node.reactor.asked("renewal_landed") == 0


class _Scheduled:
    """A renewer for the thread: due at once, once."""

    def __init__(self, ran: threading.Event) -> None:
        self.due = 0.0
        self.ran = ran

    def renew(self) -> None:
        self.due = math.inf
        self.ran.set()

    def stop(self) -> None:
        self.due = math.inf


def test_the_lease_thread_renews_when_due_and_runs_calls_in_order() -> None:
    thread = LeaseThread(clock=lambda: 1.0)
    try:
        order: list[int] = []
        done = threading.Event()
        for each in range(3):
            thread.call(lambda each=each: order.append(each))  # type: ignore[misc]
        thread.call(done.set)
        assert done.wait(BOUND)
        assert order == [0, 1, 2]
        renewed = threading.Event()
        thread.renew_with(_Scheduled(renewed))  # type: ignore[arg-type]
        assert renewed.wait(BOUND)
    finally:
        thread.stop()


@pytest.mark.parametrize("ping", [0.5, 1.0])
def test_the_first_renewal_is_a_ping_after_the_acquire(ping: float) -> None:
    clock = Clock()
    fence = Fence(REAP, margin(REAP, ping, QUERY_TIMEOUT), clock)
    renewer = Renewer(
        Lock(clock),  # type: ignore[arg-type]
        Holder("a"),
        EPOCH,
        fence=fence,
        reactor=StoppedReactor(),
        answers=Glue(Activation(Recorder(), fence)),
        heartbeat=Heartbeat(clock),
        ping=ping,
        critical_timeout=CRITICAL,
        acquired=clock.now - 0.2,
        clock=clock,
    )
    assert renewer.due == clock.now - 0.2 + ping
