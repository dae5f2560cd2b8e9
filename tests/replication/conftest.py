"""What the replication tests share: a bounded wait on a condition, polled on the reactor."""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet import reactor
from twisted.internet.task import deferLater

TIMEOUT = 30.0


async def until(condition: Callable[[], object], what: str) -> None:
    """Poll ``condition`` until it holds, failing after TIMEOUT."""
    deadline = reactor.seconds() + TIMEOUT
    while not condition():
        assert reactor.seconds() < deadline, f"{what} did not hold in time"
        await deferLater(reactor, 0.01, lambda: None)
