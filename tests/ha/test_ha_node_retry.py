"""A node whose database is down at start tries to acquire once at once, then every
lease-ping-time: no busy loop of failed connections."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from bridge.config.ha import HaPolicy, HaSettings
from bridge.ctl.ha import HaNode
from bridge.ha.activation import HaState
from bridge.ha.client import Observed


async def _nothing() -> None:
    raise AssertionError("a node that never holds the lease must not activate")


@pytest_twisted.ensureDeferred
async def test_failed_tries_are_a_ping_apart(tmp_path: Path) -> None:
    settings = HaSettings(HaPolicy.PRIMARY, "postgresql://postgres@127.0.0.1:1/test", tmp_path)
    node = HaNode(
        "a", settings, reactor, activate=_nothing, deactivate=_nothing, failed=lambda f: None
    )
    tries: list[float] = []

    def down(*_: object) -> defer.Deferred[object]:
        tries.append(reactor.seconds())
        return defer.fail(ConnectionRefusedError("the database is down"))

    node.client.acquire = down  # type: ignore[method-assign]
    node.start()
    try:
        first = node._acquire_call
        assert first is not None and first.getTime() <= reactor.seconds()  # at once
        first.cancel()
        node._try_acquire()  # fails: the machine waits, and asks again
        assert node.state is HaState.BACKUP and len(tries) == 1
        again = node._acquire_call
        assert again is not None
        assert again.getTime() - tries[0] == pytest.approx(settings.ping, abs=0.5)
    finally:
        await node.stop()


@pytest_twisted.ensureDeferred
async def test_a_wake_up_during_a_try_brings_the_next_at_once(tmp_path: Path) -> None:
    """A release noticed while a try is under way (the try may have run before the release
    committed): the next try comes at once, not a ping later; without one, a ping later."""
    settings = HaSettings(HaPolicy.BACKUP, "postgresql://postgres@127.0.0.1:1/test", tmp_path)
    node = HaNode(
        "b", settings, reactor, activate=_nothing, deactivate=_nothing, failed=lambda f: None
    )
    answers: list[defer.Deferred[Observed]] = []

    def pending(*_: object) -> defer.Deferred[Observed]:
        answers.append(defer.Deferred())
        return answers[-1]

    node.client.acquire = pending  # type: ignore[method-assign]
    node.start()
    try:
        first = node._acquire_call
        assert first is not None
        first.cancel()
        for woken, delay in ((True, 0.0), (False, settings.ping)):
            node._try_acquire()  # under way
            if woken:
                node.try_now()
            answers[-1].callback(Observed(None, 0))  # another node holds the lease
            assert node.state is HaState.BACKUP
            call = node._acquire_call
            assert call is not None
            assert call.getTime() - reactor.seconds() == pytest.approx(delay, abs=0.5)
            call.cancel()
    finally:
        await node.stop()
