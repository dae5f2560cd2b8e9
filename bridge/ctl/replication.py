"""The node's replication glue: a backup copies from the live node (``ReplicaSink``) until
it activates; once live it copies to its backup (``Replicator``) until it stops serving.
Either way the store file is written by one side at a time.

Failback (``allow-failback``, the primary's): the primary comes back as the live node's
backup and says so when it announces; once the live node has named it in sync, the live
node hands over (a soft failover: it stops serving, then releases the lease, which names
the primary in sync). It becomes a backup at once, but it finds the primary to copy from
only once the primary is fully live (acceptors open), and it cannot take the lease back
while the primary holds the latest store (``bridge.ha.lease.ReplicaGate``).

Without a lease (a quorum vote, ``bridge.ctl.quorum``) this says when the node may ask to
take over: once its link to the live node dropped while in sync, or, on its own store,
as the primary that has copied nothing yet or a node that was live and copied nothing
since; and it asks at once when the link drops."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bridge.config.ha import HaPolicy, Replication
from bridge.ctl.ha import HaNode
from bridge.ctl.status import ReplicationView
from bridge.ha.activation import HaState
from bridge.heads.core import CoreHead
from bridge.replication.backup import ReplicaSink
from bridge.replication.live import Replicator
from bridge.store import MessageStore, SQLiteMessageStore
from bridge.store.sqlite import DEFAULT_BUSY_TIMEOUT
from transport.settings import ConnectionSettings


class NodeReplication:
    """One node's replication, by the part it plays now."""

    def __init__(
        self,
        name: str,
        path: Path,
        settings: Replication,
        ha: HaNode,
        reactor: Any,
        *,
        link: ConnectionSettings | None = None,
    ) -> None:
        """``link``: the settings of the connection to the live node while a backup."""
        self._name = name
        self._path = path
        self._settings = settings
        self._ha = ha
        self._reactor = reactor
        self._failback = settings.allow_failback and ha.settings.policy is (
            HaPolicy.REPLICATION_PRIMARY
        )
        self._sink = ReplicaSink(
            path,
            reactor,
            node_name=name,
            holder=str(ha.holder),
            peers=settings.peers,
            user=settings.cluster_user,
            password=settings.cluster_password,
            retry=ha.settings.ping,
            busy_timeout=DEFAULT_BUSY_TIMEOUT,
            failback=self._failback,
            sequence=self._sequence,
            on_lost=ha.try_now,
            settings=link,
        )
        self._replicator: Replicator | None = None
        self.stopping = False
        """Set by the node service at a clean stop (``failover-on-shutdown``)."""
        self._takeover = ""
        self._takeover_seconds: float | None = None
        self._own_store = ha.settings.policy is HaPolicy.REPLICATION_PRIMARY
        """Without a lease: this node's own store may be the latest (the primary's at
        first, then that of a node that was live), until it copies another's."""
        ha.replication = self.view
        if ha.quorum is not None:
            ha.quorum.eligible, ha.quorum.sink = self.eligible, self._sink

    def _sequence(self) -> int:
        """The activation sequence this node last held or saw, announced to a live node."""
        ha = self._ha
        return max(ha.epoch, ha.lease.epoch if ha.lease is not None else 0)

    def eligible(self) -> tuple[str, str]:
        """Without a lease: why this node may not ask to take over ("" if it may), and the
        core URL of the live node to ask the voters about."""
        sink = self._sink
        if sink.live:
            return f"the link to the live node {sink.live} is up", ""
        if sink.in_sync:
            return "", sink.live_url
        if self._own_store and not sink.copied:
            return "", str(self._settings.peers[0])
        return f"not in sync with a live node ({sink.reason})", ""

    def as_backup(self) -> None:
        """Copy from the live node, until ``activating``."""
        self._sink.start()

    async def activating(self) -> None:
        """The node took the lease: stop copying, so that it may open its store."""
        lost = self._sink.lost_in_sync_at
        await self._sink.stop()
        self._own_store, self._sink.copied = True, False
        if lost is not None and not self.stopping:
            self._sink.lost_in_sync_at = None
            self._ha.reached(HaState.LIVE).addCallback(self._took_over, lost)

    def _took_over(self, _: object, lost: float) -> None:
        self._takeover = "failback" if self._failback else "failover"
        self._takeover_seconds = time.monotonic() - lost

    def live(self, store: MessageStore, head: CoreHead) -> None:
        """The store is open and the core head made: offer the store to backups."""
        ha = self._ha
        replicator = Replicator(
            store,
            self._path,
            self._reactor,
            node_name=self._name,
            epoch=lambda: ha.epoch,
            mark=ha.mark,
            sync_timeout=self._settings.sync_timeout,
            retry=ha.settings.ping,
            hand_over=self._hand_over,
            newer=ha.newer,
        )
        store.replication = head.replication = self._replicator = replicator
        if ha.quorum is not None:
            assert isinstance(store, SQLiteMessageStore), "replication copies an SQLite store"
            ha.quorum.write_under = store.write_under

    def _hand_over(self, backup: str) -> None:
        self._ha.failover(f"failback: {backup.rpartition('/')[0]} is in sync")

    async def stop_live(self) -> None:
        """The node stops serving (before its store closes): end the copy."""
        replicator, self._replicator = self._replicator, None
        if self._ha.quorum is not None:
            self._ha.quorum.write_under = None
        if replicator is not None:
            withdraw = self.stopping and not self._settings.failover_on_shutdown
            await replicator.stop(withdraw=withdraw)

    def view(self) -> ReplicationView:
        replicator = self._replicator
        if replicator is not None:
            status = replicator.status()
            return ReplicationView(
                "live",
                status.state,
                status.backup,
                status.lag_batches,
                0,
                status.sync_bytes,
                status.last_sync_seconds,
                "",
                self._takeover,
                self._takeover_seconds,
            )
        replica = self._sink.status()
        return ReplicationView(
            "backup",
            "in-sync" if replica.in_sync else ("syncing" if replica.live else "none"),
            replica.live,
            0,
            replica.applied,
            0,
            None,
            replica.reason,
            self._takeover,
            self._takeover_seconds,
        )
