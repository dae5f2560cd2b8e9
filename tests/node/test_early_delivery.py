"""Early delivery over the real SQLite store: a durable send without a duplicate id is
queued while its write runs, one consumed before its batch reached the writer is never
written, and its id is never given again, even after a restart."""

from __future__ import annotations

from typing import Any

import pytest_twisted
from twisted.internet.defer import Deferred

from bridge.message import Message
from bridge.node.broker import Broker
from bridge.node.routing import ID_BLOCK, QUEUED
from tests.node.test_broker import Brokers, brokers, take
from tests.told import told

__all__ = ["brokers"]


def publish(broker: Broker, body: bytes, duplicate_id: bytes | None = None) -> tuple[Any, Deferred]:
    """``publish_then`` asked to queue early: what it returned, and its write's outcome."""
    then, written = told()
    message = Message(0, "orders", True, {}, body, duplicate_id)
    return broker.publish_then(message, then, early=True), written


async def reserved(broker: Broker) -> None:
    """Send once: early, as the node reserved its first block of ids when it opened."""
    first, written = publish(broker, b"first")
    assert first is QUEUED
    await written


@pytest_twisted.ensureDeferred
async def test_a_send_consumed_before_its_write_ran_is_never_written(brokers: Brokers) -> None:
    broker = await brokers()
    await reserved(broker)
    deliveries = take(broker, "orders")
    assert [d.message.body for d in deliveries] == [b"first"]
    routed, written = publish(broker, b"early")
    assert routed is QUEUED
    assert [d.message.body for d in deliveries] == [b"first", b"early"]  # before its write
    acked = broker.acknowledge("orders", 1, deliveries[-1].delivery_id, cumulative=True)
    await acked
    await written
    early_id = deliveries[-1].message.id

    broker = await brokers.restart(broker)
    deliveries = take(broker, "orders")
    assert deliveries == []
    routed, written = publish(broker, b"after")
    await written
    [after] = deliveries
    assert after.message.id > early_id + ID_BLOCK // 2  # above what was reserved


@pytest_twisted.ensureDeferred
async def test_a_send_with_a_duplicate_id_is_queued_only_once_written(brokers: Brokers) -> None:
    broker = await brokers()
    await reserved(broker)
    routed, written = publish(broker, b"once", b"id-1")
    assert routed is None
    assert broker.queue("orders").depth == 1  # the first only
    await written
    assert broker.queue("orders").depth == 2


@pytest_twisted.ensureDeferred
async def test_a_send_queued_early_and_not_consumed_survives_a_restart(brokers: Brokers) -> None:
    broker = await brokers()
    await reserved(broker)
    routed, written = publish(broker, b"kept")
    assert routed is QUEUED
    await written
    broker = await brokers.restart(broker)
    assert [d.message.body for d in take(broker, "orders")] == [b"first", b"kept"]
