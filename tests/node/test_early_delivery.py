"""Early delivery over the real SQLite store: a durable send without a duplicate id is
queued while its write runs, one consumed before its batch reached the writer is never
written, and its id is never given again, even after a restart."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from bridge.message import NO_HEADERS, Message
from bridge.node.broker import Broker, Routed
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


def numbered(
    broker: Broker,
    address: str,
    headers: dict[str, str] | None = None,
    duplicate_id: bytes | None = None,
) -> tuple[Any, Deferred]:
    """A head's send (numbered as it is built, as the STOMP head numbers its SENDs) asked to
    queue early: what ``publish_then`` returned, and its write's outcome."""
    then, written = told()
    message = Message(
        broker.allocate_id(), address, True, headers or NO_HEADERS, b"x" * 100, duplicate_id
    )
    return broker.publish_then(message, then, early=True, numbered=True), written


def routes(broker: Broker, monkeypatch: Any) -> list[str]:
    """The addresses of the sends the router's general ``route`` takes from here on."""
    router = broker.publish_then.__self__  # type: ignore[attr-defined]
    general = router.route
    taken: list[str] = []

    def counted(message: Message, *args: Any, **kwargs: Any) -> Any:
        taken.append(message.address)
        return general(message, *args, **kwargs)

    monkeypatch.setattr(router, "route", counted)
    return taken


@pytest_twisted.ensureDeferred
async def test_the_commonest_send_is_queued_early_the_short_way(
    brokers: Brokers, monkeypatch
) -> None:
    """A numbered durable send without headers or duplicate id, to an address with its one
    durable queue: queued early without the router's general ``route``, delivered in order,
    and written (or not, if consumed first) as ``route`` would have."""
    broker = await brokers()
    await reserved(broker)
    taken = routes(broker, monkeypatch)
    deliveries = take(broker, "orders")
    results = [numbered(broker, "orders") for _ in range(3)]
    assert [routed for routed, _ in results] == [QUEUED] * 3
    assert taken == []
    ids = [d.message.id for d in deliveries]
    assert ids == sorted(ids) and len(ids) == 4
    for _, written in results:
        await written


async def _two_queues(broker: Broker) -> str:
    await broker.create_queue("news.eu-1", "news.eu", durable=True)
    await broker.create_queue("news.eu-2", "news.eu", durable=True)
    return "news.eu"


async def _filtered(broker: Broker) -> str:
    await broker.create_queue("news.eu-sport", "news.eu", durable=True, filter="topic = 'sport'")
    return "news.eu"


async def _non_durable(broker: Broker) -> str:
    await broker.create_queue("news.eu-temp", "news.eu", durable=False)
    return "news.eu"


async def _orders(broker: Broker) -> str:
    return "orders"


@pytest.mark.parametrize(
    "case",
    [
        (_orders, {"region": "eu"}, None, "queued"),  # headers: the general way, still early
        (_orders, None, b"id-1", "written first"),  # a repeat to detect: once written
        (_two_queues, None, None, "queued"),  # two queues
        (_filtered, None, None, "dropped"),  # a filter (that this send does not pass)
        (_non_durable, None, None, "routed"),  # no durable queue: nothing to write
    ],
)
@pytest_twisted.ensureDeferred
async def test_any_other_send_takes_the_general_way(
    brokers: Brokers, monkeypatch, case: tuple[Any, dict[str, str] | None, bytes | None, str]
) -> None:
    address, headers, duplicate_id, expected = case
    broker = await brokers()
    await reserved(broker)
    name = await address(broker)
    taken = routes(broker, monkeypatch)
    routed, written = numbered(broker, name, headers, duplicate_id)
    assert taken == [name]
    if expected == "queued":
        assert routed is QUEUED
        await written
    elif expected == "written first":
        assert routed is None
        await written
    else:
        assert isinstance(routed, Routed)
        assert (routed.queues == ()) == (expected == "dropped")


@pytest_twisted.ensureDeferred
async def test_a_full_or_paging_address_takes_the_general_way(
    brokers: Brokers, monkeypatch
) -> None:
    """``orders`` full under PAGE: the send is paged, as ``route`` pages it."""
    broker = await brokers(
        address=[
            {
                "name": "orders",
                "routing": "anycast",
                "max-size-bytes": 1000,
                "address-full-policy": "PAGE",
            }
        ]
    )
    await reserved(broker)
    memory = broker.addresses["orders"].memory
    for _ in range(100):  # (about ten sends fill it)
        if memory.full:
            break
        routed, written = numbered(broker, "orders")
        await written
    assert memory.full
    taken = routes(broker, monkeypatch)
    routed, written = numbered(broker, "orders")
    assert taken == ["orders"]
    assert routed is None  # paged: told once the page is written
    await written
    assert memory.paged_messages == 1


@pytest_twisted.ensureDeferred
async def test_a_send_past_the_reserved_ids_takes_the_general_way(
    brokers: Brokers, monkeypatch
) -> None:
    """A numbered send whose id the store has not reserved yet is queued only once written
    (an id seen before its write must be one no restart gives again)."""
    broker = await brokers()
    await reserved(broker)
    router = broker.publish_then.__self__  # type: ignore[attr-defined]
    router.next_id += 2 * ID_BLOCK
    taken = routes(broker, monkeypatch)
    routed, written = numbered(broker, "orders")
    assert taken == ["orders"]
    assert routed is None
    await written
