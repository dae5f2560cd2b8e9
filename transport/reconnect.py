"""Reconnecting with Twisted's ClientService and backoffPolicy, under Artemis's names.

``retry-interval`` is the wait before the first retry, multiplied by
``retry-interval-multiplier`` for each further one up to ``max-retry-interval``;
``reconnect-attempts`` bounds the consecutive failed retries (-1: forever, 0: never retry).
The count starts again after every successful connection. When it runs out the service
stops and ``on_exhausted`` is told why. The owner may change the policy for the next drop
(``reconsider``: a client that learned its failover nodes allows a round of them), and
send the next retry at once (``retry_now``: a node redirected it).

Drops are watched on any protocol that says when it is lost (``when_lost()``, as
``FrameConnection`` does): a core connection, or whatever stands for a connection made
by the layer above (a bridge lane's logged-in client).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast, runtime_checkable

import attrs
from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import (
    IProtocol,
    IProtocolFactory,
    IReactorTime,
    IStreamClientEndpoint,
)
from twisted.internet.task import deferLater
from twisted.logger import ILogObserver, Logger, globalLogPublisher
from twisted.python.failure import Failure

from transport.connection import FrameConnection
from transport.errors import ReconnectAttemptsExhausted

log = Logger()


def _no_jitter() -> float:
    return 0.0


@attrs.frozen
class ReconnectPolicy:
    """Artemis's reconnect settings (defaults are Artemis's core-bridge defaults)."""

    retry_interval: float = 2.0
    retry_interval_multiplier: float = 1.0
    max_retry_interval: float = 2.0
    reconnect_attempts: int = -1

    def __attrs_post_init__(self) -> None:
        if self.retry_interval < 0:
            raise ValueError(f"retry-interval must not be negative, got {self.retry_interval}")
        if self.retry_interval_multiplier < 1:
            raise ValueError(
                "retry-interval-multiplier must be at least 1, "
                f"got {self.retry_interval_multiplier}"
            )
        if self.max_retry_interval < self.retry_interval:
            raise ValueError(
                f"max-retry-interval ({self.max_retry_interval}s) must not be below "
                f"retry-interval ({self.retry_interval}s)"
            )
        if self.reconnect_attempts < -1:
            raise ValueError(
                f"reconnect-attempts must be -1 (forever) or more, got {self.reconnect_attempts}"
            )

    def delay(self) -> Callable[[int], float]:
        """ClientService's retry policy: the wait before retry ``n`` (n counts from 1)."""
        backoff = backoffPolicy(
            initialDelay=self.retry_interval,
            maxDelay=self.max_retry_interval,
            factor=self.retry_interval_multiplier,
            jitter=_no_jitter,
        )
        return lambda failed: backoff(failed - 1)

    @property
    def fail_after(self) -> int | None:
        """Failures of a first connection after which to give up: the first attempt plus
        every retry allowed. After a drop, ``reconnect_attempts`` failures end it."""
        return None if self.reconnect_attempts < 0 else self.reconnect_attempts + 1


@runtime_checkable
class Losable(Protocol):
    """A connection that says when it is lost, and why (the reason's words are the
    ``cause`` of a ReconnectAttemptsExhausted after a drop)."""

    def when_lost(self) -> Deferred[BaseException]: ...


def _without_retry_lines(event: dict[str, object]) -> None:
    """Pass on a ClientService's log events but its "Scheduling retry" lines."""
    if not str(event.get("log_format", "")).startswith("Scheduling retry"):
        globalLogPublisher(event)


class _Service(ClientService):
    """ClientService without its own retry lines: it schedules a retry after every
    failure, also the one after which the policy gives up (and the Reconnector stops it),
    so its line would announce retries that never come. The Reconnector logs the real
    ones."""

    _log = Logger(
        namespace=f"{ClientService.__module__}.{ClientService.__qualname__}",
        observer=cast(ILogObserver, _without_retry_lines),
    )


class Reconnector:
    """Keeps one connection up through ClientService, giving up as the policy says."""

    def __init__(
        self,
        endpoint: IStreamClientEndpoint,
        factory: IProtocolFactory,
        policy: ReconnectPolicy,
        clock: IReactorTime,
        *,
        on_exhausted: Callable[[ReconnectAttemptsExhausted], object] = lambda error: None,
        prepare: Callable[[IProtocol], object] | None = None,
        on_retry: Callable[[int, float], object] | None = None,
    ) -> None:
        """``on_retry(retry, delay)`` is told of each retry the policy allows, numbered
        from 1 after every connection, with its wait; without it, each is logged."""
        self.policy = policy
        self._on_retry = on_retry
        self._delay = policy.delay()
        self._endpoint = endpoint
        self._on_exhausted = on_exhausted
        self._clock = clock
        self.service = _Service(
            endpoint,
            factory,
            retryPolicy=self._retry_delay,
            clock=clock,
            prepareConnection=prepare,
        )
        self._watch: Deferred[IProtocol] | None = None
        self._stopped = False
        self._now = False
        self.exhausted: ReconnectAttemptsExhausted | None = None

    def reconsider(self, policy: ReconnectPolicy) -> None:
        """Follow ``policy`` from the next retry and the next drop on."""
        self.policy = policy
        self._delay = policy.delay()

    def retry_now(self) -> None:
        """The next retry goes at once, not after the policy's wait."""
        self._now = True

    def _retry_delay(self, failed: int) -> float:
        """ClientService schedules retry ``failed``: log it (or tell ``on_retry``), unless
        the policy gives up before it (the count starts again after every connection, as
        the policy's does)."""
        if self._now:
            self._now = False
            return 0.0
        delay = self._delay(failed)
        attempts = self.policy.reconnect_attempts
        if 0 <= attempts < failed:
            return delay
        if self._on_retry is not None:
            self._on_retry(failed, delay)
        else:
            log.info(
                "retry {retry} to connect {endpoint} in {delay} s",
                retry=failed,
                endpoint=self._endpoint,
                delay=round(delay, 3),
            )
        return delay

    def start(self) -> None:
        self._stopped = False
        self.service.startService()
        self._watch_attempts(self.policy.fail_after)

    def stop(self) -> Deferred[None]:
        self._stopped = True
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        return self.service.stopService()

    def when_connected(self) -> Deferred[IProtocol]:
        """The connected protocol, now or once a connection succeeds.

        It fires on the turn after, outside ClientService's state machine, so its callbacks
        may stop the service; a connection already lost by then is skipped for the next.
        Fails with ReconnectAttemptsExhausted once the attempts ran out."""
        return self.service.whenConnected().addCallbacks(self._later, self._why_not)

    def _later(self, protocol: IProtocol) -> Deferred[IProtocol]:
        return deferLater(self._clock, 0, lambda: None).addCallback(self._alive, protocol)

    def _alive(self, _: None, protocol: IProtocol) -> IProtocol | Deferred[IProtocol]:
        if isinstance(protocol, FrameConnection) and protocol.lost_reason is not None:
            return self.when_connected()
        return protocol

    def _why_not(self, failure: Failure) -> Failure:
        if failure.check(CancelledError) and self.exhausted is not None:
            return Failure(self.exhausted)
        return failure

    def _watch_attempts(self, fail_after: int | None) -> None:
        if fail_after is None or self._stopped or not self.service.running:
            return
        if self._watch is not None and not self._watch.called:
            return
        watch = self._watch = self.service.whenConnected(failAfterFailures=fail_after)
        watch.addCallbacks(self._connected, self._gave_up)

    def _connected(self, protocol: IProtocol) -> None:
        self._watch = None
        if isinstance(protocol, Losable):
            # The connection hears of its loss before ClientService does: look on the next
            # turn, when the service is already waiting to retry.
            protocol.when_lost().addCallback(
                lambda reason: self._clock.callLater(0, self._dropped, reason)
            )

    def _dropped(self, reason: BaseException) -> None:
        """A connection dropped; ClientService retries. Allow reconnect-attempts more."""
        attempts = self.policy.reconnect_attempts
        if self._stopped or not self.service.running or attempts < 0:
            return
        if attempts == 0:
            cause = str(reason) or type(reason).__name__
            self._exhaust(f"the connection dropped and reconnect-attempts is 0: {cause}", cause)
        else:
            self._watch_attempts(attempts)

    def _gave_up(self, failure: Failure) -> None:
        self._watch = None
        if failure.check(CancelledError):
            return
        attempts = self.policy.reconnect_attempts
        cause = failure.getErrorMessage()
        if attempts == 0:
            self._exhaust(f"{cause} (reconnect-attempts is 0)", cause)
        else:
            self._exhaust(
                f"gave up after {attempts} reconnect attempt{'s' * (attempts != 1)}: {cause}",
                cause,
            )

    def _exhaust(self, reason: str, cause: str) -> None:
        self.exhausted = ReconnectAttemptsExhausted(reason, cause)
        # Possibly still inside ClientService's transition: stop it on the next turn.
        self._clock.callLater(0, self._give_up, self.exhausted)

    def _give_up(self, exhausted: ReconnectAttemptsExhausted) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.service.stopService()
        self._on_exhausted(exhausted)
