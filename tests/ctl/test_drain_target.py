"""The drain's wait for its target (bridge/ctl/drain.py, ``wait_for_target``): over the
members' view, on its change events, bounded by ``[cluster] drain-target-timeout``."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from bridge.ctl.drain import DrainRefused, failover_map, wait_for_target
from bridge.ha.failover import FailoverMap, RingPolicy
from bridge.ha.topology import Topology
from bridge.ha.view import Member


class View:
    """The members' view as the drain reads it: a topology and its change events."""

    def __init__(self) -> None:
        self.topology_now = Topology(Member("a", ("tcp://h1:1",), "h1"), ("a",), RingPolicy())
        self.waiters: list[Deferred[None]] = []
        self.emptied = False

    def when_changed(self) -> Deferred[None]:
        waiter: Deferred[None] = Deferred(self.waiters.remove)
        self.waiters.append(waiter)
        return waiter

    def serve_nothing(self) -> None:
        self.emptied = True

    def link(self, name: str, host: str) -> None:
        self.topology_now.linked(name, Member(name, (f"tcp://{host}:1",), host), (name,))
        self.changed()

    def changed(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            waiter.callback(None)


def refusal(found: Deferred[FailoverMap]) -> BaseException:
    failures: list[Failure] = []
    found.addErrback(failures.append)
    [failure] = failures
    assert failure.value is not None
    return failure.value


def test_a_view_that_holds_a_failover_node_gives_the_map_at_once() -> None:
    view = View()
    view.link("b", "h2")
    found = wait_for_target(view, "a", 5.0, Clock())
    assert found.result == {"a": ("b",), "b": ("a",)}
    assert view.waiters == []


def test_the_drain_waits_for_the_view_to_hold_a_failover_node() -> None:
    view, clock = View(), Clock()
    found = wait_for_target(view, "a", 5.0, clock)
    assert not found.called and len(view.waiters) == 1
    view.changed()  # a change that gives a no failover node: the wait goes on
    assert not found.called and len(view.waiters) == 1
    clock.advance(4.0)
    view.link("b", "h2")
    assert found.result == failover_map(view.topology_now)
    assert found.result["a"] == ("b",)
    assert view.waiters == [] and clock.getDelayedCalls() == []


def test_no_failover_node_within_the_timeout_fails_the_drain_and_stops_waiting() -> None:
    view, clock = View(), Clock()
    found = wait_for_target(view, "a", 5.0, clock)
    clock.advance(5.0)
    refused = refusal(found)
    assert isinstance(refused, DrainRefused)
    assert str(refused) == (
        "node a has no failover node in the cluster's view (a) after 5s ([cluster] "
        "drain-target-timeout): no member to drain to"
    )
    assert view.waiters == []
    view.link("b", "h2")  # too late: nothing fires twice


def test_a_view_no_longer_kept_fails_the_drain() -> None:
    view, clock = View(), Clock()
    found = wait_for_target(view, "a", 5.0, clock)
    view.waiters[0].cancel()  # what ClusterMembers.stop does to its waiters
    refused = refusal(found)
    assert isinstance(refused, DrainRefused)
    assert str(refused) == "the node stopped keeping its cluster view"
    assert clock.getDelayedCalls() == []
