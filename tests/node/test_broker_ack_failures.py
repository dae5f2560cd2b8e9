"""An acknowledgement the store cannot write (its failure injected here; a real full disk
in tests/system/test_full_disk.py): the message is not acknowledged after all. It waits
again in its place on its queue, for redelivery, its delivery counted, as after a
rollback, and the error says so."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import fail
from twisted.logger import formatEvent, globalLogPublisher

from bridge.node.broker import NotStored
from bridge.node.queue import Delivery
from bridge.store import CommitFailed
from tests.node.test_broker import brokers  # the fixture

__all__ = ["brokers"]


@pytest_twisted.ensureDeferred
async def test_a_failed_acknowledgement_puts_the_message_back_and_says_so(
    brokers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = await brokers()
    for body in (b"first", b"second", b"third"):
        await broker.send("orders", body, durable=True)
    queue = broker.queue("orders")
    deliveries: list[Delivery] = []
    broker.consume("orders", 1, deliveries.append, credits=0)
    queue.add_credits(1, 1)
    [first] = deliveries
    real = broker.store.acknowledge_many
    monkeypatch.setattr(
        broker.store,
        "acknowledge_many",
        lambda *args, **kwargs: fail(CommitFailed("messages.sqlite: database or disk is full")),
    )
    logged: list[str] = []

    def observe(event: dict[str, Any]) -> None:
        if event.get("log_namespace") == "bridge.node.broker":
            logged.append(formatEvent(event))

    globalLogPublisher.addObserver(observe)
    with pytest.raises(NotStored) as refused:
        await broker.acknowledge("orders", 1, first.delivery_id)
    assert str(refused.value) == (
        "acknowledgement not stored (messages.sqlite: database or disk is full); "
        f"message {first.message.id} is back on queue 'orders', unacknowledged"
    )
    assert queue.acknowledged_total == 0
    assert [(e.message.body, e.delivery_count) for e in queue.browse()] == [
        (b"first", 1),
        (b"second", 0),
        (b"third", 0),
    ]
    # Redelivered first, as a redelivery; while the store still fails, its ack fails
    # again (logged once for the queue), and it comes back once more.
    queue.add_credits(1, 10_000)
    assert [(d.message.body, d.delivery_count) for d in deliveries] == [
        (b"first", 1),
        (b"first", 2),
        (b"second", 1),
        (b"third", 1),
    ]
    with pytest.raises(NotStored):
        await broker.acknowledge("orders", 1, deliveries[1].delivery_id)
    last = deliveries[-1]
    assert (last.message.body, last.delivery_count) == (b"first", 3)
    # With the store back, the ack holds.
    monkeypatch.setattr(broker.store, "acknowledge_many", real)
    await broker.acknowledge("orders", 1, last.delivery_id)
    globalLogPublisher.removeObserver(observe)
    assert logged == [
        "acknowledgements on queue 'orders' are not stored (messages.sqlite: database or disk "
        "is full): their messages go back on the queue, unacknowledged, until the store "
        "writes again",
        "acknowledgements on queue 'orders' are stored again",
    ]
    await broker.close_consumer("orders", 1)  # second and third go back
    broker = await brokers.restart(broker)
    assert [e.message.body for e in broker.queue("orders").browse()] == [b"second", b"third"]
