"""Routing on an address, and duplicate detection."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.config.node import AddressSettings, Routing
from bridge.message import BRIDGE_DUPLICATE_ID, ROUTING_TYPE, HeaderValue, Message
from bridge.node.address import Address, AddressError, Detection
from bridge.node.duplicates import DuplicateIdCache
from bridge.node.queue import Queue


def message(n: int, duplicate_id: bytes | None = None, **headers: HeaderValue) -> Message:
    return Message(
        id=n, address="orders", durable=False, headers=headers, body=b"", duplicate_id=duplicate_id
    )


def bridged(n: int, bridge_id: HeaderValue, duplicate_id: bytes | None = None) -> Message:
    return message(n, duplicate_id, **{BRIDGE_DUPLICATE_ID: bridge_id})


def seen(address: Address, message: Message) -> bool:
    detection = address.detection(message)
    return detection is not None and detection.duplicate_id in detection.cache


def names(bindings) -> list[str]:  # type: ignore[no-untyped-def]
    return [binding.queue.name for binding in bindings]


def test_anycast_sends_each_message_to_one_queue_in_turn():
    address = Address("orders", Routing.ANYCAST, AddressSettings())
    address.bind(Queue("orders", "orders"))
    assert names(address.route(message(1))) == ["orders"]
    address.bind(Queue("orders-2", "orders"))
    assert [names(address.route(message(n))) for n in range(4)] == [
        ["orders"],
        ["orders-2"],
        ["orders"],
        ["orders-2"],
    ]


def test_multicast_sends_each_message_to_every_matching_subscription():
    address = Address("orders", Routing.MULTICAST, AddressSettings())
    address.bind(Queue("all", "orders"))
    address.bind(Queue("eu", "orders"), filter=lambda h: h.get("region") == "eu")
    assert names(address.route(message(1, region="eu"))) == ["all", "eu"]
    assert names(address.route(message(2, region="us"))) == ["all"]


def test_both_routing_types_route_by_the_stated_type_anycast_by_default():
    address = Address("orders", {Routing.ANYCAST, Routing.MULTICAST}, AddressSettings())
    assert address.routing is Routing.ANYCAST
    address.bind(Queue("orders", "orders"), routing=Routing.ANYCAST)
    address.bind(Queue("orders-2", "orders"), routing=Routing.ANYCAST)
    address.bind(Queue("audit", "orders"), routing=Routing.MULTICAST)
    address.bind(Queue("eu", "orders"), lambda h: h.get("region") == "eu", True, Routing.MULTICAST)
    multicast = {ROUTING_TYPE: "multicast"}
    assert names(address.route(message(1, **multicast, region="eu"))) == ["audit", "eu"]
    assert names(address.route(message(2, **multicast))) == ["audit"]
    anycast = [address.route(message(n, **{ROUTING_TYPE: "anycast"})) for n in range(2)]
    unstated = [address.route(message(n, region="eu")) for n in range(2)]
    assert [names(each) for each in anycast + unstated] == [["orders"], ["orders-2"]] * 2
    with pytest.raises(AddressError, match="'broadcast': it is 'anycast' or 'multicast'"):
        address.route(message(3, **{ROUTING_TYPE: "broadcast"}))


def test_one_routing_type_ignores_the_stated_one_and_binds_only_its_own():
    address = Address("orders", Routing.MULTICAST, AddressSettings())
    address.bind(Queue("all", "orders"))
    assert names(address.route(message(1, **{ROUTING_TYPE: "anycast"}))) == ["all"]
    with pytest.raises(AddressError, match="'orders' is multicast, not anycast"):
        address.bind(Queue("one", "orders"), routing=Routing.ANYCAST)
    address.add_routing(Routing.ANYCAST)
    address.bind(Queue("one", "orders"), routing=Routing.ANYCAST)
    assert names(address.route(message(2))) == ["one"]
    assert address.binding("all").routing is Routing.MULTICAST


def test_anycast_honours_filters_and_drops_what_nobody_takes():
    address = Address("orders", Routing.ANYCAST, AddressSettings())
    address.bind(Queue("eu", "orders"), filter=lambda h: h.get("region") == "eu")
    assert names(address.route(message(1, region="eu"))) == ["eu"]
    assert address.route(message(2, region="us")) == []


def test_bindings_are_checked():
    address = Address("orders", Routing.ANYCAST, AddressSettings())
    address.bind(Queue("orders", "orders"))
    with pytest.raises(AddressError, match="already has queue 'orders'"):
        address.bind(Queue("orders", "orders"))
    with pytest.raises(AddressError, match="belongs to address 'other'"):
        address.bind(Queue("x", "other"))
    with pytest.raises(AddressError, match="has no queue 'missing'"):
        address.unbind("missing")
    assert address.unbind("orders").queue.name == "orders"
    assert address.bindings == ()


def test_duplicates_are_recognised_from_the_recovered_cache():
    address = Address(
        "orders", Routing.ANYCAST, AddressSettings(id_cache_size=2), recovered_ids=[b"a", b"b"]
    )
    assert seen(address, message(1, b"a"))
    assert not seen(address, message(2, b"c"))
    assert not seen(address, message(3))
    address.duplicates.add(b"c")
    assert not seen(address, message(4, b"a"))  # evicted: the cache keeps the newest 2


def test_a_bridge_id_is_detected_in_the_bridge_cache_only():
    address = Address(
        "orders",
        Routing.ANYCAST,
        AddressSettings(id_cache_size=2),
        recovered_ids=[b"p"],
        recovered_bridge_ids=[b"b"],
    )
    assert address.detection(bridged(1, b"b")) == Detection(
        address.bridge_duplicates, "$bridge.orders", b"b"
    )
    assert address.detection(message(2, b"p")) == Detection(address.duplicates, "orders", b"p")
    assert seen(address, bridged(3, b"b")) and seen(address, message(4, b"p"))
    assert not seen(address, bridged(5, b"p"))  # a producer's id is no bridge id
    assert not seen(address, message(6, b"b"))  # and the other way round
    # A forwarded message's producer id was checked where it was first sent: not here.
    assert not seen(address, bridged(7, b"new", duplicate_id=b"p"))


def test_a_bridge_header_that_is_not_bytes_is_no_bridge_id():
    address = Address("orders", Routing.ANYCAST, AddressSettings(), recovered_ids=[b"p"])
    assert bridged(1, b"x").bridge_duplicate_id == b"x"
    for value in ("x", 1, True):
        assert bridged(2, value).bridge_duplicate_id is None
        assert address.detection(bridged(3, value)) is None
        assert seen(address, bridged(4, value, duplicate_id=b"p"))  # the producer's id counts
    assert message(5).bridge_duplicate_id is None


def test_a_zero_sized_cache_keeps_nothing():
    cache = DuplicateIdCache(0, [b"a"])
    cache.add(b"b")
    assert len(cache) == 0
    with pytest.raises(ValueError, match="must not be negative"):
        DuplicateIdCache(-1)


@given(st.integers(0, 5), st.lists(st.binary(max_size=2), max_size=40))
def test_the_cache_holds_exactly_the_newest_distinct_ids(size, ids):
    cache = DuplicateIdCache(size)
    newest: list[bytes] = []
    for duplicate_id in ids:
        cache.add(duplicate_id)
        if duplicate_id in newest:
            newest.remove(duplicate_id)
        newest.append(duplicate_id)
    expected = newest[-size:] if size else []
    assert len(cache) == len(expected)
    assert all(duplicate_id in cache for duplicate_id in expected)
    assert not any(duplicate_id in cache for duplicate_id in set(ids) - set(expected))
