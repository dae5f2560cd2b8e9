"""The live node's replication against a real SQLite store and a fake connection: the
copy, then each batch confirmed only once the backup acknowledged it; the last step's
timeout; the lease cleared before anything is confirmed without a lost backup; memory
bounded while the copy is slow. The backup's side applies what was sent, and its store
then recovers exactly what the live node's does."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

import attrs
import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.task import deferLater

from bridge.protocol import decode_packet
from bridge.protocol import packets as p
from bridge.replication.backup import ReplicaSink
from bridge.replication.live import ReplicationLost, Replicator, SyncState
from bridge.store import SQLiteMessageStore, Unsettled
from bridge.store.schema import SCHEMA_VERSION
from tests.replication.conftest import TIMEOUT, until
from tests.store.conftest import anycast, message

LARGE = 700 * 1024


@attrs.define
class Pipe:
    """The live node's end of a backup's connection: what was sent, decoded."""

    sent: list[p.Packet] = attrs.Factory(list)
    closed: str | None = None
    is_writable: bool = True
    max_frame_size: int = 1 << 20
    link: Any = None
    writable: Deferred[None] | None = None

    def send(self, frame_type: int, payload: bytes) -> None:
        self.sent.append(decode_packet(frame_type, payload))

    def when_writable(self) -> Deferred[None]:
        if self.is_writable:
            return succeed(None)
        self.writable = Deferred()
        return self.writable

    def close(self, reason: str | None = None) -> None:
        if self.closed is None:
            self.closed = reason or ""
            reactor.callLater(0, self.link.lost, ConnectionDone(reason))

    def of(self, kind: type) -> list[Any]:
        return [packet for packet in self.sent if isinstance(packet, kind)]


@attrs.define
class Marks:
    """The lease's side: every name given, answered at once unless ``held``."""

    given: list[str] = attrs.Factory(list)
    held: list[Deferred[bool]] = attrs.Factory(list)
    hold: bool = False

    def __call__(self, replica: str) -> Deferred[bool]:
        self.given.append(replica)
        if not self.hold:
            return succeed(True)
        answer: Deferred[bool] = Deferred()
        self.held.append(answer)
        return answer


@pytest_twisted.async_yield_fixture
async def live(tmp_path):
    made: list[Any] = []

    async def make(**options: Any) -> tuple[SQLiteMessageStore, Replicator, Marks]:
        store = SQLiteMessageStore(tmp_path / "a", reactor)
        made.append(store)
        await store.open()
        await store.create_queue(anycast("orders"))
        marks = Marks()
        replicator = Replicator(
            store,
            store.path,
            reactor,
            node_name="a",
            epoch=lambda: 7,
            mark=marks,
            sync_timeout=options.pop("sync_timeout", TIMEOUT),
            retry=0.05,
            **options,
        )
        store.replication = replicator
        made.append(replicator)
        return store, replicator, marks

    yield make
    for each in reversed(made):
        await (each.stop() if isinstance(each, Replicator) else each.close())


async def add_large(store: SQLiteMessageStore, message_id: int, fill: bytes) -> Deferred[None]:
    body = store.new_body(message_id)
    for _ in range(LARGE // 1024):
        body.write(fill * 1024)
    return store.add(message(message_id, body=b"", large=body.finish()), ["orders"])


def announce(replicator: Replicator, pipe: Pipe) -> None:
    pipe.link = replicator.announced(pipe, p.ReplicaAnnounce("b", "b/1", SCHEMA_VERSION))


@pytest_twisted.ensureDeferred
async def test_the_copy_then_each_batch_once_the_backup_has_it(live, tmp_path):
    store, replicator, marks = await live()
    for n in range(1, 4):
        await store.add(message(n), ["orders"])
    await (await add_large(store, 4, b"x"))
    pipe = Pipe()
    announce(replicator, pipe)
    await until(lambda: pipe.of(p.ReplicaSyncEnd), "the end of the copy")
    assert isinstance(pipe.sent[0], p.ReplicaSyncBegin)
    assert (pipe.sent[0].node_name, pipe.sent[0].epoch) == ("a", 7)
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(b"".join(chunk.data for chunk in pipe.of(p.ReplicaSyncFile)))
    with contextlib.closing(sqlite3.connect(copy)) as database:
        stored = database.execute("SELECT id, large IS NOT NULL FROM messages ORDER BY id")
        assert stored.fetchall() == [(1, 0), (2, 0), (3, 0), (4, 1)]
    assert b"".join(body.data for body in pipe.of(p.ReplicaBody)) == b"x" * LARGE
    assert pipe.of(p.ReplicaSyncEnd) == [p.ReplicaSyncEnd(0)]
    assert replicator.state is SyncState.FINAL

    added = store.add(message(5), ["orders"])  # the last step: held for the backup
    await until(lambda: pipe.of(p.ReplicaBatch), "the batch sent")
    await deferLater(reactor, 0.05, lambda: None)
    assert not added.called
    pipe.link.received(p.ReplicaSynced(0))
    assert replicator.state is SyncState.IN_SYNC
    pipe.link.received(p.ReplicaAck(1))
    await added
    large = await add_large(store, 6, b"y")  # one batch at a time: each waits for its ack
    await until(lambda: len(pipe.of(p.ReplicaBatch)) == 2, "the next batch sent")
    assert not large.called
    pipe.link.received(p.ReplicaAck(2))
    await large
    assert marks.given == ["b/1"]
    assert replicator.status().lag_batches == 0

    acked = store.acknowledge("orders", 1)
    await until(lambda: len(pipe.of(p.ReplicaBatch)) == 3, "the acknowledgement sent")
    pipe.link.received(p.ReplicaAck(3))
    await acked
    sink = ReplicaSink(
        tmp_path / "b" / "messages.sqlite",
        reactor,
        node_name="b",
        holder="b/1",
        peers=["tcp://127.0.0.1:1"],
        user="cluster",
        password=None,
        retry=1.0,
        busy_timeout=5.0,
    )
    for packet in pipe.sent:
        sink._applied(packet)
    sink._close_files()
    copy = SQLiteMessageStore(tmp_path / "b", reactor)
    recovered = await copy.open()
    await copy.close()
    bodies = []
    for stored in recovered.messages["orders"]:
        if stored.message.large is None:
            bodies.append(stored.message.body)
        else:
            with open(stored.message.large.path, "rb") as body:
                bodies.append(body.read())
    assert bodies == [b"body 2", b"body 3", b"x" * LARGE, b"body 5", b"y" * LARGE]
    assert recovered.after_crash, "the copy takes over as after the live node's crash"


@pytest_twisted.ensureDeferred
async def test_the_last_step_gives_the_copy_up_never_the_live_node(live):
    store, replicator, _ = await live(sync_timeout=0.2)
    pipe = Pipe()
    announce(replicator, pipe)
    await until(lambda: pipe.of(p.ReplicaSyncEnd), "the end of the copy")
    added = store.add(message(1), ["orders"])
    await until(lambda: pipe.closed is not None, "the copy given up")
    assert pipe.closed == "initial-replication-sync-timeout"
    await added  # confirmed without the backup, which starts over
    assert replicator.state is SyncState.NONE
    assert replicator.replicate([]) is None


@pytest_twisted.ensureDeferred
async def test_a_lost_backup_is_cleared_from_the_lease_before_anything_is_confirmed(live):
    store, replicator, marks = await live()
    pipe = Pipe()
    announce(replicator, pipe)
    await until(lambda: pipe.of(p.ReplicaSyncEnd), "the end of the copy")
    pipe.link.received(p.ReplicaSynced(0))
    marks.hold = True
    added = store.add(message(1), ["orders"])
    await until(lambda: pipe.of(p.ReplicaBatch), "the batch sent")
    pipe.close("gone")
    await until(lambda: marks.held, "the lease asked to clear the backup")
    assert marks.given[-1] == ""
    with pytest.raises(ValueError, match="the lease still names the last backup"):
        announce(replicator, Pipe())  # a new copy waits until the lease is cleared
    await deferLater(reactor, 0.05, lambda: None)  # the clearing is in flight
    assert not added.called, "confirmed while the lease still names the backup in sync"
    marks.held[0].callback(True)
    await added


@pytest_twisted.ensureDeferred
async def test_a_node_that_stops_first_fails_the_waiting_batches(live):
    store, replicator, _ = await live()
    pipe = Pipe()
    announce(replicator, pipe)
    await until(lambda: pipe.of(p.ReplicaSyncEnd), "the end of the copy")
    pipe.link.received(p.ReplicaSynced(0))
    added = store.add(message(1), ["orders"])
    await until(lambda: pipe.of(p.ReplicaBatch), "the batch sent")
    await replicator.stop()
    with pytest.raises(ReplicationLost) as lost:
        await added
    assert isinstance(lost.value, Unsettled), "the client is to send it again, not give up"


@pytest_twisted.ensureDeferred
async def test_batches_wait_while_a_slow_copy_holds_too_much(live):
    store, replicator, _ = await live(max_queued=1)
    for n in range(1, 3):
        await store.add(message(n), ["orders"])
    pipe = Pipe(is_writable=False)
    announce(replicator, pipe)
    await until(lambda: pipe.writable is not None, "the copy waiting to send")
    added = store.add(message(3), ["orders"])
    await deferLater(reactor, 0.05, lambda: None)
    assert not added.called, "a queue above max-queued must hold new batches back"
    pipe.is_writable = True
    pipe.writable.callback(None)
    await added
    await until(lambda: pipe.of(p.ReplicaBatch), "the queued batch sent")


@pytest_twisted.ensureDeferred
async def test_a_naming_that_failed_is_cleared_all_the_same(live):
    """The lease's answer was lost (a timeout): the naming may have landed, so the live
    node clears it before confirming anything without the backup."""
    store, replicator, marks = await live()
    pipe = Pipe()
    announce(replicator, pipe)
    await until(lambda: pipe.of(p.ReplicaSyncEnd), "the end of the copy")
    marks.hold = True
    added = store.add(message(1), ["orders"])
    await until(lambda: pipe.of(p.ReplicaBatch), "the batch sent")
    pipe.link.received(p.ReplicaSynced(0))
    marks.held[0].errback(TimeoutError("no answer from the database"))
    await until(lambda: len(marks.held) == 2, "the lease asked to clear the backup")
    assert marks.given == ["b/1", ""]
    assert not added.called
    marks.held[1].callback(True)
    await added


@pytest_twisted.ensureDeferred
async def test_a_deleted_body_is_deleted_on_the_backup_too(live):
    store, replicator, _ = await live()
    large = await add_large(store, 1, b"z")
    await large
    path = store.large_body_path(1)
    pipe = Pipe()
    announce(replicator, pipe)
    await store.discard_body(path)  # while the copy runs: after the copy's bodies
    await until(lambda: pipe.of(p.ReplicaSyncEnd), "the end of the copy")
    kinds = [type(packet) for packet in pipe.sent]
    assert kinds.index(p.ReplicaDiscard) > max(
        index for index, kind in enumerate(kinds) if kind is p.ReplicaBody
    )
    assert pipe.of(p.ReplicaDiscard) == [p.ReplicaDiscard(1)]
