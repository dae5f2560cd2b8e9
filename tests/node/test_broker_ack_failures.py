"""An acknowledgement the store cannot write (its failure injected here; a real full disk
in tests/system/test_full_disk.py): the message is not acknowledged after all. It waits
again in its place on its queue, for redelivery, its delivery counted, as after a
rollback, and the error says so."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import fail

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
    # With the store back, it is redelivered first, as a redelivery, and its ack holds.
    monkeypatch.setattr(broker.store, "acknowledge_many", real)
    queue.add_credits(1, 10_000)
    assert [d.message.body for d in deliveries] == [b"first", b"first", b"second", b"third"]
    again = deliveries[1]
    assert (again.message.body, again.delivery_count) == (b"first", 2)
    await broker.acknowledge("orders", 1, again.delivery_id)
    await broker.close_consumer("orders", 1)  # second and third go back
    broker = await brokers.restart(broker)
    assert [e.message.body for e in broker.queue("orders").browse()] == [b"second", b"third"]
