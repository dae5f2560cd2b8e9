"""The node's core over the real SQLite store: durable sends and acks survive a restart,
non-durable ones do not, redeliveries stay counted, duplicates stay dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from bridge.config.node import parse_node_config
from bridge.message import Message
from bridge.node.broker import AddressNotFound, Broker, NodeError, QueueNotFound, Routed
from bridge.node.queue import Delivery
from bridge.store.sqlite import SQLiteMessageStore


def config(tmp_path: Path, **extra: Any):  # type: ignore[no-untyped-def]
    document: dict[str, Any] = {
        "node": {"name": "a", "data-dir": "data"},
        "address": [{"name": "orders", "routing": "anycast"}],
        "address-setting": [
            {"match": "private.#", "auto-create-addresses": False},
            {"match": "news.#", "default-routing-type": "multicast"},
        ],
        **extra,
    }
    return parse_node_config(document, tmp_path / "node.toml")


class Brokers:
    """Opens brokers on one data directory; closes any still open when the test ends."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.open_ones: list[Broker] = []
        self.extra: dict[str, Any] = {}

    async def __call__(self, **extra: Any) -> Broker:
        """A broker; ``extra`` configuration keys stay for its restarts."""
        self.extra = extra or self.extra
        cfg = config(self.tmp_path, **self.extra)
        broker = Broker(cfg, SQLiteMessageStore(cfg.data_dir, reactor))
        await broker.open()
        self.open_ones.append(broker)
        return broker

    async def restart(self, broker: Broker) -> Broker:
        await self.close(broker)
        return await self()

    async def close(self, broker: Broker) -> None:
        self.open_ones.remove(broker)
        await broker.close()

    @staticmethod
    async def gone(path: str) -> bool:
        """Whether the file at ``path`` is deleted within 5 s: a large body a send or an
        acknowledgement dropped goes on the store's writer thread, soon after."""
        for _ in range(500):
            if not Path(path).exists():
                return True
            await deferLater(reactor, 0.01, lambda: None)
        return False


@pytest.fixture
def brokers(tmp_path: Path):  # type: ignore[no-untyped-def]
    opened = Brokers(tmp_path)
    yield opened
    for broker in list(opened.open_ones):
        pytest_twisted.blockon(Deferred.fromCoroutine(opened.close(broker)))


def take(broker: Broker, queue: str, consumer_id: int = 1) -> list[Delivery]:
    deliveries: list[Delivery] = []
    broker.consume(queue, consumer_id, deliveries.append)
    return deliveries


@pytest_twisted.ensureDeferred
async def test_a_durable_message_is_queued_once_stored_and_survives_a_restart(brokers):
    broker = await brokers()
    assert "orders" in broker.queues  # a declared anycast address has its queue
    sent = broker.send("orders", b"one", {"region": "eu"}, durable=True)
    assert broker.queue("orders").depth == 0  # not before the store holds it
    routed = await sent
    assert routed.queues == ("orders",)
    assert broker.queue("orders").depth == 1
    await broker.send("orders", b"two", durable=False)
    broker = await brokers.restart(broker)
    deliveries = take(broker, "orders")
    assert [(d.message.body, d.message.headers) for d in deliveries] == [(b"one", {"region": "eu"})]
    first_id = deliveries[0].message.id
    later = await broker.send("orders", b"three", durable=True)
    assert later.queues == ("orders",)
    assert deliveries[-1].message.id > first_id  # ids go on above what was stored
    await brokers.close(broker)


@pytest_twisted.ensureDeferred
async def test_publish_answers_at_once_unless_a_store_write_must_come_first(brokers):
    broker = await brokers()
    deliveries = take(broker, "orders")
    quick = broker.publish(Message(0, "orders", False, {}, b"fast"))
    assert quick == Routed(("orders",))  # not durable: a plain value, already queued
    assert [d.message.body for d in deliveries] == [b"fast"]
    stored = broker.publish(Message(0, "orders", True, {}, b"safe", b"d1"))
    assert isinstance(stored, Deferred)
    assert await stored == Routed(("orders",))
    assert broker.publish(Message(0, "orders", True, {}, b"again", b"d1")) == Routed(
        (), duplicate=True
    )
    ids = [d.message.id for d in deliveries]
    assert ids == sorted(set(ids)) and 0 not in ids  # the node numbers what it routes
    await brokers.close(broker)


@pytest_twisted.ensureDeferred
async def test_publish_then_tells_a_callable_once_the_store_has_the_send(brokers):
    broker = await brokers()
    deliveries = take(broker, "orders")
    told: list[object] = []
    assert broker.publish_then(Message(0, "orders", False, {}, b"fast"), told.append) == Routed(
        ("orders",)
    )
    assert told == [] and [d.message.body for d in deliveries] == [b"fast"]
    done: Deferred[None] = Deferred()

    def then(failure: object) -> None:
        told.append(failure)
        done.callback(None)

    assert broker.publish_then(Message(0, "orders", True, {}, b"safe"), then) is None
    assert len(deliveries) == 1  # queued only once stored
    await done
    assert told == [None] and [d.message.body for d in deliveries] == [b"fast", b"safe"]
    # with a duplicate id stored alongside, it is told the same way
    again: Deferred[None] = Deferred()
    assert broker.publish_then(Message(0, "orders", True, {}, b"d", b"d1"), again.callback) is None
    assert await again is None and len(deliveries) == 3
    await brokers.close(broker)
    memory = broker.addresses["orders"].memory
    before = memory.size
    refused: list[Any] = []
    assert broker.publish_then(Message(0, "orders", True, {}, b"late"), refused.append) is None
    assert len(refused) == 1 and "not open" in refused[0].getErrorMessage()
    assert memory.size == before  # what it held meanwhile is given back


@pytest_twisted.ensureDeferred
async def test_acknowledged_messages_stay_gone_and_redeliveries_stay_counted(brokers):
    broker = await brokers()
    for body in (b"a", b"b", b"c"):
        await broker.send("orders", body, durable=True)
    deliveries = take(broker, "orders")
    await broker.acknowledge("orders", 1, deliveries[0].delivery_id)
    await broker.close_consumer("orders", 1)  # b and c go back, delivered once
    broker = await brokers.restart(broker)
    again = take(broker, "orders", consumer_id=2)
    assert [(d.message.body, d.delivery_count) for d in again] == [(b"b", 2), (b"c", 2)]
    await broker.acknowledge("orders", 2, again[-1].delivery_id, cumulative=True)
    broker = await brokers.restart(broker)
    assert broker.queue("orders").depth == 0
    await brokers.close(broker)


@pytest_twisted.ensureDeferred
async def test_nack_requeues_with_a_count_or_drops_for_good(brokers):
    broker = await brokers()
    await broker.send("orders", b"retry", durable=True)
    await broker.send("orders", b"poison", durable=True)
    deliveries: list[Delivery] = []
    broker.consume("orders", 1, deliveries.append, credits=0)
    broker.queue("orders").add_credits(1, 1)
    await broker.nack("orders", 1, deliveries[0].delivery_id, requeue=True)
    broker.queue("orders").add_credits(1, 10_000)
    assert [(d.message.body, d.delivery_count) for d in deliveries] == [
        (b"retry", 1),
        (b"retry", 2),
        (b"poison", 1),
    ]
    poison = deliveries[-1]
    await broker.nack("orders", 1, poison.delivery_id, requeue=False)
    broker = await brokers.restart(broker)
    assert [(e.message.body, e.delivery_count) for e in broker.queue("orders").browse()] == [
        (b"retry", 2)
    ]
    await brokers.close(broker)


@pytest_twisted.ensureDeferred
async def test_a_duplicate_id_is_dropped_even_after_a_restart(brokers):
    broker = await brokers()
    assert not (
        await broker.send("orders", b"x", durable=True, duplicate_id=b"bridge-a:7")
    ).duplicate
    assert (await broker.send("orders", b"x", durable=True, duplicate_id=b"bridge-a:7")).duplicate
    broker = await brokers.restart(broker)
    assert (await broker.send("orders", b"x", durable=True, duplicate_id=b"bridge-a:7")).duplicate
    assert broker.queue("orders").depth == 1
    await brokers.close(broker)


@pytest_twisted.ensureDeferred
async def test_multicast_subscriptions_durable_and_not(brokers):
    broker = await brokers()
    await broker.create_queue("news.eu-durable", "news.eu", durable=True)
    await broker.create_queue("news.eu-temp", "news.eu", durable=False)
    await broker.create_queue("news.eu-sport", "news.eu", durable=True, filter="topic = 'sport'")
    routed = await broker.send("news.eu", b"goal", {"topic": "sport"}, durable=True)
    assert sorted(routed.queues) == ["news.eu-durable", "news.eu-sport", "news.eu-temp"]
    routed = await broker.send("news.eu", b"rain", {"topic": "weather"}, durable=True)
    assert sorted(routed.queues) == ["news.eu-durable", "news.eu-temp"]
    broker = await brokers.restart(broker)
    assert "news.eu-temp" not in broker.queues
    assert [e.message.body for e in broker.queue("news.eu-durable").browse()] == [b"goal", b"rain"]
    assert [e.message.body for e in broker.queue("news.eu-sport").browse()] == [b"goal"]
    routed = await broker.send("news.eu", b"rain", {"topic": "weather"}, durable=True)
    assert routed.queues == ("news.eu-durable",)  # the recovered filter still applies
    await brokers.close(broker)


@pytest_twisted.ensureDeferred
async def test_refusals_name_what_is_wrong(brokers):
    broker = await brokers()
    with pytest.raises(AddressNotFound, match=r"'private\.x' does not exist and auto-create"):
        broker.send("private.x", b"", durable=False)
    with pytest.raises(NodeError, match="queue 'orders' already exists"):
        await broker.create_queue("orders", "orders", durable=True)
    with pytest.raises(QueueNotFound, match="no queue 'missing'"):
        broker.consume("missing", 1, print)
    deliveries = take(broker, "orders")
    with pytest.raises(NodeError, match="queue 'orders' has 1 consumer"):
        await broker.delete_queue("orders")
    await broker.close_consumer("orders", 1)
    assert deliveries == []
    await broker.delete_queue("orders")
    await brokers.close(broker)


@pytest_twisted.ensureDeferred
async def test_anycast_addresses_get_their_queue_on_first_use(brokers):
    broker = await brokers()
    routed = await broker.send("invoices", b"first", durable=True)
    assert routed.queues == ("invoices",)
    assert broker.is_durable("invoices")
    await broker.delete_queue("orders")
    routed = await broker.send("orders", b"again", durable=True)
    assert routed.queues == ("orders",)  # recreated, as Artemis's auto-create-queues does
    broker.auto_create("refunds")
    assert broker.queue("refunds").depth == 0
    broker = await brokers.restart(broker)
    assert [e.message.body for e in broker.queue("invoices").browse()] == [b"first"]
    assert [e.message.body for e in broker.queue("orders").browse()] == [b"again"]
    assert "refunds" in broker.queues
    with pytest.raises(AddressNotFound):
        broker.auto_create("private.y")
    await brokers.close(broker)


@pytest_twisted.ensureDeferred
async def test_a_graceful_close_returns_unacknowledged_messages_counted(brokers):
    broker = await brokers()
    await broker.send("orders", b"in flight", durable=True)
    (delivery,) = take(broker, "orders")
    assert delivery.delivery_count == 1
    broker = await brokers.restart(broker)  # the consumer never acknowledged it
    (again,) = take(broker, "orders")
    assert (again.message.body, again.delivery_count) == (b"in flight", 2)


@pytest_twisted.ensureDeferred
async def test_a_committed_transaction_takes_effect_whole(brokers):
    broker = await brokers()
    await broker.send("orders", b"old", durable=True)
    deliveries = take(broker, "orders")
    tx = broker.begin()
    await broker.send("orders", b"new 1", durable=True, tx=tx)
    await broker.send("orders", b"new 2", durable=False, tx=tx)
    await broker.acknowledge("orders", 1, deliveries[0].delivery_id, tx=tx)
    assert [d.message.body for d in deliveries] == [b"old"]  # nothing visible yet
    await broker.commit(tx)
    assert [d.message.body for d in deliveries] == [b"old", b"new 1", b"new 2"]
    broker = await brokers.restart(broker)
    assert [(e.message.body, e.delivery_count) for e in broker.queue("orders").browse()] == [
        (b"new 1", 1)  # delivered once before the restart; "old" was acknowledged
    ]


@pytest_twisted.ensureDeferred
async def test_a_rolled_back_transaction_leaves_no_trace_and_gives_acks_back(brokers):
    broker = await brokers()
    await broker.send("orders", b"kept", durable=True)
    deliveries = take(broker, "orders")
    tx = broker.begin()
    await broker.send("orders", b"never", durable=True, tx=tx, duplicate_id=b"p:1")
    await broker.acknowledge("orders", 1, deliveries[0].delivery_id, tx=tx)
    await broker.rollback(tx)
    # Given back, and redelivered at once to the consumer still there: counted twice.
    assert [(d.message.body, d.delivery_count) for d in deliveries] == [(b"kept", 1), (b"kept", 2)]
    await broker.close_consumer("orders", 1)
    assert [(e.message.body, e.delivery_count) for e in broker.queue("orders").browse()] == [
        (b"kept", 2)
    ]
    resent = await broker.send("orders", b"again", durable=True, duplicate_id=b"p:1")
    assert not resent.duplicate  # the rolled-back send did not burn its duplicate id
    broker = await brokers.restart(broker)
    assert [e.message.body for e in broker.queue("orders").browse()] == [b"kept", b"again"]
    again = take(broker, "orders")
    assert [(d.message.body, d.delivery_count) for d in again] == [(b"kept", 3), (b"again", 1)]
