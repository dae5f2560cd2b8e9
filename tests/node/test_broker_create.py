"""Creating addresses and queues on request: ``create_address`` makes an address of the
routing asked for (a STOMP ``/topic/`` send where anycast is the default), and two calls
creating one queue at once give one queue."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred, DeferredList

from bridge.config.node import Routing
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
    with pytest.raises(NodeError, match="'prices' is multicast, not anycast"):
        broker.create_address("prices", Routing.ANYCAST)
    with pytest.raises(AddressNotFound, match="reserved for the node"):
        broker.create_address("$own", Routing.MULTICAST)


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
