"""A repeat that arrives while its first send's store write is pending waits for that
write (in a transaction, at its commit): it is a duplicate once the first send commits,
and the send that counts if the first one's write fails (confirming it at once would lose
it then)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from bridge.config.node import parse_node_config
from bridge.message import BRIDGE_DUPLICATE_ID, Message
from bridge.node.broker import AddressFull, Broker, Routed
from bridge.node.duplicates import DuplicateIdCache
from bridge.store.errors import StoreError
from bridge.store.sqlite import SQLiteMessageStore

ID = b"bridge-a:7"


class GatedStore:
    """The real SQLite store, but a send's writes (the message and its duplicate id) wait
    until the test lets them through or refuses them; a transaction's go through (they
    wait for its commit anyway). A double because a real store cannot be made to fail one
    write on cue."""

    def __init__(self, store: SQLiteMessageStore) -> None:
        self._store = store
        self._gates: list[Deferred[None]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def add(self, message: Message, queues: Sequence[str], tx: Any = None) -> Deferred[None]:
        if tx is not None:
            return self._store.add(message, queues, tx=tx)
        return self._gate(lambda: self._store.add(message, queues))

    def store_duplicate_id(
        self, address: str, duplicate_id: bytes, keep: int, tx: Any = None
    ) -> Deferred[None]:
        if tx is not None:
            return self._store.store_duplicate_id(address, duplicate_id, keep, tx)
        return self._gate(lambda: self._store.store_duplicate_id(address, duplicate_id, keep))

    def add_then(self, message: Message, queues: Sequence[str], then: Any, **options: Any) -> None:
        gate: Deferred[None] = Deferred()
        gate.addCallbacks(lambda _: self._store.add_then(message, queues, then, **options), then)
        self._gates.append(gate)

    def _gate(self, write: Any) -> Deferred[None]:
        gate: Deferred[None] = Deferred()
        gate.addCallback(lambda _: write())
        self._gates.append(gate)
        return gate

    @property
    def pending(self) -> int:
        return len(self._gates)

    def write(self) -> None:
        gates, self._gates = self._gates, []
        for gate in gates:
            gate.callback(None)

    def refuse(self) -> None:
        gates, self._gates = self._gates, []
        for gate in gates:
            gate.errback(StoreError("disk full"))


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Broker, GatedStore]]:
    document = {
        "node": {"name": "a", "data-dir": "data"},
        "address": [
            {"name": "orders", "routing": "anycast"},
            {"name": "small", "max-size-bytes": "2KiB", "address-full-policy": "FAIL"},
        ],
    }
    config = parse_node_config(document, tmp_path / "node.toml")
    store = GatedStore(SQLiteMessageStore(config.data_dir, reactor))
    broker = Broker(config, store)  # type: ignore[arg-type]
    pytest_twisted.blockon(Deferred.fromCoroutine(broker.open()))
    yield broker, store
    store.write()
    pytest_twisted.blockon(Deferred.fromCoroutine(broker.close()))


def send(broker: Broker, body: bytes) -> Deferred[Routed]:
    routed = broker.publish(Message(0, "orders", True, {}, body, ID))
    assert isinstance(routed, Deferred), "a durable send waits for its write"
    return routed


def settled(routed: Deferred[Routed]) -> bool:
    """Whether the send has its outcome (not only a Deferred it waits on)."""
    seen: list[object] = []
    routed.addBoth(lambda result: (seen.append(result), result)[1])
    return bool(seen)


@pytest_twisted.ensureDeferred
async def test_a_repeat_waits_for_the_first_write_and_is_a_duplicate_once_it_commits(
    gated: tuple[Broker, GatedStore],
) -> None:
    broker, store = gated
    first = send(broker, b"first")
    repeat = send(broker, b"repeat")
    assert not settled(repeat), "confirmed before the first send is durable"
    store.write()
    assert await first == Routed(("orders",))
    assert await repeat == Routed((), duplicate=True)
    assert broker.queue("orders").depth == 1
    assert store.pending == 0


@pytest_twisted.ensureDeferred
async def test_a_repeat_is_the_send_that_counts_when_the_first_write_fails(
    gated: tuple[Broker, GatedStore],
) -> None:
    broker, store = gated
    first = send(broker, b"first")
    repeat = send(broker, b"repeat")
    assert not settled(repeat)
    store.refuse()
    with pytest.raises(StoreError):
        await first
    assert not settled(repeat), "the repeat is written now, as a new send"
    assert store.pending == 2  # the repeat's message and its duplicate id
    store.write()
    assert await repeat == Routed(("orders",))
    queue = broker.queue("orders")
    assert queue.depth == 1
    third = broker.publish(Message(0, "orders", True, {}, b"third", ID))
    assert third == Routed((), duplicate=True)  # settled: dropped at once
    assert queue.depth == 1


def repeat_in_a_transaction(broker: Broker) -> tuple[Deferred[Routed], Any]:
    """A send being written, and a transaction holding its repeat."""
    first = send(broker, b"first")
    tx = broker.begin()
    routed = broker.publish(Message(0, "orders", True, {}, b"repeat", ID), tx=tx)
    assert isinstance(routed, Routed), "a send in a transaction is decided at its commit"
    return first, tx


@pytest.mark.parametrize(
    ("first_committed", "queued"),
    [(True, [b"first"]), (False, [b"repeat"])],
    ids=["first-committed", "first-failed"],
)
@pytest_twisted.ensureDeferred
async def test_a_repeat_in_a_transaction_is_decided_when_the_transaction_commits(
    gated: tuple[Broker, GatedStore], first_committed: bool, queued: list[bytes]
) -> None:
    """A duplicate if the send it repeats committed; sent by the commit if that send's
    write failed (dropped at once, as it was before, it would have been lost with it)."""
    broker, store = gated
    first, tx = repeat_in_a_transaction(broker)
    committing = Deferred.fromCoroutine(broker.commit(tx))
    assert not settled(committing), "the commit waits for the first send's write"
    if first_committed:
        store.write()
        await first
    else:
        store.refuse()
        with pytest.raises(StoreError):
            await first
    await committing
    assert [e.message.body for e in broker.queue("orders").browse()] == queued
    assert stored_ids(broker) == 1
    again = broker.publish(Message(0, "orders", True, {}, b"again", ID))
    assert again == Routed((), duplicate=True)


@pytest_twisted.ensureDeferred
async def test_a_rolled_back_transaction_sends_none_of_its_repeats(
    gated: tuple[Broker, GatedStore],
) -> None:
    broker, store = gated
    first, tx = repeat_in_a_transaction(broker)
    await broker.rollback(tx)
    store.refuse()
    with pytest.raises(StoreError):
        await first
    assert broker.queue("orders").depth == 0
    assert store.pending == 0


@pytest_twisted.ensureDeferred
async def test_a_commit_that_cannot_send_a_repeat_rolls_the_transaction_back(
    gated: tuple[Broker, GatedStore],
) -> None:
    """The first write fails, and by then the repeat's address is full under FAIL: the
    commit fails with AddressFull and none of the transaction's sends is queued."""
    broker, store = gated
    first = broker.publish(Message(0, "small", True, {}, b"first", ID))
    tx = broker.begin()
    broker.publish(Message(0, "small", True, {}, b"other", None), tx=tx)
    broker.publish(Message(0, "small", True, {}, b"repeat", ID), tx=tx)
    broker.publish(Message(0, "small", False, {}, b"x" * 2048))  # fills the address
    committing = Deferred.fromCoroutine(broker.commit(tx))
    store.refuse()
    with pytest.raises(StoreError):
        await first
    with pytest.raises(AddressFull):
        await committing
    assert [e.message.body for e in broker.queue("small").browse()] == [b"x" * 2048]
    assert stored_ids(broker) == 0


def test_the_cache_tells_each_waiting_repeat_the_outcome() -> None:
    cache = DuplicateIdCache(10)
    assert cache.when_settled(ID) is None  # nothing pending: a plain duplicate
    cache.add(ID)
    cache.hold(ID)
    waiting = [cache.when_settled(ID), cache.when_settled(ID)]
    cache.settle(ID, committed=False)
    assert [w.result for w in waiting if w is not None] == [False, False]
    assert ID not in cache and cache.when_settled(ID) is None
    cache.add(ID)
    cache.hold(ID)
    committed = cache.when_settled(ID)
    cache.settle(ID, committed=True)
    assert committed is not None and committed.result is True and ID in cache


def with_id(body: bytes, bridged: bool) -> Message:
    """A send with ``ID``: a core bridge's (its header) or its producer's."""
    if bridged:
        return Message(0, "orders", True, {BRIDGE_DUPLICATE_ID: ID}, body)
    return Message(0, "orders", True, {}, body, ID)


def send_then(broker: Broker, body: bytes, bridged: bool) -> Deferred[None]:
    """A send through ``publish_then`` (the heads' hot path), as a Deferred of what its
    callable is told."""
    told: Deferred[None] = Deferred()
    routed = broker.publish_then(
        with_id(body, bridged),
        lambda failure: told.callback(None) if failure is None else told.errback(failure),
    )
    assert routed is None, "a durable send waits for its write"
    return told


def stored_ids(broker: Broker) -> int:
    with sqlite3.connect(broker.store.path) as connection:
        (count,) = connection.execute("SELECT count(*) FROM duplicate_ids").fetchone()
    return count


@pytest.mark.parametrize("bridged", [False, True], ids=["producer id", "bridge id"])
@pytest_twisted.ensureDeferred
async def test_publish_then_writes_a_send_and_its_id_as_one_operation_and_repeats_wait(
    gated: tuple[Broker, GatedStore], bridged: bool
) -> None:
    broker, store = gated
    first = send_then(broker, b"first", bridged)
    repeat = send_then(broker, b"repeat", bridged)
    assert store.pending == 1, "the message and its duplicate id are one write"
    assert not settled(repeat), "confirmed before the first send is durable"
    store.write()
    await first
    await repeat
    assert broker.queue("orders").depth == 1
    assert stored_ids(broker) == 1


@pytest.mark.parametrize("bridged", [False, True], ids=["producer id", "bridge id"])
@pytest_twisted.ensureDeferred
async def test_publish_then_a_repeat_counts_when_the_first_write_fails(
    gated: tuple[Broker, GatedStore], bridged: bool
) -> None:
    broker, store = gated
    first = send_then(broker, b"first", bridged)
    repeat = send_then(broker, b"repeat", bridged)
    store.refuse()
    with pytest.raises(StoreError):
        await first
    assert not settled(repeat), "the repeat is written now, as a new send"
    assert store.pending == 2  # (a rare path: written as ``publish`` writes, in two)
    store.write()
    await repeat
    queue = broker.queue("orders")
    assert queue.depth == 1
    assert stored_ids(broker) == 1
    assert broker.publish_then(with_id(b"third", bridged), print) == Routed((), duplicate=True)
    assert queue.depth == 1
