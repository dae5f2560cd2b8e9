"""Core bridges' duplicate ids on the target node, over the real SQLite store: each address
keeps them in a cache of their own, stored with the message and recovered on start, and
every address gets its recovered ids back however it comes to exist again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from bridge.message import BRIDGE_DUPLICATE_ID, LargeBody, Message
from bridge.node.broker import AddressFull, AddressNotFound, Broker, Routed
from bridge.store.errors import InvalidOperation
from tests.node.test_broker import Brokers, brokers, take

__all__ = ["brokers"]


def bridged(
    address: str, bridge_id: bytes, body: bytes = b"x", *, durable: bool = True, **fields: Any
) -> Message:
    """A message as a bridge forwards it: its bridge id in the header."""
    return Message(0, address, durable, {BRIDGE_DUPLICATE_ID: bridge_id}, body, **fields)


async def publish(broker: Broker, message: Message, tx: Any = None) -> Routed:
    routed = broker.publish(message, tx=tx)
    return await routed if isinstance(routed, Deferred) else routed


def cache_size(size: int) -> dict[str, Any]:
    return {"address-setting": [{"match": "#", "id-cache-size": size}]}


@pytest_twisted.ensureDeferred
async def test_a_bridge_repeat_is_confirmed_and_dropped_even_after_a_restart(
    brokers: Brokers,
) -> None:
    broker = await brokers()
    assert await publish(broker, bridged("orders", b"node-a:1", b"one")) == Routed(("orders",))
    repeat = await publish(broker, bridged("orders", b"node-a:1", b"one again"))
    assert repeat == Routed((), duplicate=True)
    broker = await brokers.restart(broker)
    address = broker.addresses["orders"]
    assert b"node-a:1" in address.bridge_duplicates and len(address.bridge_duplicates) == 1
    assert len(address.duplicates) == 0  # not in the producers' cache
    repeat = await publish(broker, bridged("orders", b"node-a:1", b"after the restart"))
    assert repeat.duplicate
    assert not (await publish(broker, bridged("orders", b"node-a:2", b"two"))).duplicate
    assert [e.message.body for e in broker.queue("orders").browse()] == [b"one", b"two"]


@pytest_twisted.ensureDeferred
async def test_producer_ids_and_bridge_ids_do_not_evict_each_other(brokers: Brokers) -> None:
    broker = await brokers(**cache_size(2))
    await broker.send("orders", b"p", durable=True, duplicate_id=b"p:1")
    await broker.send("orders", b"p", durable=True, duplicate_id=b"p:2")
    for n in range(5):  # more bridge ids than a cache holds
        await publish(broker, bridged("orders", b"b:%d" % n))
    for restarted in (False, True):
        if restarted:
            broker = await brokers.restart(broker)
        for producer_id in (b"p:1", b"p:2"):
            again = await broker.send("orders", b"p", durable=True, duplicate_id=producer_id)
            assert again.duplicate, (restarted, producer_id)
        assert (await publish(broker, bridged("orders", b"b:4"))).duplicate
        assert (await publish(broker, bridged("orders", b"b:3"))).duplicate
        assert len(broker.addresses["orders"].bridge_duplicates) == 2
    # And producers' ids do not push out bridge ids either.
    for n in range(3, 6):
        await broker.send("orders", b"p", durable=True, duplicate_id=b"p:%d" % n)
    broker = await brokers.restart(broker)
    assert (await publish(broker, bridged("orders", b"b:4"))).duplicate


@pytest_twisted.ensureDeferred
async def test_a_forwarded_message_is_checked_by_its_bridge_id_only(brokers: Brokers) -> None:
    broker = await brokers()
    await broker.send("orders", b"direct", durable=True, duplicate_id=b"p:1")
    # The producer's id was checked where it was first sent: the bridge id decides here.
    forwarded = bridged("orders", b"b:1", b"forwarded", duplicate_id=b"p:1")
    assert not (await publish(broker, forwarded)).duplicate
    assert (await publish(broker, forwarded)).duplicate
    producers = broker.addresses["orders"].duplicates
    assert b"p:1" in producers and len(producers) == 1


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "auto-created"])
@pytest_twisted.ensureDeferred
async def test_recovered_ids_reach_an_address_that_no_queue_brings_back(
    brokers: Brokers, declared: bool
) -> None:
    """A multicast address whose subscriptions are gone comes back from the configuration,
    or on first use, with the ids the store kept for it."""
    name = "feed" if declared else "news.feed"
    extra = {"address": [{"name": "feed", "routing": "multicast"}]} if declared else {}
    broker = await brokers(**extra)
    await broker.create_queue("sub", name, durable=True)
    await broker.send(name, b"p", durable=True, duplicate_id=b"p:1")
    await publish(broker, bridged(name, b"b:1"))
    await broker.delete_queue("sub")
    broker = await brokers.restart(broker)
    assert "sub" not in broker.queues
    assert broker.has_address(name) is declared
    assert (await broker.send(name, b"p", durable=True, duplicate_id=b"p:1")).duplicate
    assert (await publish(broker, bridged(name, b"b:1"))).duplicate
    assert not (await publish(broker, bridged(name, b"b:2"))).duplicate


@pytest_twisted.ensureDeferred
async def test_a_rolled_back_bridge_send_leaves_its_id_free(brokers: Brokers) -> None:
    broker = await brokers()
    tx = broker.begin()
    await publish(broker, bridged("orders", b"b:1", b"never"), tx)
    assert (await publish(broker, bridged("orders", b"b:1"), tx)).duplicate
    await broker.rollback(tx)
    assert not (await publish(broker, bridged("orders", b"b:1", b"resent"))).duplicate
    tx = broker.begin()
    await publish(broker, bridged("orders", b"b:2", b"committed"), tx)
    await broker.commit(tx)
    broker = await brokers.restart(broker)
    assert [e.message.body for e in broker.queue("orders").browse()] == [b"resent", b"committed"]
    assert (await publish(broker, bridged("orders", b"b:1"))).duplicate
    assert (await publish(broker, bridged("orders", b"b:2"))).duplicate


@pytest_twisted.ensureDeferred
async def test_a_full_address_under_fail_records_no_bridge_id(brokers: Brokers) -> None:
    address = {"name": "orders", "routing": "anycast", "max-size-bytes": 1000}
    broker = await brokers(address=[{**address, "address-full-policy": "FAIL"}])
    await publish(broker, Message(0, "orders", False, {}, b"f" * 1000))
    refused = bridged("orders", b"b:1", durable=False)
    with pytest.raises(AddressFull):
        broker.publish(refused)
    deliveries = take(broker, "orders")
    await broker.acknowledge("orders", 1, deliveries[0].delivery_id)
    assert broker.publish(refused) == Routed(("orders",))  # the id was not kept


@pytest_twisted.ensureDeferred
async def test_a_large_bridge_repeat_loses_its_body_file(brokers: Brokers) -> None:
    broker = await brokers()

    def large(body: bytes) -> Message:
        message_id = broker.allocate_id()
        path = Path(broker.store.large_body_path(message_id))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        return bridged("orders", b"b:big", b"", large=LargeBody(str(path), len(body))).with_id(
            message_id
        )

    first, repeat = large(b"l" * 200_000), large(b"l" * 200_000)
    assert not (await publish(broker, first)).duplicate
    assert (await publish(broker, repeat)).duplicate
    assert first.large is not None and Path(first.large.path).exists()
    assert repeat.large is not None and await brokers.gone(repeat.large.path)


@pytest_twisted.ensureDeferred
async def test_a_paged_bridge_send_stores_its_id(brokers: Brokers) -> None:
    broker = await brokers(address=[{"name": "orders", "max-size-bytes": 1000}])
    await publish(broker, Message(0, "orders", True, {}, b"f" * 1000))
    assert broker.addresses["orders"].memory.full
    assert not (await publish(broker, bridged("orders", b"b:paged"))).duplicate
    assert broker.addresses["orders"].memory.paged_messages == 1
    broker = await brokers.restart(broker)
    assert (await publish(broker, bridged("orders", b"b:paged"))).duplicate


@pytest_twisted.ensureDeferred
async def test_a_cache_of_size_zero_keeps_and_stores_no_id(brokers: Brokers) -> None:
    broker = await brokers(**cache_size(0))
    for _ in range(2):
        assert not (await publish(broker, bridged("orders", b"b:1"))).duplicate
        routed = await broker.send("orders", b"p", durable=True, duplicate_id=b"p:1")
        assert not routed.duplicate
    assert broker.queue("orders").depth == 4


@pytest_twisted.ensureDeferred
async def test_addresses_starting_with_a_dollar_are_the_nodes_own(brokers: Brokers) -> None:
    broker = await brokers()
    assert not broker.may_create_address("$bridge.orders")
    with pytest.raises(AddressNotFound, match=r"'\$bridge\.orders' does not exist and names"):
        broker.send("$bridge.orders", b"", durable=True)
    with pytest.raises(AddressNotFound, match="reserved for the node"):
        await broker.create_queue("q", "$x", durable=True)
    assert not broker.has_address("$bridge.orders") and not broker.has_address("$x")


@pytest.mark.parametrize("paged", [False, True], ids=["stored", "paged"])
@pytest_twisted.ensureDeferred
async def test_a_send_whose_write_failed_leaves_its_id_free(brokers: Brokers, paged: bool) -> None:
    """The store refuses a message it cannot encode (a header int beyond 64 bits): the send
    failed, so its resend, with the same id, must get through rather than be dropped."""
    broker = await brokers(address=[{"name": "orders", "max-size-bytes": 1000}])
    if paged:
        await publish(broker, Message(0, "orders", True, {}, b"f" * 1000))
    for message in (
        bridged("orders", b"b:1"),
        Message(0, "orders", True, {}, b"p", duplicate_id=b"p:1"),
    ):
        unwritable = attrs.evolve(message, headers={**message.headers, "n": 1 << 64})
        with pytest.raises(InvalidOperation, match="does not fit in 64 bits"):
            await publish(broker, unwritable)
        assert not (await publish(broker, message)).duplicate
        assert (await publish(broker, message)).duplicate
