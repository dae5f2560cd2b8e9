"""Each store operation on a real SQLite file, checked by what a reopened store recovers."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred, DeferredList, gatherResults

from bridge.message import Message
from bridge.store import InvalidOperation, MessageStore, QueueRecord, RecoveredMessage
from bridge.store.sqlite_operations import MAX_STATEMENT_ROWS, STATEMENT_ROWS, _parts
from tests.store.conftest import anycast, message


def ids(recovered, queue: str) -> list[int]:
    return [stored.message.id for stored in recovered.messages.get(queue, ())]


@pytest_twisted.ensureDeferred
async def test_a_new_store_recovers_nothing(stores):
    _, recovered = await stores.open()
    assert recovered.queues == []
    assert recovered.messages == {}
    assert recovered.duplicate_ids == {}
    assert recovered.highest_message_id == 0
    assert stores.rows("schema_version") == 1


@pytest_twisted.ensureDeferred
async def test_added_messages_come_back_whole_in_id_order(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    sent = [
        message(1, headers={"s": "x", "i": -5, "f": 0.5, "b": False, "y": b"\x01"}),
        message(2, duplicate_id=b"dup-2", body=b"\x00" * 3000),
        message(3),
    ]
    # Issued out of order in one turn: recovery follows the ids.
    await gatherResults([store.add(sent[2], ["orders"]), store.add(sent[0], ["orders"])])
    await store.add(sent[1], ["orders"])

    _, recovered = await stores.reopen(store)
    assert recovered.messages == {"orders": [RecoveredMessage(m, 0) for m in sent]}
    assert recovered.highest_message_id == 3


@pytest_twisted.ensureDeferred
async def test_a_message_on_several_queues_is_stored_once_until_acked_on_all(stores):
    store, _ = await stores.open()
    for name in ("a", "b", "c"):
        await store.create_queue(QueueRecord(name, "events", "multicast"))
    await store.add(message(1, "events"), ["a", "b", "c"])
    await store.add(message(2, "events"), ["a", "c"])
    assert stores.rows("messages") == 2
    assert stores.rows("message_refs") == 5

    await gatherResults([store.acknowledge("a", 1), store.acknowledge("b", 1)])
    store, recovered = await stores.reopen(store)
    assert {q: ids(recovered, q) for q in "abc"} == {"a": [2], "b": [], "c": [1, 2]}
    assert stores.rows("messages") == 2

    await store.acknowledge("c", 1)
    assert stores.rows("messages") == 1
    store, recovered = await stores.reopen(store)
    assert {q: ids(recovered, q) for q in "abc"} == {"a": [2], "b": [], "c": [2]}


@pytest_twisted.ensureDeferred
async def test_acknowledged_messages_do_not_come_back(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    await gatherResults([store.add(message(i), ["orders"]) for i in range(1, 11)])
    await gatherResults([store.acknowledge("orders", i) for i in (1, 2, 5, 10)])

    store, recovered = await stores.reopen(store)
    assert ids(recovered, "orders") == [3, 4, 6, 7, 8, 9]
    assert stores.rows("messages") == 6


@pytest_twisted.ensureDeferred
async def test_acknowledge_many_is_one_operation_all_or_none(stores):
    store, _ = await stores.open()
    for name in ("a", "b"):
        await store.create_queue(QueueRecord(name, "events", "multicast"))
    await gatherResults([store.add(message(i, "events"), ["a", "b"]) for i in range(1, 6)])
    operations = store.committed_operations
    await store.acknowledge_many("a", [1, 2, 3])
    assert store.committed_operations == operations + 1
    assert stores.rows("messages") == 5  # still on b
    with pytest.raises(InvalidOperation, match="queue 'a': the queue does not hold all"):
        await store.acknowledge_many("a", [4, 3])  # 3 is gone: 4 stays too
    await store.acknowledge_many("b", [1, 2, 3, 4])
    assert stores.rows("messages") == 2  # 4 still on a, 5 on both
    store, recovered = await stores.reopen(store)
    assert {q: ids(recovered, q) for q in "ab"} == {"a": [4, 5], "b": [5]}


@pytest_twisted.ensureDeferred
async def test_delivery_counts_are_kept_per_queue(stores):
    store, _ = await stores.open()
    await gatherResults([store.create_queue(anycast("a")), store.create_queue(anycast("b"))])
    await store.add(message(1), ["a", "b"])
    await store.update_delivery_count("a", 1, 1)
    await store.update_delivery_count("a", 1, 3)
    await store.update_delivery_count("b", 1, 2)

    _, recovered = await stores.reopen(store)
    assert [m.delivery_count for m in recovered.messages["a"]] == [3]
    assert [m.delivery_count for m in recovered.messages["b"]] == [2]


@pytest_twisted.ensureDeferred
async def test_delivery_counts_of_one_turn_keep_the_later_and_refuse_a_message_not_held(stores):
    """As a consumer closed with messages in flight issues them: many in one batch."""
    store, _ = await stores.open()
    await gatherResults([store.create_queue(anycast("a")), store.create_queue(anycast("b"))])
    await gatherResults([store.add(message(i), ["a", "b"]) for i in (1, 2)])
    counts = [
        store.update_delivery_count("a", 1, 1),
        store.update_delivery_count("b", 2, 4),
        store.update_delivery_count("a", 1, 3),  # the later count stays
        store.update_delivery_count("a", 9, 1),  # never stored
        store.update_delivery_count("b", 1, 2),
    ]
    results = await DeferredList(counts, consumeErrors=True)
    assert [ok for ok, _ in results] == [True, True, True, False, True]
    assert "message 9 on queue 'a': the queue does not hold it" in str(results[3][1].value)
    _, recovered = await stores.reopen(store)
    assert {m.message.id: m.delivery_count for m in recovered.messages["a"]} == {1: 3, 2: 0}
    assert {m.message.id: m.delivery_count for m in recovered.messages["b"]} == {1: 2, 2: 4}


@pytest_twisted.ensureDeferred
async def test_queue_definitions_are_created_and_deleted(stores):
    store, _ = await stores.open()
    queues = [
        QueueRecord("orders", "orders", "anycast"),
        QueueRecord("audit", "events", "multicast", filter="kind = 'audit'"),
        QueueRecord("all", "events", "multicast"),
    ]
    for queue in queues:
        await store.create_queue(queue)
    await store.add(message(1, "events"), ["audit", "all"])
    await store.add(message(2, "events"), ["audit"])
    await store.delete_queue("audit")

    store, recovered = await stores.reopen(store)
    assert recovered.queues == [queues[0], queues[2]]
    assert recovered.messages == {"all": [RecoveredMessage(message(1, "events"), 0)]}
    assert stores.rows("messages") == 1


@pytest_twisted.ensureDeferred
async def test_duplicate_id_caches_keep_the_newest_per_address(stores):
    store, _ = await stores.open()
    for n in range(6):
        await store.store_duplicate_id("orders", b"o%d" % n, keep=4)
    await store.store_duplicate_id("other", b"x", keep=4)
    # Storing a known id again makes it the newest, so it survives the next trim.
    await store.store_duplicate_id("orders", b"o2", keep=4)
    await store.store_duplicate_id("orders", b"o6", keep=4)

    store, recovered = await stores.reopen(store)
    assert recovered.duplicate_ids == {
        "orders": [b"o4", b"o5", b"o2", b"o6"],
        "other": [b"x"],
    }
    # A smaller keep trims at once.
    await store.store_duplicate_id("orders", b"o7", keep=2)
    _, recovered = await stores.reopen(store)
    assert recovered.duplicate_ids["orders"] == [b"o6", b"o7"]


@pytest_twisted.ensureDeferred
async def test_a_batch_of_lone_duplicate_ids_keeps_each_newest_last(stores):
    """A bridge's target writes a run of ids alone (its consumers took their messages
    before the write), one batch: each id is kept at its newest place, per address."""
    store, _ = await stores.open()
    writes = [store.store_duplicate_id("orders", b"o%d" % n, keep=8) for n in range(12)]
    writes.append(store.store_duplicate_id("other", b"x", keep=8))
    writes.append(store.store_duplicate_id("orders", b"o5", keep=8))  # again: the newest
    await gatherResults(writes)
    _, recovered = await stores.reopen(store)
    kept = recovered.duplicate_ids["orders"]
    assert kept[-7:] == [b"o6", b"o7", b"o8", b"o9", b"o10", b"o11", b"o5"]
    assert len(kept) == len(set(kept))
    assert recovered.duplicate_ids["other"] == [b"x"]


@pytest_twisted.ensureDeferred
async def test_a_large_cache_is_trimmed_every_eighth_of_its_size(stores):
    store, _ = await stores.open()
    for n in range(40):
        await store.store_duplicate_id("orders", b"%d" % n, keep=16)
    # Trimmed after the 2nd, 4th, ... id: the file holds the newest 16, and at most one
    # more until the next trim.
    store, recovered = await stores.reopen(store)
    assert recovered.duplicate_ids["orders"] == [b"%d" % n for n in range(24, 40)]
    for n in range(40, 43):
        await store.store_duplicate_id("orders", b"%d" % n, keep=16)
    _, recovered = await stores.reopen(store)
    assert recovered.duplicate_ids["orders"][-16:] == [b"%d" % n for n in range(27, 43)]
    assert len(recovered.duplicate_ids["orders"]) <= 17


@pytest_twisted.ensureDeferred
async def test_ids_keep_increasing_after_everything_was_acknowledged(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    await gatherResults([store.add(message(i), ["orders"]) for i in (40, 41, 42)])
    await gatherResults([store.acknowledge("orders", i) for i in (40, 41, 42)])

    store, recovered = await stores.reopen(store)
    assert recovered.messages == {}
    assert recovered.highest_message_id == 42
    await store.add(message(43), ["orders"])
    _, recovered = await stores.reopen(store)
    assert recovered.highest_message_id == 43


@pytest_twisted.ensureDeferred
async def test_an_invalid_operation_fails_alone_and_its_batch_commits(stores):
    store, _ = await stores.open()
    await store.create_queue(anycast("orders"))
    await store.add(message(1), ["orders"])
    commits = store.commits

    results = await gatherResults(
        [
            store.add(message(2), ["orders"]).addErrback(lambda f: f.value),
            store.add(message(1), ["orders"]).addErrback(lambda f: f.value),
            store.add(message(3), ["nowhere"]).addErrback(lambda f: f.value),
            store.acknowledge("orders", 99).addErrback(lambda f: f.value),
            store.update_delivery_count("orders", 99, 1).addErrback(lambda f: f.value),
            store.create_queue(anycast("orders")).addErrback(lambda f: f.value),
            store.delete_queue("nowhere").addErrback(lambda f: f.value),
            store.add(message(4), ["orders"]).addErrback(lambda f: f.value),
        ]
    )
    assert store.commits == commits + 1
    assert results[0] is None
    assert results[7] is None
    errors = [str(error) for error in results[1:7]]
    assert all(isinstance(error, InvalidOperation) for error in results[1:7])
    assert errors == [
        "add message 1: a message with this id is already stored",
        "add message 3: there is no durable queue 'nowhere'",
        "acknowledge message 99 on queue 'orders': the queue does not hold it",
        "update the delivery count of message 99 on queue 'orders': the queue does not hold it",
        "create queue 'orders': the queue exists",
        "delete queue 'nowhere': there is no such queue",
    ]
    _, recovered = await stores.reopen(store)
    assert ids(recovered, "orders") == [1, 2, 4]


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize(
    ("call", "error"),
    [
        (
            lambda s: s.add(message(1, durable=False), ["q"]),
            "add message 1: the message is not durable",
        ),
        (lambda s: s.add(message(1), []), "add message 1: no queue given"),
        (lambda s: s.add(message(1), ["q", "q"]), "a queue is given twice in \\['q', 'q'\\]"),
        (lambda s: s.add(message(1, headers={"h": None}), ["q"]), "header 'h': NoneType"),
        (lambda s: s.update_delivery_count("q", 1, -1), "-1 is negative"),
        (lambda s: s.acknowledge_many("q", []), "on queue 'q': no message given"),
        (lambda s: s.acknowledge_many("q", [1, 1]), "on queue 'q': a message is given twice"),
        (lambda s: s.store_duplicate_id("q", b"d", keep=0), "keep must be at least 1"),
    ],
)
async def test_bad_arguments_are_refused_before_anything_is_queued(stores, call, error):
    store, _ = await stores.open()
    with pytest.raises(InvalidOperation, match=error):
        await call(store)
    assert store.commits == 0


@pytest_twisted.ensureDeferred
async def test_runs_of_adds_and_acks_in_one_batch_keep_per_operation_outcomes(stores):
    """Consecutive adds and acks are written with one statement per table; an invalid one
    among them still fails alone and the others are written."""
    store, _ = await stores.open()
    await gatherResults([store.create_queue(anycast(name)) for name in "abc"])
    await store.add(message(1), ["a"])

    adds = [store.add(message(i), ["a", "b"]) for i in (2, 3)]
    adds.append(store.add(message(1), ["a"]))  # already stored
    adds += [store.add(message(i), ["a", "b", "c"]) for i in (4, 5)]
    outcomes = await gatherResults([d.addErrback(lambda f: f.value) for d in adds])
    assert [str(o) if o else None for o in outcomes] == [
        None,
        None,
        "add message 1: a message with this id is already stored",
        None,
        None,
    ]

    acks = [
        store.acknowledge("a", 2),
        store.acknowledge("b", 2),  # message 2 leaves the store
        store.acknowledge("a", 4),
        store.acknowledge("c", 4),  # message 4 stays, on b
        store.acknowledge("c", 9),  # not held
        store.acknowledge("a", 5),
    ]
    outcomes = await gatherResults([d.addErrback(lambda f: f.value) for d in acks])
    assert [str(o) if o else None for o in outcomes] == [
        None,
        None,
        None,
        None,
        "acknowledge message 9 on queue 'c': the queue does not hold it",
        None,
    ]
    # Acks that all succeed in one run release each message's references together:
    # message 5 loses its last two, message 3 one of its two.
    await gatherResults(
        [store.acknowledge("b", 5), store.acknowledge("c", 5), store.acknowledge("a", 3)]
    )

    store, recovered = await stores.reopen(store)
    assert {q: ids(recovered, q) for q in "abc"} == {"a": [1], "b": [3, 4], "c": []}
    assert stores.rows("messages") == 3
    assert recovered.highest_message_id == 5


def _add_with_duplicate_id(
    store: MessageStore, added: Message, queue: str, duplicate_id: bytes
) -> Deferred[None]:
    """``add_then`` with a duplicate id kept in address ``a``'s cache, as a Deferred."""
    done: Deferred[None] = Deferred()
    store.add_then(
        added,
        [queue],
        lambda failure: done.callback(None) if failure is None else done.errback(failure),
        duplicate=("a", duplicate_id, 10),
    )
    return done


@pytest_twisted.ensureDeferred
async def test_invalid_runs_in_a_batch_undo_only_themselves(stores):
    """One batch: a queue created, adds with duplicate ids to it, a cumulative
    acknowledgement that fails after releasing its first message, and a run of adds
    holding a stored id. Each invalid operation fails alone; everything else is written
    once, and what the failed ones touched is as it was."""
    store, _ = await stores.open()
    await store.create_queue(anycast("a"))
    await gatherResults([store.add(message(1), ["a"]), store.add(message(5), ["a"])])
    commits = store.commits

    calls = [
        store.create_queue(anycast("new")),
        _add_with_duplicate_id(store, message(2), "new", b"d2"),
        _add_with_duplicate_id(store, message(3), "new", b"d3"),
        store.acknowledge_many("a", [5]),
        store.acknowledge_many("a", [1, 7]),  # 7 is not held: invalid, 1 released first
        store.add(message(4), ["a"]),
        store.add(message(1), ["a"]),  # a run of adds holding a stored id
    ]
    outcomes = await gatherResults([d.addErrback(lambda f: f.value) for d in calls])
    assert [str(o) if o else None for o in outcomes] == [
        None,
        None,
        None,
        None,
        "acknowledge 2 messages on queue 'a': the queue does not hold all of them",
        None,
        "add message 1: a message with this id is already stored",
    ]
    assert store.commits == commits + 1

    store, recovered = await stores.reopen(store)
    assert {q: ids(recovered, q) for q in ("a", "new")} == {"a": [1, 4], "new": [2, 3]}
    assert recovered.duplicate_ids == {"a": [b"d2", b"d3"]}
    assert recovered.highest_message_id == 5


@pytest.mark.parametrize("count", [1, 3, 4, 37, 256, 293, 600, 1024, 1025, 2100])
@pytest_twisted.ensureDeferred
async def test_runs_of_every_length_are_written_and_released_whole(stores, count):
    """A run is written in multi-row statements of a few fixed sizes, padded with rows
    that are skipped; every row is written, none more, and a cumulative acknowledgement of
    all of them releases them all."""
    store, _ = await stores.open()
    await gatherResults([store.create_queue(anycast(name)) for name in "ab"])
    queues = {i: ["a"] if i % 3 else ["a", "b"] for i in range(1, count + 1)}
    await gatherResults([store.add(message(i), queues[i]) for i in queues])
    store, recovered = await stores.reopen(store)
    assert ids(recovered, "a") == list(queues)
    assert ids(recovered, "b") == [i for i in queues if len(queues[i]) == 2]

    acked = [i for i in queues if i % 2]
    await store.acknowledge_many("a", acked)
    await gatherResults([store.acknowledge("b", i) for i in queues if len(queues[i]) == 2])
    store, recovered = await stores.reopen(store)
    assert ids(recovered, "a") == [i for i in queues if i % 2 == 0]
    assert ids(recovered, "b") == []
    assert stores.rows("messages") == count - len(acked)


def test_a_run_is_one_statement_of_a_fixed_size_per_thousand_rows():
    for count in range(3 * MAX_STATEMENT_ROWS):
        position, parts = 0, 0
        for start, end, shape in _parts(count):
            assert start == position and shape in STATEMENT_ROWS
            assert end - start <= shape < 2 * (end - start)  # padded up to the next shape
            position, parts = end, parts + 1
        assert position == count
        assert parts == -(-count // MAX_STATEMENT_ROWS)
