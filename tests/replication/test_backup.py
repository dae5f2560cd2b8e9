"""The backup's side of replication with a fake connection: it logs in and announces, it
applies what the live node sends in order and acknowledges it once on disk, it stops
reading while too much waits for its thread, and a packet it cannot apply ends the link
naming why, the backup then out of sync."""

from __future__ import annotations

from typing import Any

import attrs
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.task import deferLater

from bridge.protocol import decode_packet, encode_packet
from bridge.protocol import packets as p
from bridge.replication.backup import ReplicaSink, _Receiver
from bridge.store.op_codec import encode_operations
from bridge.store.operations import CreateQueue
from bridge.store.records import QueueRecord
from bridge.store.schema import SCHEMA_VERSION, connect
from tests.replication.conftest import until
from transport.frames import Frame


@attrs.define
class Wire:
    """The backup's end of its link: what it sent, and whether it reads."""

    sent: list[p.Packet] = attrs.Factory(list)
    closed: str | None = None
    paused: int = 0
    resumed: int = 0
    max_frame_size: int = 1 << 20
    is_writable: bool = True

    def send(self, frame_type: int, payload: bytes) -> None:
        self.sent.append(decode_packet(frame_type, payload))

    def logged_in(self) -> None:
        pass

    def pause_reading(self) -> None:
        self.paused += 1

    def resume_reading(self) -> None:
        self.resumed += 1

    def close(self, reason: str | None = None) -> None:
        self.closed = reason or ""

    def when_writable(self) -> Deferred[None]:
        return succeed(None)


@pytest_twisted.async_yield_fixture
async def linked(tmp_path):
    sink = ReplicaSink(
        tmp_path / "b" / "messages.sqlite",
        reactor,
        node_name="b",
        holder="b/1",
        peers=["tcp://127.0.0.1:1"],
        user="cluster",
        password="secret",
        retry=60.0,
        busy_timeout=5.0,
        failback=True,
    )
    sink._running = True
    sink._pool.start()
    receiver = _Receiver(sink, "tcp://a")
    sink._receiver = receiver
    wire = Wire()
    receiver.connection_made(wire)
    yield sink, receiver, wire
    sink._receiver = None
    await sink.stop()


def deliver(receiver: Any, packet: p.Packet) -> None:
    receiver.frame_received(Frame(*encode_packet(packet)))


def queue(name: str) -> bytes:
    return encode_operations([CreateQueue(QueueRecord(name, name, "anycast"))])


@pytest_twisted.ensureDeferred
async def test_it_logs_in_announces_applies_and_acknowledges(linked, tmp_path):
    sink, receiver, wire = linked
    source = tmp_path / "a" / "messages.sqlite"
    connect(source, 5.0).close()
    copy = source.read_bytes()
    assert isinstance(wire.sent[0], p.Connect)
    assert (wire.sent[0].user, wire.sent[0].password) == ("cluster", "secret")
    deliver(receiver, p.Connected("a", "id", 3, -1, 1 << 20))
    assert wire.sent[1] == p.ReplicaAnnounce("b", "b/1", SCHEMA_VERSION, True)
    deliver(receiver, p.ReplicaSyncBegin("a", 4, SCHEMA_VERSION))
    deliver(receiver, p.ReplicaSyncFile(copy[:1000]))
    deliver(receiver, p.ReplicaSyncFile(copy[1000:]))
    deliver(receiver, p.ReplicaBatch(1, queue("orders")))
    deliver(receiver, p.ReplicaSyncEnd(1))
    await until(lambda: p.ReplicaSynced(1) in wire.sent, "the copy confirmed")
    assert wire.sent[2:] == [p.ReplicaAck(1), p.ReplicaSynced(1)]
    assert sink.in_sync and sink.live == "a"
    deliver(receiver, p.ReplicaBatch(2, queue("invoices")))
    await until(lambda: p.ReplicaAck(2) in wire.sent, "the batch acknowledged")
    assert sink.status().applied == 2


@pytest_twisted.ensureDeferred
async def test_a_packet_it_cannot_apply_ends_the_link_naming_why(linked):
    sink, receiver, wire = linked
    deliver(receiver, p.Connected("a", "id", 3, -1, 1 << 20))
    deliver(receiver, p.ReplicaSyncBegin("a", 4, SCHEMA_VERSION))
    deliver(receiver, p.ReplicaSyncFile(b"secrets"))
    deliver(receiver, p.ReplicaBatch(1, queue("orders")))  # not acknowledged: after it
    await until(lambda: wire.closed is not None, "the link ended")
    assert "the live node's copy is not a store" in wire.closed, wire.closed
    assert not sink.in_sync and "not a store" in sink.status().reason
    await deferLater(reactor, 0.05, lambda: None)
    assert not [packet for packet in wire.sent if isinstance(packet, p.ReplicaAck)]


@pytest_twisted.ensureDeferred
async def test_garbage_operations_end_the_link(linked):
    _sink, receiver, wire = linked
    deliver(receiver, p.Connected("a", "id", 3, -1, 1 << 20))
    deliver(receiver, p.ReplicaSyncBegin("a", 4, SCHEMA_VERSION))
    deliver(receiver, p.ReplicaBatch(1, b"\x09garbage"))
    await until(lambda: wire.closed is not None, "the link ended")
    assert "REPLICA_BATCH" in wire.closed and "unknown tag 9" in wire.closed, wire.closed


@pytest_twisted.ensureDeferred
async def test_reading_pauses_while_too_much_waits(linked):
    _sink, receiver, wire = linked
    deliver(receiver, p.Connected("a", "id", 3, -1, 1 << 20))
    deliver(receiver, p.ReplicaSyncBegin("a", 4, SCHEMA_VERSION))
    for n in range(1, 101):
        deliver(receiver, p.ReplicaBatch(n, queue(f"q{n}")))
    assert wire.paused == 1, "reading goes on while 64 packets wait"
    await until(lambda: p.ReplicaAck(100) in wire.sent, "every batch applied")
    assert wire.resumed == 1


@pytest_twisted.ensureDeferred
async def test_a_refused_announcement_is_the_reason(linked):
    sink, receiver, wire = linked
    deliver(receiver, p.Connected("a", "id", 3, -1, 1 << 20))
    deliver(receiver, p.Failed(0, p.ErrorCode.PERMISSION_DENIED, "only the cluster user"))
    assert wire.closed == ""
    receiver.connection_lost(ConnectionDone("closed cleanly"))
    assert "refused: only the cluster user" in sink.status().reason, "the refusal is the reason"


@pytest_twisted.ensureDeferred
async def test_nothing_is_written_before_the_copy_begins(linked, tmp_path):
    _, receiver, wire = linked
    deliver(receiver, p.Connected("a", "id", 3, -1, 1 << 20))
    deliver(receiver, p.ReplicaBatch(1, queue("orders")))
    await until(lambda: wire.closed is not None, "the link ended")
    assert "REPLICA_BATCH before REPLICA_SYNC_BEGIN" in wire.closed, wire.closed
    assert not (tmp_path / "b").exists(), "the node's own store was touched"


@pytest_twisted.ensureDeferred
async def test_a_live_node_of_an_older_epoch_is_never_copied(linked):
    sink, receiver, wire = linked
    sink.epoch = 5
    deliver(receiver, p.Connected("a", "id", 3, -1, 1 << 20))
    deliver(receiver, p.ReplicaSyncBegin("a", 4, SCHEMA_VERSION))
    assert "older than epoch 5" in wire.closed, wire.closed
    receiver.connection_lost(ConnectionDone("closed cleanly"))
    assert "a stale live node" in sink.status().reason


@pytest_twisted.ensureDeferred
async def test_a_body_the_live_node_deleted_goes(linked, tmp_path):
    _sink, receiver, wire = linked
    deliver(receiver, p.Connected("a", "id", 3, -1, 1 << 20))
    deliver(receiver, p.ReplicaSyncBegin("a", 4, SCHEMA_VERSION))
    deliver(receiver, p.ReplicaBody(7, b"body", True))
    deliver(receiver, p.ReplicaSyncEnd(0))
    await until(lambda: p.ReplicaSynced(0) in wire.sent, "the copy confirmed")
    body = tmp_path / "b" / "large-messages" / "7.msg"
    assert body.read_bytes() == b"body"
    deliver(receiver, p.ReplicaDiscard(7))
    await until(lambda: not body.exists(), "the body deleted")
