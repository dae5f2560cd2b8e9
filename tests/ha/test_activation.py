"""The activation machine against a model of the lease row and of time: whatever the order
of answers, delays, failures and other nodes, the node never serves without holding the
lease, and it has stopped serving before any other node could acquire it.

Renewals land on the lease's thread, which moves the deadline on (or clears it at a
refusal) at once; the reactor hears of them, and of a passed deadline, only when it turns
(``reactor_turns``), however late: a slow reactor never fences a node whose renewals
landed, and a deadline that passed is never one it may serve under."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from zope.interface import implementer
from zope.interface.verify import verifyObject

from bridge.ha.activation import Activation, HaState, IActivationActions
from bridge.ha.fence import Fence, margin

PING, REAP, QUERY_TIMEOUT = 1.0, 5.0, 0.5


@implementer(IActivationActions)
class Recorder:
    """The glue's side: remembers which answers the machine waits for."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def acquire(self) -> None:
        self.calls.append("acquire")

    def activate(self) -> None:
        self.calls.append("activate")

    def deactivate(self, reason: str) -> None:
        self.calls.append("deactivate")

    def release(self) -> None:
        self.calls.append("release")

    def take(self, call: str) -> bool:
        if call in self.calls:
            self.calls.remove(call)
            return True
        return False


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


delays = st.floats(min_value=0, max_value=QUERY_TIMEOUT)


class ActivationMachine(RuleBasedStateMachine):
    """One node's machine; the lease row is modelled with the same clock (the database's
    clock and the node's monotonic clock run at the same rate; their offset never enters)."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.actions = Recorder()
        self.machine = Activation(
            self.actions, Fence(REAP, margin(REAP, PING, QUERY_TIMEOUT), self.clock)
        )
        self.holder: str | None = None
        self.expires = 0.0
        self.reactor: list[tuple[str, float]] = []
        """What the reactor has still to hear, in order."""
        self.machine.inputs.start()

    # -- time, with the glue's deadline timer ------------------------------------------
    def _pass(self, seconds: float) -> None:
        end = self.clock.now + seconds
        deadline = self.machine.fence.deadline
        if deadline is not None and self.clock.now <= deadline <= end:
            self.clock.now = deadline
            self.reactor.append(("deadline", 0.0))  # the watchdog's callFromThread
        self.clock.now = max(self.clock.now, end)

    @rule()
    def reactor_turns(self) -> None:
        """The reactor hears what the threads told it, as the node's glue does."""
        heard, self.reactor = self.reactor, []
        for what, started in heard:
            if what == "deadline":
                if not self.machine.fence.valid:
                    self.machine.inputs.deadline_passed()
            elif what == "renewed":
                self.machine.inputs.renewed(started)
            elif what == "refused":
                self.machine.inputs.lease_lost()
            else:
                self.machine.inputs.renew_failed()

    @rule(seconds=st.floats(min_value=0, max_value=3 * REAP))
    def time_passes(self, seconds: float) -> None:
        self._pass(seconds)

    # -- the lease row -----------------------------------------------------------------
    def _free(self) -> bool:
        return self.holder is None or self.expires < self.clock.now

    @rule()
    def another_node_acquires(self) -> None:
        if self._free():
            assert not self.machine.fence.valid and not self.machine.serving
            if not self.reactor:
                assert self.machine.state not in (HaState.ACTIVATING, HaState.LIVE)
            self.holder, self.expires = "other", self.clock.now + REAP

    @rule()
    def the_other_node_releases(self) -> None:
        if self.holder == "other":
            self.holder, self.expires = None, 0.0

    @precondition(lambda self: "acquire" in self.actions.calls)
    @rule(before=delays, after=delays)
    def acquire_answers(self, before: float, after: float) -> None:
        self.actions.take("acquire")
        started = self.clock.now
        self._pass(before)
        if self._free() or self.holder == "me":
            self.holder, self.expires = "me", self.clock.now + REAP
            self._pass(after)
            self.machine.inputs.acquired(started)
        else:
            self._pass(after)
            self.machine.inputs.not_acquired()

    @precondition(lambda self: self.machine.state in (HaState.ACTIVATING, HaState.LIVE))
    @rule(before=delays, after=delays)
    def renew_answers(self, before: float, after: float) -> None:
        """A renewal on the lease's thread (bridge.ha.renewer), as the node's state was
        last heard by the reactor: it renews while ACTIVATING or LIVE."""
        started = self.clock.now
        self._pass(before)
        if self.holder == "me" and self.expires >= self.clock.now:
            self.expires = self.clock.now + REAP
            self._pass(after)
            if self.machine.fence.extend(started):
                self.reactor.append(("renewed", started))
        else:
            self._pass(after)
            self.machine.fence.clear()
            self.reactor.append(("refused", started))

    @precondition(lambda self: self.machine.state in (HaState.ACTIVATING, HaState.LIVE))
    @rule(seconds=delays)
    def renew_fails(self, seconds: float) -> None:
        started = self.clock.now
        self._pass(seconds)
        self.reactor.append(("failed", started))

    # -- the glue's answers ------------------------------------------------------------
    @precondition(lambda self: "activate" in self.actions.calls)
    @rule()
    def activation_finishes(self) -> None:
        self.actions.take("activate")
        self.machine.inputs.started()

    @precondition(lambda self: "deactivate" in self.actions.calls)
    @rule()
    def deactivation_finishes(self) -> None:
        self.actions.take("deactivate")
        self.machine.inputs.deactivated()

    @rule()
    def failover(self) -> None:
        was = self.machine.state
        self.machine.inputs.failover()
        if was is HaState.LIVE:
            assert self.machine.state is HaState.FENCED and not self.machine.serving
        else:
            assert self.machine.state is was

    @rule()
    def stop(self) -> None:
        self.machine.inputs.stop()
        assert self.machine.state in (HaState.STOPPING, HaState.STOPPED)
        assert not self.machine.serving

    @precondition(lambda self: "release" in self.actions.calls)
    @rule()
    def release_answers(self) -> None:
        self.actions.take("release")
        if self.holder == "me":
            self.holder, self.expires = None, 0.0
        self.machine.inputs.stopped()
        assert self.machine.state is HaState.STOPPED

    # -- what must always hold ---------------------------------------------------------
    @invariant()
    def never_live_without_the_lease(self) -> None:
        if self.machine.fence.valid or (
            not self.reactor and self.machine.state in (HaState.ACTIVATING, HaState.LIVE)
        ):
            assert self.holder == "me"
            assert self.clock.now < self.expires
            assert self.machine.fence.valid
        if self.machine.serving:
            assert self.machine.state is HaState.LIVE

    @invariant()
    def the_deadline_comes_before_the_lease_can_expire(self) -> None:
        deadline = self.machine.fence.deadline
        if self.machine.fence.valid:
            assert deadline is not None and self.holder == "me"
            assert deadline <= self.expires - margin(REAP, PING, QUERY_TIMEOUT)


TestActivation = ActivationMachine.TestCase


def test_the_recorder_is_the_interface() -> None:
    assert verifyObject(IActivationActions, Recorder())


def test_a_backup_goes_live_and_is_fenced_at_the_deadline() -> None:
    clock = Clock()
    actions = Recorder()
    machine = Activation(actions, Fence(REAP, margin(REAP, PING, QUERY_TIMEOUT), clock))
    machine.inputs.start()
    assert (machine.state, actions.calls) == (HaState.BACKUP, ["acquire"])
    machine.inputs.acquired(clock.now)
    assert machine.state is HaState.ACTIVATING and not machine.serving
    machine.inputs.started()
    assert machine.serving
    clock.now += REAP - margin(REAP, PING, QUERY_TIMEOUT)
    assert not machine.serving  # the deadline passed: no longer serving even before told
    machine.inputs.deadline_passed()
    assert machine.state is HaState.FENCED
    assert machine.reason == "no renewal of the lease before the deadline"
    machine.inputs.deactivated()
    assert machine.state is HaState.BACKUP
    assert actions.calls[-2:] == ["deactivate", "acquire"]


@pytest.mark.parametrize(
    ("ping", "reap", "query_timeout"), [(1, 5, 0.5), (2.4, 5, 2.3), (0.1, 0.25, 0.09)]
)
def test_the_margin_is_positive_and_a_slow_renewal_does_not_fence(
    ping: float, reap: float, query_timeout: float
) -> None:
    """For timings [ha] accepts: the next renewal's latest answer comes before the
    deadline, and the deadline before the earliest expiry."""
    gap = margin(reap, ping, query_timeout)
    assert gap > 0
    assert ping + query_timeout < reap - gap < reap


def test_a_refused_renewal_fences_at_once_and_a_failed_one_waits_for_the_deadline() -> None:
    clock = Clock()
    actions = Recorder()
    machine = Activation(actions, Fence(REAP, margin(REAP, PING, QUERY_TIMEOUT), clock))
    machine.inputs.start()
    machine.inputs.acquired(clock.now)
    machine.inputs.started()
    machine.inputs.renew_failed()
    assert machine.state is HaState.LIVE and machine.serving
    machine.inputs.lease_lost()
    assert machine.state is HaState.FENCED and not machine.serving
    assert machine.reason == "the lease is no longer this node's"
    assert actions.calls[-1] == "deactivate"
