"""Routing on an address, and duplicate detection."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.config.node import AddressSettings, Routing
from bridge.message import Message
from bridge.node.address import Address, AddressError
from bridge.node.duplicates import DuplicateIdCache
from bridge.node.queue import Queue


def message(n: int, duplicate_id: bytes | None = None, **headers: str) -> Message:
    return Message(
        id=n, address="orders", durable=False, headers=headers, body=b"", duplicate_id=duplicate_id
    )


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
    assert address.is_duplicate(message(1, b"a"))
    assert not address.is_duplicate(message(2, b"c"))
    assert not address.is_duplicate(message(3))
    address.duplicates.add(b"c")
    assert not address.is_duplicate(message(4, b"a"))  # evicted: the cache keeps the newest 2


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
