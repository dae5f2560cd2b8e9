"""``add_then`` with the message's duplicate-detection id: both stored in one operation,
so that the adds of a bridge's target stay one run of multi-row statements."""

from __future__ import annotations

import pytest_twisted
from twisted.internet.defer import Deferred, gatherResults

from bridge.store import InvalidOperation
from tests.store.conftest import anycast, message, settled


def added(store, *args, **options) -> Deferred[None]:
    return settled(store.add_then, *args, **options)


@pytest_twisted.ensureDeferred
async def test_a_run_of_adds_stores_their_duplicate_ids_with_them(stores):
    store, _ = await stores.open()
    await gatherResults([store.create_queue(anycast(name)) for name in "ab"])
    # One batch: adds with ids of two caches, one without, one id repeated (the newest).
    writes = [
        added(store, message(1), ["a"], duplicate=("a", b"x1", 10)),
        added(store, message(2), ["b"], duplicate=("b", b"y1", 10)),
        added(store, message(3), ["a"]),
        added(store, message(4), ["a", "b"], duplicate=("a", b"x2", 10)),
        added(store, message(5), ["a"], duplicate=("a", b"x1", 10)),
    ]
    await gatherResults(writes)
    assert store.commits == 2  # the queues' batch, then the adds' batch

    store, recovered = await stores.reopen(store)
    assert recovered.duplicate_ids == {"a": [b"x2", b"x1"], "b": [b"y1"]}
    assert [stored.message.id for stored in recovered.messages["a"]] == [1, 3, 4, 5]
    assert [stored.message.id for stored in recovered.messages["b"]] == [2, 4]


@pytest_twisted.ensureDeferred
async def test_an_add_that_fails_stores_no_duplicate_id(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    await added(store, message(1), ["a"])
    writes = [
        added(store, message(2), ["a"], duplicate=("a", b"kept", 10)),
        added(store, message(1), ["a"], duplicate=("a", b"lost", 10)),  # already stored
        added(store, message(3), ["nowhere"], duplicate=("a", b"lost too", 10)),
    ]
    outcomes = await gatherResults([d.addErrback(lambda f: f.value) for d in writes])
    assert [str(o) if o else None for o in outcomes] == [
        None,
        "add message 1: a message with this id is already stored",
        "add message 3: there is no durable queue 'nowhere'",
    ]

    store, recovered = await stores.reopen(store)
    assert recovered.duplicate_ids == {"a": [b"kept"]}
    assert [stored.message.id for stored in recovered.messages["a"]] == [1, 2]


@pytest_twisted.ensureDeferred
async def test_duplicate_ids_of_runs_are_trimmed_to_keep(stores):
    """Each cache keeps the newest ``keep`` ids, with at most an eighth more between
    trims, however the adds fall into batches."""
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    for start in range(1, 101, 20):
        await gatherResults(
            [
                added(store, message(n), ["a"], duplicate=("a", b"%d" % n, 16))
                for n in range(start, start + 20)
            ]
        )
    store, recovered = await stores.reopen(store)
    kept = recovered.duplicate_ids["a"]
    assert kept[-16:] == [b"%d" % n for n in range(85, 101)]
    assert len(kept) <= 16 + 16 // 8


@pytest_twisted.ensureDeferred
async def test_a_bad_keep_is_refused_at_once(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    told = []
    store.add_then(message(1), ["a"], told.append, duplicate=("a", b"d", 0))
    assert len(told) == 1
    assert told[0].check(InvalidOperation)
    assert "keep must be at least 1" in told[0].getErrorMessage()
    store, recovered = await stores.reopen(store)
    assert recovered.messages == {}
    assert recovered.duplicate_ids == {}
