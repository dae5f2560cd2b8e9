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
