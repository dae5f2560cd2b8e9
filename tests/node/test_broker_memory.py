"""The node's memory bound over the real SQLite store: each address-full policy, paging
that reads bodies back in order, the global limit, and large messages' body files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from bridge.message import LargeBody, Message
from bridge.node.broker import AddressFull, Broker, Routed
from bridge.node.queue import Delivery
from tests.node.test_broker import Brokers, brokers, take

__all__ = ["brokers"]

SIZE = Message(0, "orders", False, {}, b"x" * 100).size
"""Every message of these tests is this big (100-byte bodies)."""


def limited(policy: str, max_size: int = 10 * SIZE, **node: Any) -> dict[str, Any]:
    """Configuration keys for an ``orders`` address of ``max_size`` bytes under ``policy``."""
    return {
        "node": {"name": "a", "data-dir": "data", **node},
        "address": [
            {
                "name": "orders",
                "routing": "anycast",
                "max-size-bytes": max_size,
                "address-full-policy": policy,
            },
            {"name": "news", "routing": "multicast", "max-size-bytes": max_size},
        ],
    }


async def fill(broker: Broker, count: int, *, durable: bool, address: str = "orders") -> None:
    for n in range(count):
        result = broker.publish(Message(0, address, durable, {}, b"%0100d" % n))
        if isinstance(result, Deferred):
            await result


def bodies(deliveries: list[Delivery]) -> list[int]:
    return [int(d.message.body) for d in deliveries]


async def drain(
    broker: Broker, queue: str, deliveries: list[Delivery], count: int, acked: int = 0
) -> None:
    """Acknowledge deliveries (from index ``acked``) as they come until ``count`` arrived
    (paged ones are read back from the store meanwhile, on its writer thread: waited for
    up to 10 s, not a number of turns, which a loaded machine makes short)."""
    from twisted.internet import reactor

    deadline = reactor.seconds() + 10
    while reactor.seconds() < deadline:
        while acked < len(deliveries):
            await broker.acknowledge(queue, 1, deliveries[acked].delivery_id)
            acked += 1
        if acked >= count:
            return
        await _turn()
    raise AssertionError(f"{len(deliveries)} of {count} messages arrived")


def _turn() -> Deferred[None]:
    from twisted.internet import reactor

    waited: Deferred[None] = Deferred()
    reactor.callLater(0.001, waited.callback, None)
    return waited


@pytest.mark.parametrize("durable", [True, False])
@pytest_twisted.ensureDeferred
async def test_page_keeps_ten_times_the_limit_out_of_memory_and_delivers_in_order(
    brokers: Brokers, durable: bool
) -> None:
    broker = await brokers(**limited("PAGE"))
    memory = broker.addresses["orders"].memory
    await fill(broker, 100, durable=durable)
    assert memory.size == 10 * SIZE
    assert memory.paged_messages == 90 and memory.paged_bytes == 90 * SIZE
    queue = broker.queue("orders")
    assert queue.depth == 100 and queue.paged == 90
    deliveries = take(broker, "orders")
    await drain(broker, "orders", deliveries, 100)
    assert bodies(deliveries) == list(range(100))
    assert memory.size == 0 and memory.paged_messages == 0 and not memory.paging
    assert memory.paged_total == 90


@pytest_twisted.ensureDeferred
async def test_paging_goes_on_until_every_paged_message_is_back(brokers: Brokers) -> None:
    broker = await brokers(**limited("PAGE"))
    memory = broker.addresses["orders"].memory
    await fill(broker, 11, durable=False)
    assert memory.paged_messages == 1
    deliveries = take(broker, "orders")
    await broker.acknowledge("orders", 1, deliveries[0].delivery_id)
    assert not memory.full
    # Room again, but a paged message is still out: the next is paged too, behind it.
    await fill(broker, 1, durable=False)
    assert memory.paged_messages >= 1
    await drain(broker, "orders", deliveries, 12, acked=1)
    assert bodies(deliveries) == [*range(11), 0]


@pytest_twisted.ensureDeferred
async def test_durable_paged_messages_survive_a_restart(brokers: Brokers) -> None:
    broker = await brokers(**limited("PAGE"))
    await fill(broker, 30, durable=True)
    await fill(broker, 5, durable=False)
    broker = await brokers.restart(broker)
    deliveries = take(broker, "orders")
    await drain(broker, "orders", deliveries, 30)
    assert bodies(deliveries) == list(range(30))


@pytest_twisted.ensureDeferred
async def test_a_restart_reads_no_more_bodies_than_the_global_limit(brokers: Brokers) -> None:
    broker = await brokers(**limited("BLOCK", max_size=-1, **{"global-max-size": 5 * SIZE}))
    await fill(broker, 5, durable=True)
    broker.memory.max_size = -1  # let more in, as a larger limit before the restart would
    await fill(broker, 15, durable=True)
    broker = await brokers.restart(broker)
    memory = broker.addresses["orders"].memory
    assert memory.size == 5 * SIZE and memory.paged_messages == 15
    await fill(broker, 1, durable=True)  # full: BLOCK takes it, behind the paged ones
    deliveries = take(broker, "orders")
    await drain(broker, "orders", deliveries, 21)
    assert bodies(deliveries) == [*range(5), *range(15), 0]


@pytest_twisted.ensureDeferred
async def test_a_multicast_message_is_paged_for_each_subscription(brokers: Brokers) -> None:
    broker = await brokers(**limited("PAGE"))
    await broker.create_queue("news.a", "news", durable=True)
    await broker.create_queue("news.b", "news", durable=False)
    await fill(broker, 15, durable=True, address="news")
    memory = broker.addresses["news"].memory
    size = Message(0, "news", True, {}, b"x" * 100).size
    # Six messages, in two queues each, fill the 1320 bytes; the rest are paged.
    assert memory.size == 12 * size and 10 * size < memory.max_size <= 12 * size
    assert memory.paged_messages == 18
    for name in ("news.a", "news.b"):
        deliveries = take(broker, name)
        await drain(broker, name, deliveries, 15)
        assert bodies(deliveries) == list(range(15))
    assert memory.paged_messages == 0 and memory.size == 0


@pytest_twisted.ensureDeferred
async def test_fail_refuses_sends_with_the_reason_and_records_no_duplicate_id(
    brokers: Brokers,
) -> None:
    broker = await brokers(**limited("FAIL"))
    await fill(broker, 10, durable=False)
    refused = Message(0, "orders", False, {}, b"x" * 100, duplicate_id=b"d1")
    with pytest.raises(AddressFull, match=r"address 'orders' is full .* FAIL"):
        broker.publish(refused)
    assert broker.addresses["orders"].memory.refused_total == 1
    deliveries = take(broker, "orders")
    await broker.acknowledge("orders", 1, deliveries[0].delivery_id)
    assert broker.publish(refused) == Routed(("orders",))  # the id was not kept


@pytest_twisted.ensureDeferred
async def test_drop_confirms_drops_and_counts(brokers: Brokers) -> None:
    broker = await brokers(**limited("DROP"))
    await fill(broker, 12, durable=True)
    memory = broker.addresses["orders"].memory
    assert memory.dropped_total == 2
    assert broker.queue("orders").depth == 10
    assert broker.publish(Message(0, "orders", False, {}, b"late")) == Routed((), dropped=True)


@pytest_twisted.ensureDeferred
async def test_block_accepts_and_wakes_the_waiting_producers_when_room_returns(
    brokers: Brokers,
) -> None:
    broker = await brokers(**limited("BLOCK"))
    await fill(broker, 12, durable=False)  # BLOCK's bound is the producers' credits
    memory = broker.addresses["orders"].memory
    assert memory.full and broker.queue("orders").depth == 12
    woken: list[str] = []
    memory.when_room(lambda: woken.append("first"))
    memory.when_room(lambda: woken.append("second"))
    cancelled = woken.append
    memory.when_room(lambda: cancelled("cancelled"))
    memory.cancel_wait(memory.waiters[-1])
    assert broker.memory.blocked_producers == 2
    deliveries = take(broker, "orders")
    for delivery in deliveries[:2]:
        await broker.acknowledge("orders", 1, delivery.delivery_id)
    assert woken == []  # still full: 10 messages left
    await broker.acknowledge("orders", 1, deliveries[2].delivery_id)
    assert woken == ["first", "second"]
    assert broker.memory.blocked_producers == 0


@pytest_twisted.ensureDeferred
async def test_the_global_limit_makes_every_address_apply_its_policy(brokers: Brokers) -> None:
    extra = limited("FAIL", max_size=-1, **{"global-max-size": 5 * SIZE})
    broker = await brokers(**extra)
    await fill(broker, 5, durable=False)
    assert broker.memory.size == 5 * SIZE and broker.memory.full
    with pytest.raises(AddressFull):
        await fill(broker, 1, durable=False)
    # news pages (its default policy) because the node as a whole is full.
    await broker.create_queue("news.a", "news", durable=False)
    await fill(broker, 2, durable=False, address="news")
    assert broker.addresses["news"].memory.paged_messages == 2


@pytest_twisted.ensureDeferred
async def test_paged_sends_in_a_transaction_arrive_at_commit_and_vanish_at_rollback(
    brokers: Brokers,
) -> None:
    broker = await brokers(**limited("PAGE"))
    await fill(broker, 10, durable=False)
    memory = broker.addresses["orders"].memory
    tx = broker.begin()
    broker.publish(Message(0, "orders", True, {}, b"%0100d" % 10), tx=tx)
    assert memory.paged_messages == 1 and broker.queue("orders").depth == 10
    await broker.commit(tx)
    assert broker.queue("orders").depth == 11
    tx = broker.begin()
    broker.publish(Message(0, "orders", False, {}, b"%0100d" % 11), tx=tx)
    await broker.rollback(tx)
    assert memory.paged_messages == 1
    deliveries = take(broker, "orders")
    await drain(broker, "orders", deliveries, 11)
    assert bodies(deliveries) == list(range(11))


@pytest_twisted.ensureDeferred
async def test_deleting_a_queue_releases_its_memory_and_pages(brokers: Brokers) -> None:
    broker = await brokers(**limited("PAGE"))
    await broker.create_queue("news.a", "news", durable=False)
    await fill(broker, 15, durable=False, address="news")
    memory = broker.addresses["news"].memory
    assert memory.size and memory.paged_messages
    await broker.delete_queue("news.a")
    assert memory.size == 0 and memory.paged_messages == 0 and broker.memory.size == 0


def large(broker: Broker, body: bytes, *, durable: bool, address: str = "orders") -> Message:
    """A large message as the core head builds one: its id allocated, its body a file."""
    message_id = broker.allocate_id()
    path = Path(broker.store.large_body_path(message_id))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return Message(
        message_id, address, durable, {"k": 1}, b"", large=LargeBody(str(path), len(body))
    )


@pytest.mark.parametrize("durable", [True, False])
@pytest_twisted.ensureDeferred
async def test_a_large_message_counts_its_header_and_its_file_goes_with_the_last_ack(
    brokers: Brokers, durable: bool
) -> None:
    broker = await brokers()
    await broker.create_queue("news.a", "news", durable=True)
    await broker.create_queue("news.b", "news", durable=True)
    message = large(broker, b"b" * 300_000, durable=durable, address="news")
    assert message.large is not None
    result = broker.publish(message)
    if isinstance(result, Deferred):
        await result
    assert broker.addresses["news"].memory.size == 2 * message.size < 1000
    path = Path(message.large.path)
    a, b = take(broker, "news.a"), take(broker, "news.b", consumer_id=2)
    assert a[0].message.large == message.large and a[0].message.id == message.id
    await broker.acknowledge("news.a", 1, a[0].delivery_id)
    assert path.exists()
    await broker.acknowledge("news.b", 2, b[0].delivery_id)
    assert not path.exists()


@pytest_twisted.ensureDeferred
async def test_a_durable_large_message_survives_a_restart_with_its_file(
    brokers: Brokers,
) -> None:
    broker = await brokers()
    message = large(broker, b"z" * 200_000, durable=True)
    await broker.publish(message)  # type: ignore[misc]
    orphan = large(broker, b"half a message", durable=True)  # never published
    broker = await brokers.restart(broker)
    [delivery] = take(broker, "orders")
    assert delivery.message.large is not None
    assert Path(delivery.message.large.path).read_bytes() == b"z" * 200_000
    assert delivery.message.headers == {"k": 1}
    assert orphan.large is not None and not Path(orphan.large.path).exists()


@pytest_twisted.ensureDeferred
async def test_a_large_message_going_nowhere_loses_its_file(brokers: Brokers) -> None:
    broker = await brokers(**limited("DROP", max_size=0))
    message = large(broker, b"q" * 1000, durable=False)
    assert broker.publish(message) == Routed((), dropped=True)
    assert message.large is not None and await brokers.gone(message.large.path)
