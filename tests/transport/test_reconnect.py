"""Reconnects: Artemis's settings mapped onto ClientService and backoffPolicy.

Connection attempts are real (loopback TCP); the waits between them run on an injected
clock, so the test decides when a retry happens.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher
from twisted.python.failure import Failure
from zope.interface import implementer

from tests.transport.memory import APP, Recorder
from transport.connection import FrameFactory
from transport.endpoints import client_endpoint, listen
from transport.errors import ReconnectAttemptsExhausted
from transport.reconnect import Reconnector, ReconnectPolicy


def test_delays_follow_retry_interval_multiplier_and_maximum():
    policy = ReconnectPolicy(
        retry_interval=0.5, retry_interval_multiplier=2.0, max_retry_interval=3.0
    )
    delay = policy.delay()
    assert [delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"retry_interval": -1}, "retry-interval must not be negative"),
        ({"retry_interval_multiplier": 0.5}, "retry-interval-multiplier must be at least 1"),
        ({"retry_interval": 5, "max_retry_interval": 1}, "must not be below retry-interval"),
        ({"reconnect_attempts": -2}, "reconnect-attempts must be -1"),
    ],
)
def test_invalid_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        ReconnectPolicy(**settings)


@implementer(IStreamClientEndpoint)
class CountingEndpoint:
    """Wraps an endpoint and fires ``next_failure()`` when an attempt fails."""

    def __init__(self, inner: IStreamClientEndpoint) -> None:
        self.inner = inner
        self.failures = 0
        self._failure_waiters: list[Deferred[None]] = []

    def next_failure(self) -> Deferred[None]:
        waiter: Deferred[None] = Deferred()
        self._failure_waiters.append(waiter)
        return waiter

    def connect(self, factory):  # type: ignore[no-untyped-def]
        def failed(failure):  # type: ignore[no-untyped-def]
            self.failures += 1
            waiters, self._failure_waiters = self._failure_waiters, []
            for waiter in waiters:
                reactor.callLater(0, waiter.callback, None)
            return failure

        return self.inner.connect(factory).addErrback(failed)


@pytest_twisted.ensureDeferred
async def test_gives_up_after_the_configured_attempts_and_says_so():
    with socket.socket() as holder:  # bound, not listening: connecting is refused at once
        holder.bind(("127.0.0.1", 0))
        closed_port = holder.getsockname()[1]
        clock = Clock()
        exhausted: list[ReconnectAttemptsExhausted] = []
        endpoint = CountingEndpoint(client_endpoint(reactor, f"tcp://127.0.0.1:{closed_port}"))
        factory = FrameFactory(Recorder, clock, accepted_types=[APP], is_client=True)
        reconnector = Reconnector(
            endpoint,
            factory,
            ReconnectPolicy(retry_interval=1.0, reconnect_attempts=2),
            clock,
            on_exhausted=exhausted.append,
        )
        failed = endpoint.next_failure()
        reconnector.start()
        for _ in range(2):
            await failed  # the attempt was refused; the retry waits on the clock
            assert clock.getDelayedCalls()
            assert not exhausted
            failed = endpoint.next_failure()
            clock.advance(1.0)
        await failed
        assert reconnector.exhausted is not None
        clock.advance(0)
        assert exhausted == [reconnector.exhausted]
        assert "gave up after 2 reconnect attempts" in str(exhausted[0])
        assert "refused" in str(exhausted[0]).lower()
        assert not reconnector.service.running
        assert clock.getDelayedCalls() == []


@pytest_twisted.ensureDeferred
async def test_connects_once_the_target_comes_up_then_reconnects_after_a_drop():
    # Real time here, with short intervals: the point is the sequence of events.
    accepted: list[Deferred[Recorder]] = [Deferred(), Deferred()]
    receivers: list[Recorder] = []

    def make() -> Recorder:
        receiver = Recorder()
        receivers.append(receiver)
        reactor.callLater(0, accepted[len(receivers) - 1].callback, receiver)
        return receiver

    # Reserve a port number, then let the target come up on it later.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        target_port = probe.getsockname()[1]
    endpoint = CountingEndpoint(client_endpoint(reactor, f"tcp://127.0.0.1:{target_port}"))
    factory = FrameFactory(Recorder, reactor, accepted_types=[APP], is_client=True)
    reconnector = Reconnector(
        endpoint,
        factory,
        ReconnectPolicy(retry_interval=0.05, max_retry_interval=0.05, reconnect_attempts=-1),
        reactor,
    )
    down = endpoint.next_failure()
    reconnector.start()
    connected = reconnector.when_connected()
    await down  # the target is down at start
    port = await listen(reactor, f"tcp://127.0.0.1:{target_port}", make, accepted_types=[APP])
    try:
        first = await connected
        server_side = await accepted[0]
        assert server_side.connection is not None
        server_side.connection.close()  # the target drops us
        await first.when_lost()
        second = await reconnector.when_connected()
        assert second is not first
        await accepted[1]
        await reconnector.stop()
        assert receivers[1].connection is not None
        await receivers[1].connection.when_lost()
    finally:
        await port.stopListening()


@pytest.mark.parametrize("attempts", [0, 2])
@pytest_twisted.ensureDeferred
async def test_after_a_drop_exactly_the_configured_reconnect_attempts_are_made(attempts):
    # Real time, short intervals: the target goes away and drops us.
    logged: list[str] = []
    globalLogPublisher.addObserver(logged.append)  # type: ignore[arg-type]
    try:
        await _drop_and_count(attempts, logged)
    finally:
        globalLogPublisher.removeObserver(logged.append)  # type: ignore[arg-type]


async def _drop_and_count(attempts: int, logged: list) -> None:  # type: ignore[type-arg]
    accepted: Deferred[Recorder] = Deferred()

    def make() -> Recorder:
        receiver = Recorder()
        if not accepted.called:
            reactor.callLater(0, accepted.callback, receiver)
        return receiver

    port = await listen(reactor, "tcp://127.0.0.1:0", make, accepted_types=[APP])
    endpoint = CountingEndpoint(client_endpoint(reactor, f"tcp://127.0.0.1:{port.getHost().port}"))
    exhausted: Deferred[ReconnectAttemptsExhausted] = Deferred()
    reconnector = Reconnector(
        endpoint,
        FrameFactory(Recorder, reactor, accepted_types=[APP], is_client=True),
        ReconnectPolicy(retry_interval=0.02, max_retry_interval=0.02, reconnect_attempts=attempts),
        reactor,
        on_exhausted=exhausted.callback,
    )
    reconnector.start()
    connection = await reconnector.when_connected()
    server_side = await accepted
    await port.stopListening()
    assert server_side.connection is not None
    server_side.connection.close()
    await connection.when_lost()
    reason = await exhausted
    assert endpoint.failures == attempts
    expected = "reconnect-attempts is 0" if attempts == 0 else "gave up after 2 reconnect attempts"
    assert expected in str(reason)
    assert reason.cause and "reconnect" not in reason.cause and reason.cause in str(reason)
    # Each retry made is logged with its number; none that the policy does not make.
    assert not [e for e in logged if str(e.get("log_format")).startswith("Scheduling retry")]
    retries = [e for e in logged if str(e.get("log_format")).startswith("retry {retry}")]
    assert [(e["retry"], e["delay"]) for e in retries] == [
        (n, 0.02) for n in range(1, attempts + 1)
    ]
    assert not reconnector.service.running
    with pytest.raises(ReconnectAttemptsExhausted):
        await reconnector.when_connected()


@pytest_twisted.ensureDeferred
async def test_a_policy_reconsidered_applies_from_the_next_drop_and_a_retry_may_go_now():
    logged: list[str] = []
    globalLogPublisher.addObserver(logged.append)  # type: ignore[arg-type]
    try:
        accepted: Deferred[Recorder] = Deferred()

        def make() -> Recorder:
            receiver = Recorder()
            if not accepted.called:
                reactor.callLater(0, accepted.callback, receiver)
            return receiver

        port = await listen(reactor, "tcp://127.0.0.1:0", make, accepted_types=[APP])
        where = f"tcp://127.0.0.1:{port.getHost().port}"
        endpoint = CountingEndpoint(client_endpoint(reactor, where))
        exhausted: Deferred[ReconnectAttemptsExhausted] = Deferred()
        quick = ReconnectPolicy(retry_interval=0.02, max_retry_interval=0.02, reconnect_attempts=1)
        reconnector = Reconnector(
            endpoint,
            FrameFactory(Recorder, reactor, accepted_types=[APP], is_client=True),
            quick,
            reactor,
            on_exhausted=exhausted.callback,
        )
        reconnector.start()
        connection = await reconnector.when_connected()
        server_side = await accepted
        await port.stopListening()
        reconnector.reconsider(ReconnectPolicy(0.03, 1.0, 0.03, reconnect_attempts=3))
        reconnector.retry_now()
        assert server_side.connection is not None
        server_side.connection.close()
        await connection.when_lost()
        reason = await exhausted
        assert endpoint.failures == 3
        assert "gave up after 3 reconnect attempts" in str(reason)
        retries = [e for e in logged if str(e.get("log_format")).startswith("retry {retry}")]
        assert [e["delay"] for e in retries] == [0.03, 0.03]  # the first went at once
    finally:
        globalLogPublisher.removeObserver(logged.append)  # type: ignore[arg-type]


@implementer(IStreamClientEndpoint)
class ScriptedEndpoint:
    """Each attempt is a Deferred the test fires: a connection (a ``Held`` protocol built
    by the factory, as a connection made by the layer above) or a failure."""

    def __init__(self) -> None:
        self.attempts: list[tuple[Deferred[Any], Any]] = []

    def connect(self, factory):  # type: ignore[no-untyped-def]
        attempt: Deferred[Any] = Deferred()
        self.attempts.append((attempt, factory))
        return attempt

    def fail(self, why: str) -> None:
        self.attempts[-1][0].errback(ConnectionRefusedError(why))

    def succeed(self) -> Any:
        """The connection as ClientService made it (its proxy of a ``Held``)."""
        attempt, factory = self.attempts[-1]
        proxy = factory.buildProtocol(None)
        proxy.makeConnection(HeldTransport(proxy))
        attempt.callback(proxy)
        return proxy


class HeldTransport:
    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol

    def loseConnection(self) -> None:
        self.protocol.connectionLost(Failure(HeldLost("closed by its owner")))


class HeldLost(Exception):
    pass


class Held(Protocol):
    """Not a FrameConnection: it says when it is lost as ``Losable`` asks."""

    def __init__(self) -> None:
        self.lost: Deferred[BaseException] = Deferred()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.lost.callback(reason.value)

    def when_lost(self) -> Deferred[BaseException]:
        return self.lost


def scripted(attempts: int) -> tuple[ScriptedEndpoint, Clock, Reconnector, list[Any], list[Any]]:
    endpoint, clock = ScriptedEndpoint(), Clock()
    retries: list[tuple[int, float]] = []
    exhausted: list[ReconnectAttemptsExhausted] = []
    reconnector = Reconnector(
        endpoint,
        Factory.forProtocol(Held),
        ReconnectPolicy(
            retry_interval=0.5,
            retry_interval_multiplier=2.0,
            max_retry_interval=1.5,
            reconnect_attempts=attempts,
        ),
        clock,
        on_exhausted=exhausted.append,
        on_retry=lambda retry, delay: retries.append((retry, delay)),
    )
    return endpoint, clock, reconnector, retries, exhausted


def test_on_retry_is_told_each_retry_the_policy_makes_and_nothing_is_logged():
    logged: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(logged.append)  # type: ignore[arg-type]
    try:
        endpoint, clock, reconnector, retries, exhausted = scripted(3)
        reconnector.start()
        for wait in (0.5, 1.0, 1.5):
            endpoint.fail("refused")
            clock.advance(wait)
        endpoint.fail("refused")  # the fourth failure: no retry after it
        clock.advance(0)
    finally:
        globalLogPublisher.removeObserver(logged.append)  # type: ignore[arg-type]
    assert retries == [(1, 0.5), (2, 1.0), (3, 1.5)]
    assert len(endpoint.attempts) == 4
    assert [str(e) for e in exhausted] == [
        "gave up after 3 reconnect attempts: Connection was refused by other side: refused."
    ]
    assert not [e for e in logged if "retry" in str(e.get("log_format"))]
    assert clock.getDelayedCalls() == []


@pytest.mark.parametrize("attempts", [0, 2])
def test_a_drop_of_any_losable_protocol_allows_reconnect_attempts_more(attempts):
    endpoint, clock, reconnector, retries, exhausted = scripted(attempts)
    reconnector.start()
    held = endpoint.succeed()
    held.connectionLost(Failure(HeldLost("the target dropped us")))
    clock.advance(0)
    for _ in range(attempts):
        clock.advance(2)
        endpoint.fail("still down")
        clock.advance(0)
    assert len(exhausted) == 1
    if attempts == 0:
        assert exhausted[0].cause == "the target dropped us"
        assert retries == []
    else:
        assert exhausted[0].cause == "Connection was refused by other side: still down."
        assert retries == [(1, 0.5), (2, 1.0)]
    assert len(endpoint.attempts) == 1 + attempts
    assert not reconnector.service.running
    assert clock.getDelayedCalls() == []


def test_stopping_closes_a_held_connection_and_retries_no_more():
    endpoint, clock, reconnector, retries, exhausted = scripted(-1)
    reconnector.start()
    held = endpoint.succeed()
    stopped = reconnector.stop()
    assert held.lost.called and stopped.called
    clock.advance(10)
    assert (len(endpoint.attempts), retries, exhausted) == (1, [], [])
