"""The node's replication glue: a backup copies from the live node (``ReplicaSink``) until
it activates; once live it copies to its backup (``Replicator``) until it stops serving.
Either way the store file is written by one side at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bridge.config.ha import Replication
from bridge.ctl.ha import HaNode
from bridge.ctl.status import ReplicationView
from bridge.heads.core import CoreHead
from bridge.replication.backup import ReplicaSink
from bridge.replication.live import Replicator
from bridge.store import MessageStore
from bridge.store.sqlite import DEFAULT_BUSY_TIMEOUT


class NodeReplication:
    """One node's replication, by the part it plays now."""

    def __init__(
        self, name: str, path: Path, settings: Replication, ha: HaNode, reactor: Any
    ) -> None:
        self._name = name
        self._path = path
        self._settings = settings
        self._ha = ha
        self._reactor = reactor
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
        )
        self._replicator: Replicator | None = None
        ha.replication = self.view

    def as_backup(self) -> None:
        """Copy from the live node, until ``activating``."""
        self._sink.start()

    async def activating(self) -> None:
        """The node took the lease: stop copying, so that it may open its store."""
        await self._sink.stop()

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
        )
        store.replication = head.replication = self._replicator = replicator

    async def stop_live(self) -> None:
        """The node stops serving (before its store closes): end the copy."""
        replicator, self._replicator = self._replicator, None
        if replicator is not None:
            await replicator.stop()

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
        )
