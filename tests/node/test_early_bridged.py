"""A core bridge's send on its target, over the real SQLite store: queued before its write
where every consumer of its queue acknowledges what it is handed as it is handed
(``ack:auto``), so that one consumed before its write leaves only its bridge id to write;
queued once written for any other consumer; a repeat is always known; a send marked as
sent before (the bridge's resend) is delivered as a redelivery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred, fail

from bridge.message import BRIDGE_DUPLICATE_ID, DELIVERY_COUNT, HeaderValue, LargeBody, Message
from bridge.node.broker import Broker, Routed
from bridge.node.queue import Delivery
from bridge.node.routing import QUEUED
from bridge.store import sqlite_operations
from bridge.store.errors import StoreError, Unsettled
from tests.node.test_broker import Brokers, brokers
from tests.node.test_early_delivery import reserved
from tests.told import told

__all__ = ["brokers"]

ID = b"node-a:7"


def bridged(
    broker: Broker, body: bytes = b"x" * 100, **headers: HeaderValue
) -> tuple[Any, Deferred[None]]:
    """The bridge's send of ``body`` (bridge id ``ID``), as the core head routes it: what
    ``publish_then`` returned, and its write's outcome."""
    then, written = told()
    message = Message(0, "orders", True, {BRIDGE_DUPLICATE_ID: ID, **headers}, body)
    return broker.publish_then(message, then, early=True), written


def consume(broker: Broker, *, auto_ack: bool) -> list[Delivery]:
    """A consumer of ``orders``; an ``auto_ack`` one acknowledges each delivery in the turn
    it is handed, as the heads' ``AutoAcks`` do."""
    deliveries: list[Delivery] = []

    def take(delivery: Delivery) -> None:
        deliveries.append(delivery)
        if auto_ack:
            broker.acknowledge("orders", 1, delivery.delivery_id)

    broker.consume("orders", 1, take, auto_ack=auto_ack)
    return deliveries


@pytest_twisted.ensureDeferred
async def test_consumed_before_its_write_only_its_id_is_written(brokers: Brokers) -> None:
    broker = await brokers()
    await reserved(broker)
    deliveries = consume(broker, auto_ack=True)
    routed, written = bridged(broker, b"early")
    assert routed is QUEUED
    assert [d.message.body for d in deliveries] == [b"first", b"early"]  # before its write
    await written
    assert broker.publish(Message(0, "orders", True, {BRIDGE_DUPLICATE_ID: ID}, b"again")) == (
        Routed((), duplicate=True)
    )

    broker = await brokers.restart(broker)
    deliveries = consume(broker, auto_ack=False)
    assert deliveries == [], "a message consumed before its write was written"
    repeat, written = bridged(broker, b"resent")
    assert repeat == Routed((), duplicate=True), "its id was not written"
    assert deliveries == []


@pytest_twisted.ensureDeferred
async def test_not_consumed_before_its_write_it_is_written_with_its_id(brokers: Brokers) -> None:
    broker = await brokers()
    await reserved(broker)
    broker.consume("orders", 1, lambda delivery: None, auto_ack=True)  # acknowledges none
    routed, written = bridged(broker, b"kept")
    assert routed is QUEUED
    await written

    broker = await brokers.restart(broker)
    deliveries = consume(broker, auto_ack=False)
    assert [d.message.body for d in deliveries] == [b"first", b"kept"]
    assert bridged(broker)[0] == Routed((), duplicate=True)


@pytest_twisted.ensureDeferred
async def test_a_consumer_that_acknowledges_later_gets_it_once_written(brokers: Brokers) -> None:
    broker = await brokers()
    await reserved(broker)
    deliveries = consume(broker, auto_ack=True)
    broker.consume("orders", 2, deliveries.append)  # a second consumer, acknowledging later
    routed, written = bridged(broker, b"late")
    assert routed is None, "queued before its write with a consumer acknowledging later"
    assert [d.message.body for d in deliveries] == [b"first"]
    await written
    assert [d.message.body for d in deliveries] == [b"first", b"late"]


@pytest_twisted.ensureDeferred
async def test_without_consumers_it_is_queued_once_written(brokers: Brokers) -> None:
    broker = await brokers()
    await reserved(broker)
    routed, written = bridged(broker)
    assert routed is None
    assert broker.queue("orders").depth == 1  # the first only
    await written
    assert broker.queue("orders").depth == 2


@pytest_twisted.ensureDeferred
async def test_a_repeat_waits_for_the_write_then_is_a_duplicate(brokers: Brokers) -> None:
    broker = await brokers()
    await reserved(broker)
    deliveries = consume(broker, auto_ack=True)
    first, first_written = bridged(broker, b"first send")
    repeat, repeat_written = bridged(broker, b"repeat")
    assert first is QUEUED and repeat is None  # the repeat waits for the first's write
    await first_written
    await repeat_written
    assert [d.message.body for d in deliveries] == [b"first", b"first send"]


@pytest_twisted.ensureDeferred
async def test_a_failed_write_leaves_the_message_queued_and_its_id_known(
    brokers: Brokers, monkeypatch: Any
) -> None:
    """The message may have been delivered: a repeat stays a duplicate, and the bridge
    hears that the outcome is unknown (``Unsettled``), not a refusal to send again."""
    broker = await brokers()
    await reserved(broker)
    deliveries = consume(broker, auto_ack=False)
    await broker.close_consumer("orders", 1)
    broker.consume("orders", 1, deliveries.append, auto_ack=True)  # acknowledges none
    store: Any = broker.store
    monkeypatch.setattr(store, "_run_operations", lambda operations: fail(StoreError("disk full")))
    routed, written = bridged(broker, b"unwritten")
    assert routed is QUEUED
    with pytest.raises(Unsettled, match="disk full"):
        await written
    assert deliveries[-1].message.body == b"unwritten"
    assert bridged(broker)[0] == Routed((), duplicate=True)


@pytest_twisted.ensureDeferred
async def test_a_resend_marked_as_sent_before_is_written_first_and_redelivered(
    brokers: Brokers,
) -> None:
    """The bridge's resend of what a killed target may have delivered before its id was
    written: not a repeat the target knows, so it is delivered, as a redelivery."""
    broker = await brokers()
    await reserved(broker)
    deliveries = consume(broker, auto_ack=True)
    routed, written = bridged(broker, b"resent", **{DELIVERY_COUNT: 1})
    assert routed is None
    await written
    assert [(d.message.body, d.delivery_count) for d in deliveries][-1] == (b"resent", 2)


def large_bridged(broker: Broker, body: bytes) -> tuple[Any, Deferred[None], str]:
    """The bridge's large send of ``body`` as the core head routes it once its last chunk
    is in (its id allocated, its body a file): what ``publish_then`` returned, its
    write's outcome, and the file."""
    message_id = broker.allocate_id()
    path = Path(broker.store.large_body_path(message_id))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    then, written = told()
    message = Message(
        message_id,
        "orders",
        True,
        {BRIDGE_DUPLICATE_ID: ID},
        b"",
        large=LargeBody(str(path), len(body)),
    )
    return broker.publish_then(message, then, early=True), written, str(path)


def synced(monkeypatch: Any) -> list[str]:
    """The large bodies the SQLite store's writer syncs from now on."""
    paths: list[str] = []
    sync = sqlite_operations.sync_body

    def recorded(path: str) -> None:
        paths.append(path)
        sync(path)

    monkeypatch.setattr(sqlite_operations, "sync_body", recorded)
    return paths


@pytest_twisted.ensureDeferred
async def test_a_large_one_consumed_before_its_write_leaves_its_body_unsynced(
    brokers: Brokers, monkeypatch: Any
) -> None:
    """Its body file is deleted as any consumed body is, never synced: the target of a
    bridge of large messages to an ``ack:auto`` consumer writes no body to its disk."""
    broker = await brokers()
    await reserved(broker)
    deliveries = consume(broker, auto_ack=True)
    syncs = synced(monkeypatch)
    routed, written, path = large_bridged(broker, b"L" * 300_000)
    assert routed is QUEUED
    assert deliveries[-1].message.large is not None  # delivered before its write
    await written
    assert await brokers.gone(path)
    assert syncs == []

    broker = await brokers.restart(broker)
    deliveries = consume(broker, auto_ack=False)
    assert deliveries == [], "a large message consumed before its write was written"
    assert bridged(broker)[0] == Routed((), duplicate=True), "its id was not written"


@pytest_twisted.ensureDeferred
async def test_a_large_one_not_consumed_before_its_write_is_written_with_its_body(
    brokers: Brokers, monkeypatch: Any
) -> None:
    broker = await brokers()
    await reserved(broker)
    broker.consume("orders", 1, lambda delivery: None, auto_ack=True)  # acknowledges none
    syncs = synced(monkeypatch)
    routed, written, path = large_bridged(broker, b"K" * 300_000)
    assert routed is QUEUED
    await written
    assert syncs == [path]

    broker = await brokers.restart(broker)
    deliveries = consume(broker, auto_ack=False)
    (kept,) = [d.message for d in deliveries if d.message.large is not None]
    assert kept.large is not None and Path(kept.large.path).read_bytes() == b"K" * 300_000


@pytest_twisted.ensureDeferred
async def test_a_large_one_for_a_consumer_that_acknowledges_later_waits_for_its_write(
    brokers: Brokers,
) -> None:
    broker = await brokers()
    await reserved(broker)
    deliveries = consume(broker, auto_ack=False)
    routed, written, _ = large_bridged(broker, b"W" * 300_000)
    assert routed is None, "a large message queued before its write for a later ack"
    assert [d.message.body for d in deliveries] == [b"first"]
    await written
    assert deliveries[-1].message.large is not None
    assert bridged(broker)[0] == Routed((), duplicate=True)
