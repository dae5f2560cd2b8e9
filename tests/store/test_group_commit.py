"""Group commit: one transaction per reactor turn, batches in order, growing under load.

``GroupCommit`` is driven by hand here (a ``Clock`` for the turns, Deferreds for the
commits) to pin down its batching exactly; the store tests below use the real reactor,
writer thread and SQLite file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher
from twisted.python.failure import Failure

from bridge.store import CommitFailed
from bridge.store.batch import GroupCommit, Outcomes
from tests.store.conftest import anycast, message


class Commits:
    """Records each batch handed over and lets the test finish it."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.pending: list[Deferred[Outcomes]] = []

    def __call__(self, batch: list[str]) -> Deferred[Outcomes]:
        self.batches.append(batch)
        self.pending.append(Deferred())
        return self.pending[-1]

    def finish(self, outcomes: Outcomes | None = None) -> None:
        batch, done = self.batches[len(self.batches) - len(self.pending)], self.pending.pop(0)
        done.callback([None] * len(batch) if outcomes is None else outcomes)


def fired(deferreds: list[Deferred[None]]) -> list[bool]:
    return [d.called for d in deferreds]


def test_a_turns_items_form_one_batch_handed_over_at_the_end_of_the_turn():
    clock, commits = Clock(), Commits()
    group = GroupCommit(clock, commits)
    done = [group.submit(name) for name in ("a", "b", "c")]
    assert commits.batches == []
    clock.advance(0)
    assert commits.batches == [["a", "b", "c"]]
    assert fired(done) == [False, False, False]
    commits.finish()
    assert fired(done) == [True, True, True]
    assert (group.commits, group.committed_items) == (1, 3)


def test_items_arriving_during_a_commit_accumulate_over_turns_into_the_next_batch():
    clock, commits = Clock(), Commits()
    group = GroupCommit(clock, commits)
    group.submit("a")
    clock.advance(0)
    later = [group.submit("b")]
    clock.advance(0)
    later += [group.submit("c"), group.submit("d")]
    clock.advance(0)
    assert commits.batches == [["a"]]

    commits.finish()
    assert commits.batches == [["a"]]
    later.append(group.submit("e"))  # same turn as the first commit's confirmation
    clock.advance(0)
    assert commits.batches == [["a"], ["b", "c", "d", "e"]]
    commits.finish()
    assert fired(later) == [True] * 4
    assert (group.commits, group.committed_items) == (2, 5)


def test_callables_are_told_in_submission_order_with_deferreds_and_failures():
    clock, commits = Clock(), Commits()
    group = GroupCommit(clock, commits)
    told: list[tuple[str, object]] = []

    def then(name: str) -> Callable[[Failure | None], None]:
        def tell(failure: Failure | None) -> None:
            told.append((name, None if failure is None else failure.value))
            if name == "b":
                raise RuntimeError("a callback's own fault")

        return tell

    failures: list[Failure] = []

    def observe(event: dict[str, Any]) -> None:
        if "log_failure" in event:
            failures.append(event["log_failure"])

    group.submit_then("a", then("a"))
    deferred = group.submit("b2")
    deferred.addCallback(lambda _: told.append(("b2", None)))
    group.submit_then("b", then("b"))
    group.submit_then("c", then("c"))
    clock.advance(0)
    refused = ValueError("c refused")
    globalLogPublisher.addObserver(observe)
    try:
        commits.finish([None, None, None, refused])
    finally:
        globalLogPublisher.removeObserver(observe)
    assert told == [("a", None), ("b2", None), ("b", None), ("c", refused)]
    assert [failure.type for failure in failures] == [RuntimeError]

    group.submit_then("d", then("d"))
    clock.advance(0)
    commits.pending.pop(0).errback(CommitFailed("disk"))
    assert told[-1][0] == "d" and isinstance(told[-1][1], CommitFailed)
    assert group.idle


def test_one_items_failure_fails_it_alone():
    clock, commits = Clock(), Commits()
    group = GroupCommit(clock, commits)
    done = [group.submit(name) for name in ("a", "b")]
    clock.advance(0)
    commits.finish([ValueError("b is wrong"), None])
    errors: list[BaseException] = []
    done[0].addErrback(lambda failure: errors.append(failure.value))
    assert [str(e) for e in errors] == ["b is wrong"]
    assert done[1].called


def test_a_failed_batch_fails_each_item_and_the_next_batch_still_runs():
    clock, commits = Clock(), Commits()
    group = GroupCommit(clock, commits)
    first = [group.submit(name) for name in ("a", "b")]
    clock.advance(0)
    second = group.submit("c")
    commits.pending.pop(0).errback(RuntimeError("disk on fire"))
    errors: list[BaseException] = []
    for d in first:
        d.addErrback(lambda failure: errors.append(failure.value))
    assert [str(e) for e in errors] == ["disk on fire", "disk on fire"]
    assert (group.commits, group.failed_batches) == (0, 1)
    clock.advance(0)
    assert commits.batches[-1] == ["c"]
    commits.finish()
    assert second.called


def test_when_idle_waits_for_everything_submitted():
    clock, commits = Clock(), Commits()
    group = GroupCommit(clock, commits)
    assert group.when_idle().called
    group.submit("a")
    idle = group.when_idle()
    clock.advance(0)
    group.submit("b")
    commits.finish()
    assert not idle.called
    clock.advance(0)
    commits.finish()
    assert idle.called


@pytest_twisted.ensureDeferred
async def test_operations_issued_in_one_turn_share_one_sqlite_commit(stores):
    store, _ = await stores.open()
    await gatherResults([store.create_queue(anycast("a")), store.create_queue(anycast("b"))])
    commits, operations = store.commits, store.committed_operations

    issued = [store.add(message(i), ["a", "b"]) for i in range(1, 301)]
    issued += [store.acknowledge("a", i) for i in range(1, 101)]
    issued += [store.update_delivery_count("b", i, 1) for i in range(1, 51)]
    issued.append(store.store_duplicate_id("orders", b"d", keep=10))
    await gatherResults(issued)

    assert store.commits == commits + 1
    assert store.committed_operations == operations + len(issued)
    _, recovered = await stores.reopen(store)
    assert len(recovered.messages["a"]) == 200
    assert len(recovered.messages["b"]) == 300


@pytest_twisted.ensureDeferred
async def test_a_failed_commit_fails_its_batch_and_the_store_goes_on(sqlite_stores):
    stores = sqlite_stores
    store, _ = await stores.open(busy_timeout=0)
    await store.create_queue(anycast("orders"))
    # Another connection holds the file's write lock: the next batch cannot begin.
    other = sqlite3.connect(stores.data_dir / "messages.sqlite", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        failed = [store.add(message(i), ["orders"]) for i in (1, 2, 3)]
        for deferred in failed:
            with pytest.raises(
                CommitFailed, match=r"a batch of 3 operations could not be .*database is locked"
            ):
                await deferred
        other.execute("ROLLBACK")
    finally:
        other.close()

    await gatherResults([store.add(message(i), ["orders"]) for i in (1, 4)])
    _, recovered = await stores.reopen(store)
    assert [m.message.id for m in recovered.messages["orders"]] == [1, 4]
    assert recovered.highest_message_id == 4
