"""Creating addresses and queues on request: ``create_address`` makes an address of the
routing asked for (a STOMP ``/topic/`` send where anycast is the default), a queue of the
other routing type gives an address both, and two calls creating one queue at once give
one queue."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred, DeferredList

from bridge.config.node import Routing
from bridge.message import ROUTING_TYPE
from bridge.node.broker import AddressNotFound, NodeError
from tests.node.test_broker import brokers  # noqa: F401 (the fixture)


@pytest_twisted.ensureDeferred
async def test_create_address_makes_one_of_the_routing_asked_for(brokers):  # noqa: F811
    broker = await brokers()
    assert broker.config.routing_for("prices") is Routing.ANYCAST
    address = broker.create_address("prices", Routing.MULTICAST)
    assert broker.addresses["prices"] is address
    assert address.routing is Routing.MULTICAST and address.bindings == ()
    assert broker.create_address("prices", Routing.MULTICAST) is address
    routed = await broker.send("prices", b"nobody listens", durable=False)
    assert routed.queues == () and "prices" not in broker.queues
    with pytest.raises(AddressNotFound, match="reserved for the node"):
        broker.create_address("$own", Routing.MULTICAST)


@pytest_twisted.ensureDeferred
async def test_an_address_takes_both_routing_types_and_keeps_them_over_a_restart(brokers):  # noqa: F811
    """A queue of the other routing type adds it to the address (where addresses may be
    created on first use); each send goes to the queues of the type it states, anycast by
    default; the queues' routing types are stored with them."""
    broker = await brokers()
    await broker.create_queue("prices", "prices", durable=True, routing=Routing.ANYCAST)
    await broker.create_queue("prices.audit", "prices", durable=True, routing=Routing.MULTICAST)
    await broker.create_queue("prices.live", "prices", durable=False, routing=Routing.MULTICAST)
    address = broker.addresses["prices"]
    assert address.routing_types == {Routing.ANYCAST, Routing.MULTICAST}
    assert (await broker.send("prices", b"1", durable=True)).queues == ("prices",)
    stated = {ROUTING_TYPE: "multicast"}
    routed = await broker.send("prices", b"2", stated, durable=True)
    assert routed.queues == ("prices.audit", "prices.live")
    with pytest.raises(NodeError, match="header _TXB_ROUTING_TYPE is 'both'"):
        broker.send("prices", b"3", {ROUTING_TYPE: "both"}, durable=True)
    broker = await brokers.restart(broker)
    address = broker.addresses["prices"]
    assert address.routing_types == {Routing.ANYCAST, Routing.MULTICAST}
    assert [(b.queue.name, b.routing) for b in address.bindings] == [
        ("prices", Routing.ANYCAST),
        ("prices.audit", Routing.MULTICAST),
    ]
    assert [broker.queue(name).depth for name in ("prices", "prices.audit")] == [1, 1]
    assert (await broker.send("prices", b"4", stated, durable=True)).queues == ("prices.audit",)


@pytest_twisted.ensureDeferred
async def test_an_address_that_may_not_be_created_keeps_its_routing_type(brokers):  # noqa: F811
    broker = await brokers(address=[{"name": "private.a"}])
    assert "private.a" in broker.queues
    with pytest.raises(NodeError, match=r"'private\.a' is anycast, not multicast, and auto-cre"):
        await broker.create_queue(
            "private.a.sub", "private.a", durable=True, routing=Routing.MULTICAST
        )
    with pytest.raises(NodeError, match=r"'private\.a' is anycast, not multicast"):
        broker.create_address("private.a", Routing.MULTICAST)
    assert broker.addresses["private.a"].routing_types == {Routing.ANYCAST}
    assert "private.a.sub" not in broker.queues


@pytest_twisted.ensureDeferred
async def test_a_declared_address_with_both_routing_types_has_its_anycast_queue(brokers):  # noqa: F811
    broker = await brokers(address=[{"name": "feed", "routing": ["multicast", "anycast"]}])
    address = broker.addresses["feed"]
    assert address.routing_types == {Routing.ANYCAST, Routing.MULTICAST}
    assert [(b.queue.name, b.routing) for b in address.bindings] == [("feed", Routing.ANYCAST)]
    await broker.create_queue("feed.sub", "feed", durable=False, routing=Routing.MULTICAST)
    multicast = await broker.send("feed", b"m", {ROUTING_TYPE: "multicast"}, durable=False)
    assert multicast.queues == ("feed.sub",)


@pytest_twisted.ensureDeferred
async def test_concurrent_creations_of_one_queue_give_one_queue(brokers):  # noqa: F811
    broker = await brokers()
    first = Deferred.fromCoroutine(broker.create_queue("shared", "feed", durable=True))
    second = Deferred.fromCoroutine(broker.create_queue("shared", "feed", durable=True))
    assert not first.called and not second.called  # the first is being stored
    results = await DeferredList([first, second], fireOnOneErrback=True, consumeErrors=True)
    (_, one), (_, two) = results
    assert one is two is broker.queue("shared")
    assert [b.queue.name for b in broker.addresses["feed"].bindings] == ["shared"]
    with pytest.raises(NodeError, match="already exists"):
        await broker.create_queue("shared", "feed", durable=True)
    broker = await brokers.restart(broker)
    assert [b.queue.name for b in broker.addresses["feed"].bindings] == ["shared"]


@pytest_twisted.ensureDeferred
async def test_a_concurrent_creation_of_another_kind_is_refused(brokers):  # noqa: F811
    broker = await brokers()
    first = Deferred.fromCoroutine(broker.create_queue("q", "one", durable=True))
    other = Deferred.fromCoroutine(broker.create_queue("q", "two", durable=True))
    transient = Deferred.fromCoroutine(broker.create_queue("q", "one", durable=False))
    assert (await first) is broker.queue("q")
    for refused in (other, transient):
        with pytest.raises(NodeError, match="'q' already exists"):
            await refused
