"""The live node's side of replication: its store copied to one backup, then kept in sync.

A backup announces itself on a core connection (bridge.replication.interfaces). The live node
then, while it goes on serving:

1. takes a snapshot of its store between two batches (``MessageStore.between_batches``):
   every batch handed to the writer later is queued for the backup instead;
2. sends the snapshot's rows and large bodies, then the queued batches (each after the
   bodies of its large messages), paced by the connection's writability; while the queue
   is above ``max_queued`` bytes, new batches wait for it (memory stays bounded);
3. sends REPLICA_SYNC_END once the queue is empty. From then on every batch's confirmation
   waits for the backup's REPLICA_ACK: the last step of the copy blocks, bounded by
   ``initial-replication-sync-timeout``, whose expiry gives the copy up (never the live
   node) and the backup starts over;
4. on REPLICA_SYNCED names the backup in sync in the lease (``mark``): from then on the
   backup may take over, and every confirmation waits for its acknowledgement
   (synchronous replication, one acknowledgement per group commit).

When the link drops the backup is out of sync: the lease must say so before any batch is
confirmed without it, else the backup could take over missing it. Waiting batches are
released only once ``mark("")`` landed; a node that stops first, or whose ``mark("")`` is
refused (the lease is another's, or without a lease the quorum vote was lost), fails
them instead.
"""

from __future__ import annotations

import enum
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from bridge.protocol import encode_packet
from bridge.protocol import packets as p
from bridge.replication.interfaces import IReplicaLink, IReplicationSource
from bridge.store.errors import Unsettled
from bridge.store.front import MessageStore
from bridge.store.interfaces import IReplication
from bridge.store.op_codec import encode_operations
from bridge.store.operations import (
    AddMessage,
    CommitTransaction,
    Operation,
    PageMessage,
    ReleasePages,
)
from bridge.store.schema import SCHEMA_VERSION
from bridge.store.snapshot import Snapshot
from transport.interfaces import IFrameConnection

log = Logger()

CHUNK = 1024 * 1024
"""Bytes of rows or of a body per packet."""
PINNED = "replication-bodies"
"""The folder, beside the store, of links to large bodies of batches not sent yet."""


class SyncState(enum.StrEnum):
    NONE = "none"
    """No backup."""
    SYNCING = "syncing"
    """Copying the store; batches are queued, confirmed without the backup."""
    FINAL = "final"
    """The last step: confirmations wait for the backup."""
    IN_SYNC = "in-sync"
    """The backup has everything; every confirmation waits for it."""


class ReplicationLost(Unsettled):
    """The node stopped before the lease could say its backup is out of sync: the batch
    is not confirmed, nor refused."""


@attrs.define
class _Batch:
    sequence: int
    operations: bytes
    bodies: list[tuple[int, Path]]


@attrs.frozen
class _Discard:
    """A large body the live node deleted, for the backup to delete in turn."""

    message_id: int


@attrs.frozen
class ReplicationStatus:
    """For ``/status`` and ``txbridge ctl ha status``."""

    state: str
    backup: str
    sync_bytes: int
    """Bytes of the copy sent so far (rows and bodies)."""
    lag_batches: int
    """Batches sent or queued that the backup has not acknowledged."""
    queued_bytes: int
    last_sync_seconds: float | None


@implementer(IReplicationSource, IReplication)
class Replicator:
    """Copies ``store`` (SQLite, at ``path``) to one backup at a time."""

    def __init__(
        self,
        store: MessageStore,
        path: Path,
        reactor: Any,
        *,
        node_name: str,
        epoch: Callable[[], int],
        mark: Callable[[str], Deferred[bool]],
        sync_timeout: float,
        retry: float,
        hand_over: Callable[[str], object] = lambda backup: None,
        newer: Callable[[int, str], object] = lambda sequence, backup: None,
        max_queued: int = 64 * 1024 * 1024,
    ) -> None:
        """``mark(backup)`` names the backup in sync in the lease ("" for none) and fires
        True once it did, False if the lease is no longer this node's; ``retry`` is how
        long to wait before marking again after an error; ``hand_over(backup)`` is called
        once a backup that announced a failback is named in sync; ``newer(sequence,
        backup)`` once a backup announced a store newer than this node's: this node is
        stale, and must stop serving."""
        self._store = store
        self._path = path
        self._reactor = reactor
        self._node_name = node_name
        self._epoch = epoch
        self._mark = mark
        self._hand_over = hand_over
        self._newer = newer
        self._failback = False
        self._sync_timeout = sync_timeout
        self._retry = retry
        self._max_queued = max_queued
        self._pinned = path.parent / PINNED
        shutil.rmtree(self._pinned, ignore_errors=True)
        self._readers = ThreadPool(1, 1, name="txbridge-replication-reader")
        self._readers.start()
        self.state = SyncState.NONE
        self.backup = ""
        self._link: IFrameConnection | None = None
        self._sequence = 0
        self._queue: deque[_Batch | _Discard] = deque()
        self._queued_bytes = 0
        self._wake: Deferred[None] | None = None
        self._room: list[Deferred[None]] = []
        self._acks: dict[int, Deferred[None]] = {}
        self._sync_bytes = 0
        self._timeout: IDelayedCall | None = None
        self._sync_started = 0.0
        self._last_sync: float | None = None
        self._naming = False
        self._maybe_named = False
        """The lease may name the backup (from the naming's start until a clearing landed)."""
        self._stopped = False

    # -- IReplicationSource --------------------------------------------------------------
    def announced(self, connection: IFrameConnection, announce: p.ReplicaAnnounce) -> IReplicaLink:
        if self._stopped:
            raise ValueError("this node is not live")
        if announce.schema_version != SCHEMA_VERSION:
            raise ValueError(
                f"the backup's store has schema version {announce.schema_version}, this "
                f"node's {SCHEMA_VERSION}: upgrade both to the same txbridge"
            )
        if announce.sequence > self._epoch():
            self._newer(announce.sequence, announce.holder)
            raise ValueError(
                f"the backup's store carries activation sequence {announce.sequence}, newer "
                f"than this node's {self._epoch()}: this node is stale and stops serving"
            )
        if self._link is not None:
            raise ValueError(f"{self.backup} replicates this node already")
        if self._maybe_named:
            raise ValueError("the lease still names the last backup in sync: try again")
        self._link, self.backup = connection, announce.holder
        self._failback = announce.failback
        log.info(
            "replication: backup {backup} announced, copying the store", backup=announce.holder
        )
        Deferred.fromCoroutine(self._copy(connection)).addErrback(self._copy_failed, connection)
        return _Link(self, connection)

    # -- IReplication ----------------------------------------------------------------------
    def replicate(self, operations: Sequence[Operation]) -> Deferred[None] | None:
        if self._stopped:
            return fail(_lost_at_stop())  # a backup may be named in sync still
        if self.state is SyncState.NONE:
            return None
        durable = _durable(operations)
        if not durable:
            return None
        self._sequence += 1
        batch = _Batch(self._sequence, encode_operations(durable), self._pin(durable))
        self._queue.append(batch)
        self._queued_bytes += len(batch.operations)
        self._wake_pump()
        if self.state is SyncState.SYNCING:
            if self._queued_bytes <= self._max_queued:
                return None
            room: Deferred[None] = Deferred()
            self._room.append(room)
            return room
        waiter: Deferred[None] = Deferred()
        self._acks[batch.sequence] = waiter
        return waiter

    def discarded(self, path: str) -> None:
        if self.state is SyncState.NONE or self._stopped:
            return
        name = Path(path).name
        if name.endswith(".msg") and name[:-4].isdigit():
            self._queue.append(_Discard(int(name[:-4])))
            self._wake_pump()

    def diverged(self, failure: Failure) -> None:
        if self._link is not None:
            log.warn(
                "replication: a batch failed here after it went to {backup}; the copy "
                "starts over: {why}",
                backup=self.backup,
                why=failure.value,
            )
            self._link.close("the live node's store failed a batch the copy took")

    # -- what the node calls ---------------------------------------------------------------
    def status(self) -> ReplicationStatus:
        syncing = self.state is SyncState.SYNCING
        unacked = (
            sum(isinstance(each, _Batch) for each in self._queue) if syncing else len(self._acks)
        )
        return ReplicationStatus(
            self.state.value,
            self.backup,
            self._sync_bytes,
            unacked,
            self._queued_bytes,
            self._last_sync,
        )

    async def stop(self, *, withdraw: bool = False) -> None:
        """The node stops serving: end the link; batches still waiting fail. With
        ``withdraw`` (a clean stop without ``failover-on-shutdown``) the lease first stops
        naming the backup, so that it does not take over."""
        if self._stopped:
            return
        self._stopped = True
        if withdraw and self._maybe_named:
            try:
                await self._mark("")
            except Exception as error:
                log.warn("replication: withdrawing the backup failed: {why}", why=error)
        link, self._link = self._link, None  # its loss is no news now: nothing unmarks
        if self._timeout is not None and self._timeout.active():
            self._timeout.cancel()
        self._timeout = None
        self._end(_lost_at_stop())
        if link is not None:
            link.close("the live node stops")
        self._readers.stop()

    # -- the copy --------------------------------------------------------------------------
    async def _copy(self, link: IFrameConnection) -> None:
        self.state = SyncState.SYNCING  # from now on batches are queued for the backup
        self._sync_started = time.monotonic()
        self._sync_bytes = 0
        snapshot = await self._store.between_batches(lambda: Snapshot(self._path))
        try:
            link.send(
                *encode_packet(p.ReplicaSyncBegin(self._node_name, self._epoch(), SCHEMA_VERSION))
            )
            chunks = snapshot.chunks(self._chunk_size(link))
            while self._link is link:
                chunk = await deferToThreadPool(self._reactor, self._readers, next, chunks, None)
                if chunk is None:
                    break
                await self._send(link, p.ReplicaSyncFile(chunk))
                self._sync_bytes += len(chunk)
            for message_id in snapshot.large_ids:
                if self._link is not link:
                    break
                await self._send_body(link, message_id, snapshot.body_path(message_id))
        finally:
            snapshot.close()
        await self._drain(link)
        if self._link is not link:
            return
        self.state = SyncState.FINAL
        for room in self._take_room():
            room.callback(None)
        self._timeout = self._reactor.callLater(self._sync_timeout, self._timed_out, link)
        link.send(*encode_packet(p.ReplicaSyncEnd(self._sequence)))
        log.info(
            "replication: copy sent to {backup} ({size} bytes), waiting for it to confirm",
            backup=self.backup,
            size=self._sync_bytes,
        )
        while self._link is link:
            await self._drain(link)
            if self._link is link and not self._queue:
                self._wake = Deferred()
                await self._wake

    def _copy_failed(self, failure: Failure, link: IFrameConnection) -> None:
        if self._link is link and not failure.check(CancelledError):
            log.failure("replication: the copy to {backup} failed", failure, backup=self.backup)
            link.close(f"the live node's copy failed: {failure.getErrorMessage()}")

    async def _drain(self, link: IFrameConnection) -> None:
        """Send the queued batches, each after its large bodies."""
        while self._link is link and self._queue:
            batch = self._queue[0]
            if isinstance(batch, _Discard):
                await self._send(link, p.ReplicaDiscard(batch.message_id))
                if self._link is link:
                    self._queue.popleft()
                continue
            for message_id, pin in batch.bodies:
                await self._send_body(link, message_id, pin)
                pin.unlink(missing_ok=True)
            await self._send(link, p.ReplicaBatch(batch.sequence, batch.operations))
            if self._link is not link:
                return
            self._queue.popleft()
            self._queued_bytes -= len(batch.operations)
            if self._queued_bytes <= self._max_queued:
                for room in self._take_room():
                    room.callback(None)

    async def _send(self, link: IFrameConnection, packet: p.Packet) -> None:
        if not link.is_writable:
            await link.when_writable()
        link.send(*encode_packet(packet))

    async def _send_body(self, link: IFrameConnection, message_id: int, path: Path) -> None:
        """A body in chunks. A body missing here was acknowledged and deleted before its
        batch was sent: a later batch deletes its message, so an empty one will do."""
        size = self._chunk_size(link)
        try:
            body = open(path, "rb")  # noqa: SIM115
        except FileNotFoundError:
            await self._send(link, p.ReplicaBody(message_id, b"", True))
            return
        with body:
            data = body.read(size)
            while True:
                after = body.read(size)
                await self._send(link, p.ReplicaBody(message_id, data, not after))
                self._sync_bytes += len(data) if self.state is SyncState.SYNCING else 0
                if not after:
                    return
                data = after

    @staticmethod
    def _chunk_size(link: IFrameConnection) -> int:
        """The bytes of a file a packet carries: ``CHUNK``, or less in a smaller frame."""
        return min(CHUNK, max(1024, link.max_frame_size - 64))

    def _pin(self, operations: list[Operation]) -> list[tuple[int, Path]]:
        """Links to the batch's large bodies, which an acknowledgement may delete before the
        batch is sent."""
        pins = []
        for add in _adds(operations):
            if add.large_path is not None:
                pin = self._pinned / f"{self._sequence}-{add.message_id}.msg"
                try:
                    self._pinned.mkdir(exist_ok=True)
                    os.link(add.large_path, pin)
                except OSError as error:  # its add fails here as on the backup
                    log.warn("replication: body {path}: {why}", path=add.large_path, why=error)
                pins.append((add.message_id, pin))
        return pins

    # -- the backup's answers ------------------------------------------------------------
    def _synced(self, link: IFrameConnection, sequence: int) -> None:
        if self.state is not SyncState.FINAL or self._naming:
            link.close(f"REPLICA_SYNCED {sequence} out of turn ({self.state.value})")
            return
        if self._timeout is not None and self._timeout.active():
            self._timeout.cancel()
        self._timeout = None
        self._naming = self._maybe_named = True
        Deferred.fromCoroutine(self._name_in_sync(link, self.backup))

    async def _name_in_sync(self, link: IFrameConnection, backup: str) -> None:
        """The backup has everything: name it in the lease, after which it may take over
        (and is shown in sync)."""
        try:
            named = await self._mark(backup)
        except Exception as error:
            named = False
            log.warn("replication: naming {backup} in sync failed: {why}", backup=backup, why=error)
        finally:
            self._naming = False
        if self._link is not link:
            return
        if not named:
            link.close("the lease could not name this backup in sync")
            return
        self.state = SyncState.IN_SYNC
        self._last_sync = time.monotonic() - self._sync_started
        log.info(
            "replication: {backup} is in sync ({seconds:.2f} s), named so in the lease",
            backup=backup,
            seconds=self._last_sync,
        )
        if self._failback:
            self._hand_over(backup)

    def _acked(self, sequence: int) -> None:
        while self._acks:
            first = next(iter(self._acks))
            if first > sequence:
                return
            self._acks.pop(first).callback(None)

    def _timed_out(self, link: IFrameConnection) -> None:
        self._timeout = None
        log.warn(
            "replication: {backup} did not confirm the copy within "
            "initial-replication-sync-timeout ({timeout} s); it starts over",
            backup=self.backup,
            timeout=self._sync_timeout,
        )
        link.close("initial-replication-sync-timeout")

    def _lost(self, link: IFrameConnection, reason: BaseException) -> None:
        if self._link is not link:
            return
        log.warn(
            "replication: backup {backup} is gone ({state}): {why}",
            backup=self.backup,
            state=self.state.value,
            why=reason,
        )
        self._link = None
        if self._timeout is not None and self._timeout.active():
            self._timeout.cancel()
        self._timeout = None
        self._wake_pump()
        # A failed naming may have landed all the same; and from the last step on, the
        # backup may hold itself in sync (it answered REPLICA_SYNCED), which without a
        # lease is what lets it ask to take over: either way the live lock must hear of the
        # loss before anything is confirmed without the backup.
        if self._maybe_named or self.state is SyncState.FINAL:
            Deferred.fromCoroutine(self._unmark())  # waiters wait for the lock to say so
        else:
            self._end(None)

    async def _unmark(self) -> None:
        """Out of sync: say so in the lease, retrying, before any batch is confirmed
        without the backup."""
        while not self._stopped:
            try:
                cleared = await self._mark("")
            except Exception as error:
                log.warn("replication: clearing the backup in sync failed: {why}", why=error)
                pause: Deferred[None] = Deferred()
                self._reactor.callLater(self._retry, pause.callback, None)
                await pause
                continue
            if not cleared:  # not this node's to confirm any more: its stop fails them
                log.warn("replication: the live lock is no longer this node's")
                return
            self._maybe_named = False
            self._end(None)
            return

    def _end(self, error: Exception | None) -> None:
        """No backup any more: release (or, with ``error``, fail) every waiting batch."""
        self.state = SyncState.NONE
        self._queue.clear()
        self._queued_bytes = 0
        shutil.rmtree(self._pinned, ignore_errors=True)
        waiting = [*self._take_room(), *self._acks.values()]
        self._acks.clear()
        for waiter in waiting:
            if error is None:
                waiter.callback(None)
            else:
                waiter.errback(Failure(error))
        if self._link is None:
            self.backup = ""

    def _take_room(self) -> list[Deferred[None]]:
        room, self._room = self._room, []
        return room

    def _wake_pump(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.callback(None)


@implementer(IReplicaLink)
@attrs.define
class _Link:
    replicator: Replicator
    connection: IFrameConnection

    def received(self, packet: p.Packet) -> None:
        if isinstance(packet, p.ReplicaAck):
            self.replicator._acked(packet.sequence)
        elif isinstance(packet, p.ReplicaSynced):
            self.replicator._synced(self.connection, packet.sequence)
        else:
            self.connection.close(f"{packet.TYPE.name} on a replication link")

    def lost(self, reason: BaseException) -> None:
        self.replicator._lost(self.connection, reason)


def _lost_at_stop() -> ReplicationLost:
    return ReplicationLost("the node stopped serving before its backup had the batch")


def _durable(operations: Sequence[Operation]) -> list[Operation]:
    """What a copy keeps: paged messages do not outlive the node."""
    kept: list[Operation] = []
    for op in operations:
        if isinstance(op, CommitTransaction):
            inner = _durable(op.operations)
            if inner:
                kept.append(CommitTransaction(tuple(inner)))
        elif not isinstance(op, PageMessage | ReleasePages):
            kept.append(op)
    return kept


def _adds(operations: Sequence[Operation]) -> list[AddMessage]:
    found: list[AddMessage] = []
    for op in operations:
        if isinstance(op, AddMessage):
            found.append(op)
        elif isinstance(op, CommitTransaction):
            found += _adds(op.operations)
    return found
