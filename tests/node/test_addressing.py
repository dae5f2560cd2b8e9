"""The addresses and queues a connection uses (``bridge.node.addressing``), the same for
every head: created on first use where the client and the settings allow, found, and
deleted, each refusal the node's error for the head to word."""

from __future__ import annotations

import pytest
import pytest_twisted

from bridge.config.node import Routing
from bridge.node.addressing import Addressing, matcher
from bridge.node.broker import (
    AddressNotFound,
    BadFilter,
    QueueExists,
    QueueInUse,
    QueueNotFound,
    WrongRouting,
)
from security.errors import PermissionDenied
from tests.node.test_session import opened, session

__all__ = ["opened"]  # (the fixture)


def addressing(opened, roles: set[str]) -> Addressing:
    return Addressing(session(opened, roles))


@pytest_twisted.ensureDeferred
async def test_a_send_creates_a_missing_address_where_the_client_may(opened) -> None:
    broker, _ = opened
    admin, producer = addressing(opened, {"admins"}), addressing(opened, {"producers"})
    assert admin.send_to("orders.in", Routing.ANYCAST) is None  # it exists
    producer.send_to("orders.in", Routing.ANYCAST)
    with pytest.raises(PermissionDenied, match="'create-address'"):
        producer.send_to("orders.new", Routing.ANYCAST)
    assert admin.send_to("brand.new", Routing.ANYCAST) is None  # anycast by default: at once
    assert "brand.new" in broker.queues
    creating = admin.send_to("news.today", Routing.ANYCAST)  # multicast by default
    assert creating is not None
    await creating
    assert broker.is_durable("news.today")
    admin.send_to("news.tomorrow", Routing.MULTICAST)
    assert broker.has_address("news.tomorrow") and "news.tomorrow" not in broker.queues
    with pytest.raises(AddressNotFound, match="auto-create-addresses is off"):
        admin.send_to("private.x", Routing.ANYCAST)


def test_an_address_gets_the_other_routing_type_only_where_it_may_be_created(opened) -> None:
    broker, _ = opened
    admin = addressing(opened, {"admins"})
    admin.send_to("both.ways", Routing.ANYCAST)
    assert not admin.states_routing("both.ways")
    assert admin.use("both.ways", Routing.MULTICAST)
    assert admin.states_routing("both.ways")
    broker.create_address("private.x", Routing.ANYCAST)
    with pytest.raises(WrongRouting) as wrong:
        admin.use("private.x", Routing.MULTICAST)
    assert (wrong.value.name, wrong.value.multicast) == ("private.x", False)
    assert not admin.use("missing", Routing.ANYCAST)


def test_a_send_to_a_queue_goes_to_its_address(opened) -> None:
    admin = addressing(opened, {"admins"})
    assert admin.send_to_queue("orders.in") == "orders.in"
    with pytest.raises(QueueNotFound, match="no queue 'none'"):
        admin.send_to_queue("none")


def test_a_consumer_of_a_missing_anycast_queue_creates_it(opened) -> None:
    broker, _ = opened
    admin, consumer = addressing(opened, {"admins"}), addressing(opened, {"consumers"})
    assert admin.consume("jobs", browse=False).name == "jobs"
    with pytest.raises(QueueNotFound):
        admin.consume("news.today", browse=False)  # multicast: no queue of its own
    with pytest.raises(PermissionDenied, match="'browse'"):
        consumer.consume("orders.in", browse=True)
    assert consumer.consume("orders.in", browse=False).address == "orders.in"
    assert broker.has_address("jobs") and not broker.has_address("news.today")


@pytest_twisted.ensureDeferred
async def test_queues_are_created_and_deleted_with_their_checks(opened) -> None:
    broker, _ = opened
    admin, producer = addressing(opened, {"admins"}), addressing(opened, {"producers"})
    admin.send_to("work", Routing.ANYCAST)  # the address and its queue "work"
    with pytest.raises(QueueExists, match=r"queue 'work' already exists"):
        admin.create_queue("work", "work", durable=True, filter=None, routing=Routing.ANYCAST)
    with pytest.raises(BadFilter, match=r"bad filter 'a =='"):
        admin.create_queue("q", "work", durable=True, filter="a ==", routing=Routing.ANYCAST)
    with pytest.raises(PermissionDenied, match="'create-non-durable-queue'"):
        producer.create_queue("q", "work", durable=False, filter=None, routing=Routing.ANYCAST)
    await admin.create_queue(
        "mine", "news.today", durable=False, filter=None, routing=Routing.MULTICAST
    )
    deliveries: list[object] = []
    broker.consume("work", 1, deliveries.append)
    with pytest.raises(QueueInUse) as in_use:
        admin.delete_queue("work")
    assert in_use.value.consumers == 1
    await broker.close_consumer("work", 1)
    with pytest.raises(QueueNotFound):
        admin.delete_queue("mine", durable=True)
    await admin.delete_queue("work")
    with pytest.raises(QueueNotFound):
        admin.delete_queue("work")
    assert "mine" in broker.queues
    assert admin.close() == ["mine"]  # a non-durable queue goes with the connection
    await admin.drop("mine")
    assert "mine" not in broker.queues


@pytest_twisted.ensureDeferred
async def test_a_durable_subscription_is_found_again_and_its_name_kept_for_it(opened) -> None:
    broker, _ = opened
    admin = addressing(opened, {"admins"})
    creating = admin.subscribe("news.today", "c1.watch", durable=True, filter=None)
    assert creating is not None
    await creating
    assert admin.subscribe("news.today", "c1.watch", durable=True, filter=None) is None
    with pytest.raises(QueueExists):
        admin.subscribe("news.other", "c1.watch", durable=True, filter=None)
    assert broker.is_durable("c1.watch")


def test_a_filter_is_compiled_or_refused_with_its_words() -> None:
    assert matcher(None) is None
    test = matcher("colour = 'red'")
    assert test is not None and test({"colour": "red"}) and not test({"colour": "blue"})
    with pytest.raises(BadFilter) as bad:
        matcher("colour ==")
    assert bad.value.text == "colour =="
