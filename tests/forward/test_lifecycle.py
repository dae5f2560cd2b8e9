"""The life cycle as a state machine (hypothesis): any sequence of operator commands,
connection failures and clock steps leaves the bridge in the state the table says, with
a refused command naming the state, and never an unexpected error."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock

from bridge.forward.bridge import Bridge, BridgeStateError
from bridge.forward.forwarded import Origin
from bridge.forward.status import BridgeState
from bridge.node.queue import Queue
from tests.forward.conftest import bridge_config
from transport.urls import parse_url

S = BridgeState
TABLE: dict[tuple[BridgeState, str], BridgeState | None] = {
    (S.STOPPED, "start"): S.STARTING,
    (S.STOPPED, "pause"): None,
    (S.STOPPED, "resume"): None,
    (S.STOPPED, "stop"): S.STOPPED,
    (S.STARTING, "start"): S.STARTING,
    (S.STARTING, "pause"): S.PAUSED,
    (S.STARTING, "resume"): S.STARTING,
    (S.STARTING, "stop"): S.STOPPED,
    (S.PAUSED, "start"): None,
    (S.PAUSED, "pause"): S.PAUSED,
    (S.PAUSED, "resume"): S.STARTING,
    (S.PAUSED, "stop"): S.STOPPED,
    (S.FAILED, "start"): S.STARTING,
    (S.FAILED, "pause"): None,
    (S.FAILED, "resume"): None,
    (S.FAILED, "stop"): S.STOPPED,
}
"""What each command does to a bridge whose target is unreachable (None: refused). A
starting or paused bridge keeps trying to connect, and FAILS when its attempts run out."""


class _Broker:
    """Stands in for the broker where the bridge only looks its queue up: with its
    target unreachable, the bridge never consumes (tests/forward's other modules run
    bridges on real brokers)."""

    def __init__(self) -> None:
        self.source = Queue("orders", "orders")

    def queue(self, name: str) -> Queue:
        return self.source


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.attempts: list[Deferred[Any]] = []
        config = bridge_config("b", "orders", parse_url("tcp://127.0.0.1:1"), reconnect_attempts=3)
        self.bridge = Bridge(
            config,
            _Broker(),
            Origin("id-a", "run"),
            self.clock,
            self._connect,  # type: ignore[arg-type]
        )
        self.model = S.STOPPED

    def _connect(self, url: Any, config: Any) -> Deferred[Any]:
        attempt: Deferred[Any] = Deferred()
        self.attempts.append(attempt)
        return attempt

    @rule(command=st.sampled_from(["start", "pause", "resume", "stop"]))
    def command(self, command: str) -> None:
        expected = TABLE[(self.model, command)]
        outcome: list[Any] = []
        getattr(self.bridge, command)().addBoth(outcome.append)
        if expected is None:
            assert outcome and isinstance(outcome[0].value, BridgeStateError)
            assert str(self.model) in str(outcome[0].value)
        else:
            self.model = expected
        assert self.bridge.state is self.model

    @rule()
    def an_attempt_fails(self) -> None:
        pending = [a for a in self.attempts if not a.called]
        if not pending:
            return
        pending[0].errback(ConnectionRefusedError("refused"))
        self.clock.advance(0)

    @rule(seconds=st.floats(min_value=0, max_value=1))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def matches_the_model(self) -> None:
        state = self.bridge.state
        if state is S.FAILED and self.model in (S.STARTING, S.PAUSED):
            assert self.bridge.last_error is not None
            assert self.bridge.last_error.startswith("gave up after 3 reconnect attempts")
            self.model = S.FAILED
        assert state is self.model
        assert sum(not a.called for a in self.attempts) <= 1


Lifecycle.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_lifecycle = Lifecycle.TestCase
