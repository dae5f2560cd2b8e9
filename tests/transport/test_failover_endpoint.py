"""The failover endpoint: attempts go where the last one connected, and move to the next
endpoint (wrapping) after ``attempts_per_endpoint`` failures in a row there."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from zope.interface import implementer

from transport.failover import FailoverEndpoint


@implementer(IStreamClientEndpoint)
class Scripted:
    """An endpoint whose attempts succeed or fail as the test says, recording each."""

    def __init__(self, name: int, tried: list[int], outcomes: list[bool]) -> None:
        self.name, self.tried, self.outcomes = name, tried, outcomes

    def connect(self, factory: Any) -> Deferred[Protocol]:
        self.tried.append(self.name)
        if self.outcomes.pop(0):
            return succeed(Protocol())
        return fail(ConnectionRefusedError(f"endpoint {self.name}"))


def run(count: int, per_endpoint: int, outcomes: list[bool]) -> list[int]:
    """Attempts as ``outcomes`` say; each that connects is established (logged in)."""
    tried: list[int] = []
    endpoint = FailoverEndpoint([Scripted(n, tried, outcomes) for n in range(count)], per_endpoint)
    for _ in range(len(outcomes)):
        attempt = endpoint.connect(Factory.forProtocol(Protocol))
        attempt.addCallbacks(lambda _: endpoint.established(), lambda _: None)
    return tried


def test_a_connection_lost_before_it_was_established_is_a_failure():
    """Something that accepts at the address but never logs the client in (another
    service, a node closing) does not keep the client there."""
    tried: list[int] = []
    outcomes = [True, True, True]
    endpoint = FailoverEndpoint([Scripted(n, tried, outcomes) for n in range(2)])
    endpoint.connect(Factory.forProtocol(Protocol))
    endpoint.failed()  # connected, then lost before the login was accepted
    endpoint.connect(Factory.forProtocol(Protocol))
    endpoint.established()
    endpoint.connect(Factory.forProtocol(Protocol))
    assert tried == [0, 1, 1]


def test_each_failure_moves_to_the_next_endpoint_and_a_success_stays():
    outcomes = [True, False, False, True, True, False]
    assert run(3, 1, outcomes) == [0, 0, 1, 2, 2, 2]


def test_an_endpoint_keeps_its_attempts_before_the_next_is_tried():
    outcomes = [False, True, False, False, False, False]
    # a success in between starts the count again
    assert run(2, 2, outcomes) == [0, 0, 0, 0, 1, 1]


@given(
    count=st.integers(1, 4),
    per_endpoint=st.integers(1, 3),
    outcomes=st.lists(st.booleans(), max_size=30),
)
def test_attempts_follow_the_model(count: int, per_endpoint: int, outcomes: list[bool]) -> None:
    expected, current, failures = [], 0, 0
    for ok in outcomes:
        expected.append(current)
        if ok:
            failures = 0
        else:
            failures += 1
            if failures == per_endpoint:
                current, failures = (current + 1) % count, 0
    assert run(count, per_endpoint, list(outcomes)) == expected


def test_nonsense_is_refused():
    with pytest.raises(ValueError, match="at least one endpoint"):
        FailoverEndpoint([])
    with pytest.raises(ValueError, match="attempts per endpoint must be at least 1"):
        FailoverEndpoint([Scripted(0, [], [])], 0)


def test_following_a_map_tries_the_own_node_first_then_each_failover_node_once():
    tried: list[int] = []
    outcomes = [False] * 8
    endpoint = FailoverEndpoint([Scripted(9, tried, outcomes)])
    endpoint.follow([Scripted(n, tried, outcomes) for n in range(3)], first_attempts=3)
    for _ in range(8):
        endpoint.connect(Factory.forProtocol(Protocol)).addErrback(lambda _: None)
    assert tried == [0, 0, 0, 1, 2, 0, 0, 0]


def test_a_redirect_sends_the_next_attempt_elsewhere_once():
    tried: list[int] = []
    outcomes = [True, False, False]
    endpoint = FailoverEndpoint([Scripted(n, tried, outcomes) for n in range(2)])
    endpoint.redirect(Scripted(7, tried, outcomes))
    endpoint.connect(Factory.forProtocol(Protocol))
    endpoint.established()  # logged in there: it stays the place to go
    assert endpoint.detour is not None
    endpoint.connect(Factory.forProtocol(Protocol)).addErrback(lambda _: None)
    assert endpoint.detour is None  # it failed: back to the order, as if 0 had failed
    endpoint.connect(Factory.forProtocol(Protocol)).addErrback(lambda _: None)
    assert tried == [7, 7, 1]


def test_follow_needs_an_endpoint_and_an_attempt():
    endpoint = FailoverEndpoint([Scripted(0, [], [])])
    with pytest.raises(ValueError):
        endpoint.follow([], 1)
    with pytest.raises(ValueError):
        endpoint.follow([Scripted(0, [], [])], 0)
