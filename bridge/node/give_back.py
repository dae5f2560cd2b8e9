"""What a closed connection gives back, for every head: its open transactions rolled
back, its consumers closed (their unacknowledged deliveries back to their queues, counted
as delivered), then its own non-durable queues dropped, unless others consume from them.
Each step's failure is logged and the rest is done all the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from bridge.node.addressing import Addressing
from bridge.node.consumer import Consumer
from bridge.node.local import LocalTransactions

log = Logger()


async def give_back(
    transactions: LocalTransactions[Any, Any],
    consumers: Iterable[Consumer[Any]],
    addressing: Addressing,
    what: str,
) -> None:
    """Give back what a connection held, in order; ``what`` names it for the log."""
    for local in transactions.close():
        await _quietly(transactions.rollback(local), what)
    for consumer in consumers:
        await _quietly(consumer.close(), what)
    for name in addressing.close():
        await _quietly(Deferred.fromCoroutine(addressing.drop(name)), what)


async def _quietly(work: Deferred[None], what: str) -> None:
    try:
        await work
    except Exception:
        log.failure("cleaning up {what} failed", what=what)
