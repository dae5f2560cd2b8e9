"""The backup's side of replication: find the live node among the peers, take its copy of
the store, then apply every batch it writes and acknowledge it once on disk.

The backup logs in on a peer's core acceptor as the cluster user and sends
REPLICA_ANNOUNCE; a peer that is not live refuses the connection or the announcement, and
the next peer is tried, every ``retry`` seconds round the list. Everything it receives is
applied in order on one thread of its own (the store's files are written nowhere else
while the node is a backup); reading from the live node pauses while more than
``_HIGH`` packets wait for that thread, so memory stays bounded.

``in_sync`` is True from the moment the backup answered REPLICA_SYNCED until it starts a
new copy. Whether it may take over is the lease's decision (the live node names it there),
or without a lease the quorum vote's: the link dropping only makes the node try, never
serve by itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from bridge.protocol import PACKET_TYPES, PROTOCOL_VERSION, decode_packet, encode_packet
from bridge.protocol import packets as p
from bridge.store.errors import StoreError
from bridge.store.large import BodyFiles
from bridge.store.op_codec import decode_operations
from bridge.store.operations import AddMessage, CommitTransaction, Operation
from bridge.store.schema import SCHEMA_VERSION
from bridge.store.snapshot import ReplicaFile
from bridge.store.writer import Writer
from transport.endpoints import connect
from transport.frames import Frame
from transport.interfaces import IFrameConnection, IFrameReceiver
from transport.settings import ConnectionSettings
from transport.urls import URL

log = Logger()

_T = TypeVar("_T")

_HIGH, _LOW = 64, 16
"""Packets waiting to be applied at which reading pauses, and resumes."""


@attrs.frozen
class ReplicaStatus:
    """For ``/status`` and ``txbridge ctl ha status``."""

    live: str
    """The peer this backup copies from ("" when none)."""
    in_sync: bool
    applied: int
    """The last batch applied (on this link)."""
    reason: str
    """Why it is not in sync, when it is not."""


class ReplicaSink:
    """Copies the live node's store into ``path`` (this node's SQLite store)."""

    def __init__(
        self,
        path: Path,
        reactor: Any,
        *,
        node_name: str,
        holder: str,
        peers: Sequence[URL],
        user: str,
        password: str | None,
        retry: float,
        busy_timeout: float,
        failback: bool = False,
        sequence: Callable[[], int] = lambda: 0,
        on_lost: Callable[[], object] = lambda: None,
        settings: ConnectionSettings | None = None,
    ) -> None:
        """``failback``: announce that, once in sync, this node is to be live again;
        ``sequence()``: the activation sequence this node's store carries, announced;
        ``on_lost()``: the link to the live node dropped while in sync; ``settings``: the
        link's heartbeats and TTL (the live node drops a backup silent for its acceptor's
        connection-ttl, however idle the link)."""
        self._settings = settings
        self.path = path
        self._failback = failback
        self._sequence = sequence
        self._on_lost = on_lost
        self._reactor = reactor
        self._node_name = node_name
        self._holder = holder
        self._peers = tuple(peers)
        self._user = user
        self._password = password
        self._retry = retry
        self._busy_timeout = busy_timeout
        self._pool = _pool()
        self.in_sync = False
        self.live = ""
        self.live_url = ""
        """The core URL of the live node last copied from."""
        self.copied = False
        """A copy began since this was last cleared (the store is no longer this node's
        own)."""
        self.reason = "not connected to a live node yet"
        self.applied = 0
        self.epoch = 0
        """The highest epoch of a live node copied from: an older one is never copied."""
        self.lost_in_sync_at: float | None = None
        """When (monotonic) the link to the live node last dropped while in sync."""
        self._next_peer = 0
        self._receiver: _Receiver | None = None
        self._call: IDelayedCall | None = None
        self._running = False
        self._file: ReplicaFile | None = None
        self._writer: Writer | None = None
        self._bodies: dict[int, IO[bytes]] = {}
        self._began = False

    def start(self) -> None:
        """Look for the live node (at once, then every ``retry`` seconds)."""
        if self._running:
            return
        self._running = True
        self._pool = _pool()
        self._pool.start()
        self._try_next()

    async def stop(self) -> None:
        """Drop the link and close the copy: the store is the node's again."""
        if not self._running:
            return
        self._running = False
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        receiver, self._receiver = self._receiver, None
        if receiver is not None:
            receiver.close("the backup stops replicating")
        await deferToThreadPool(self._reactor, self._pool, self._close_files)
        self._pool.stop()

    def on_thread(self, call: Callable[[], _T]) -> Deferred[_T] | None:
        """Run ``call`` on the thread that writes the copy, between two of its packets, so
        that it never meets the store being started over (None when not copying)."""
        if not self._running:
            return None
        return deferToThreadPool(self._reactor, self._pool, call)

    def status(self) -> ReplicaStatus:
        return ReplicaStatus(
            self.live, self.in_sync, self.applied, "" if self.in_sync else self.reason
        )

    # -- finding the live node -------------------------------------------------------------
    def _try_next(self) -> None:
        self._call = None
        if not self._running or self._receiver is not None:
            return
        url = self._peers[self._next_peer % len(self._peers)]
        self._next_peer += 1
        receiver = _Receiver(self, url)
        self._receiver = receiver
        connecting = connect(
            self._reactor, url, receiver, settings=self._settings, accepted_types=PACKET_TYPES
        )
        connecting.addErrback(self._not_connected, receiver, url)

    def _not_connected(self, failure: Failure, receiver: _Receiver, url: URL) -> None:
        self._gone(receiver, f"{url}: {failure.getErrorMessage()}")

    def _gone(self, receiver: _Receiver, why: str) -> None:
        if self._receiver is not receiver:
            return
        self._receiver = None
        if self.in_sync:
            self.lost_in_sync_at = time.monotonic()
        if self.live:
            log.warn(
                "replica: the link to {live} is gone ({why}); {state}",
                live=self.live,
                why=why,
                state="in sync: trying to take over" if self.in_sync else "not in sync",
            )
        was_live, self.live = self.live, ""
        if not self.in_sync:
            self.reason = why
        if self._running:
            delay = self._retry if self._next_peer % len(self._peers) == 0 else 0.0
            self._call = self._reactor.callLater(delay, self._try_next)
        if was_live and self.in_sync:
            self._on_lost()

    # -- applying, on the replica thread ---------------------------------------------------
    def _apply(self, packet: p.Packet) -> Deferred[p.Packet | None]:
        return deferToThreadPool(self._reactor, self._pool, self._applied, packet)

    def _applied(self, packet: p.Packet) -> p.Packet | None:
        """Apply one packet of the live node's; what to answer, if anything."""
        if isinstance(packet, p.ReplicaSyncBegin):
            self._close_files()
            self._file = ReplicaFile(self.path, packet.schema_version)
            self._began = True
            return None
        if not self._began:  # this node's own store is not the live node's to write
            raise StoreError(f"{packet.TYPE.name} before REPLICA_SYNC_BEGIN")
        if isinstance(packet, p.ReplicaSyncFile):
            if self._file is None:
                raise StoreError("REPLICA_SYNC_FILE after the copy's file")
            self._file.write(packet.data)
        elif isinstance(packet, p.ReplicaBody):
            self._body(packet)
        elif isinstance(packet, p.ReplicaDiscard):
            body = self._bodies.pop(packet.message_id, None)
            if body is not None:
                body.close()
            BodyFiles(self.path.parent).path_for(packet.message_id).unlink(missing_ok=True)
        elif isinstance(packet, p.ReplicaBatch):
            writer = self._writer_open()
            writer.run(self._local_paths(decode_operations(packet.operations)))
            return p.ReplicaAck(packet.sequence)
        elif isinstance(packet, p.ReplicaSyncEnd):
            self._writer_open()
            return p.ReplicaSynced(packet.sequence)
        return None

    def _body(self, packet: p.ReplicaBody) -> None:
        body = self._bodies.get(packet.message_id)
        if body is None:
            target = BodyFiles(self.path.parent).path_for(packet.message_id)
            target.parent.mkdir(parents=True, exist_ok=True)
            body = self._bodies[packet.message_id] = open(target, "wb")  # noqa: SIM115
        body.write(packet.data)
        if packet.last:
            del self._bodies[packet.message_id]
            body.close()  # synced by the add that owns it, or at the end of the copy

    def _writer_open(self) -> Writer:
        if self._file is not None:
            self._file.finish(self._busy_timeout)
            self._file = None
        if self._writer is None:
            self._writer = Writer(self.path, self._busy_timeout)
            self._writer.open_replica()
        return self._writer

    def _local_paths(self, operations: list[Operation]) -> list[Operation]:
        """The live node's body paths made this node's."""
        bodies = BodyFiles(self.path.parent)
        result: list[Operation] = []
        for op in operations:
            if isinstance(op, AddMessage) and op.large_path is not None:
                result.append(attrs.evolve(op, large_path=str(bodies.path_for(op.message_id))))
            elif isinstance(op, CommitTransaction):
                result.append(CommitTransaction(tuple(self._local_paths(list(op.operations)))))
            else:
                result.append(op)
        return result

    def _close_files(self) -> None:
        self._began = False
        for body in self._bodies.values():
            body.close()
        self._bodies.clear()
        if self._file is not None:
            self._file.abort()
            self._file = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _pool() -> ThreadPool:
    return ThreadPool(1, 1, name="txbridge-replica-writer")


@implementer(IFrameReceiver)
class _Receiver:
    """One connection to a peer: log in, announce, then apply what comes, in order."""

    def __init__(self, sink: ReplicaSink, url: URL | str) -> None:
        self._sink = sink
        self._url = url
        self._connection: IFrameConnection | None = None
        self._waiting = 0
        self._paused = False
        self._broken = False
        self._refused: str | None = None
        """Why the live node refused this backup, which is why the link ends."""

    def connection_made(self, connection: IFrameConnection) -> None:
        self._connection = connection
        sink = self._sink
        connection.send(
            *encode_packet(
                p.Connect(
                    PROTOCOL_VERSION,
                    f"replica of node {sink._node_name}",
                    sink._user,
                    sink._password,
                    0,
                    connection.max_frame_size,
                )
            )
        )

    def frame_received(self, frame: Frame) -> None:
        connection = self._connection
        assert connection is not None
        try:
            packet = decode_packet(frame.type, frame.payload)
        except ValueError as error:
            connection.close(str(error))
            return
        if isinstance(packet, p.Connected):
            connection.logged_in()
            connection.send(
                *encode_packet(
                    p.ReplicaAnnounce(
                        self._sink._node_name,
                        self._sink._holder,
                        SCHEMA_VERSION,
                        self._sink._failback,
                        self._sink._sequence(),
                    )
                )
            )
            return
        if isinstance(packet, p.Failed):
            self._refused = f"{self._url} refused: {packet.message}"
            connection.close()
            return
        if isinstance(packet, p.ReplicaSyncBegin):
            sink = self._sink
            if packet.epoch < sink.epoch:  # the lease's gate prevents it: a defect if so
                why = (
                    f"{packet.node_name} is live at epoch {packet.epoch}, older than "
                    f"epoch {sink.epoch} seen before: a stale live node"
                )
                self._refused = why
                log.error("replica: refused to copy: {why}", why=why)
                connection.close(why)
                return
            sink.epoch = packet.epoch
            sink.in_sync = False
            sink.copied = True
            sink.live = packet.node_name
            sink.live_url = str(self._url)
            sink.applied = 0
            sink.reason = f"copying the store of {packet.node_name}"
            log.info(
                "replica: copying the store of {live} (epoch {epoch})",
                live=packet.node_name,
                epoch=packet.epoch,
            )
        self._waiting += 1
        if self._waiting >= _HIGH and not self._paused:
            self._paused = True
            connection.pause_reading()
        applied = self._sink._apply(packet)
        applied.addCallbacks(
            self._answer, self._failed, callbackArgs=(packet,), errbackArgs=(packet,)
        )

    def _answer(self, answer: p.Packet | None, packet: p.Packet) -> None:
        self._waiting -= 1
        if self._paused and self._waiting <= _LOW and self._connection is not None:
            self._paused = False
            self._connection.resume_reading()
        if answer is None or self._connection is None or self._broken:
            return
        sink = self._sink
        if isinstance(answer, p.ReplicaAck):
            sink.applied = answer.sequence
        elif isinstance(answer, p.ReplicaSynced):
            sink.in_sync = True
            log.info("replica: in sync with {live}", live=sink.live)
        self._connection.send(*encode_packet(answer))

    def _failed(self, failure: Failure, packet: p.Packet) -> None:
        self._waiting -= 1
        if self._broken:
            return
        self._broken = True
        why = f"applying {packet.TYPE.name} failed: {failure.getErrorMessage()}"
        log.error("replica: {why}", why=why)
        self._sink.in_sync = False
        self._sink.reason = why
        if self._connection is not None:
            self._connection.close(why)

    def connection_lost(self, reason: BaseException) -> None:
        self._connection = None
        self._sink._gone(self, self._refused or str(reason) or type(reason).__name__)

    def close(self, reason: str) -> None:
        if self._connection is not None:
            self._connection.close(reason)
