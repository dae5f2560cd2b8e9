"""The live lock, whatever keeps it: who may serve as the live node, under which epoch.

Two keep it: the lease row in PostgreSQL (:mod:`bridge.ha.lease`), and an exclusive file
lock on a shared store directory with the epoch in the SQLite store
(:mod:`bridge.store.file_lock`). Both answer the same calls, blocking, on the lock's own
thread (:mod:`bridge.ha.client`), with the lock as each call left it (:class:`LeaseRow`);
the node's activation is the same over either.
"""

from __future__ import annotations

import secrets

import attrs
from zope.interface import Attribute, Interface

LEASE = "live"
"""The one lease's name (its row's key): the right to serve as the live node."""


@attrs.frozen
class Holder:
    """Who holds (or wants) the lease: the node's name and a random id drawn at each process
    start, so a restarted node is a new holder and never renews its former self's lease."""

    node: str
    run: str = attrs.field(factory=lambda: secrets.token_hex(8))

    def __str__(self) -> str:
        return f"{self.node}/{self.run}"


@attrs.frozen
class LeaseToken:
    """The fencing token a live node's store writes under: the holder and the epoch it
    acquired (docs/ha.md)."""

    holder: str
    epoch: int
    lease: str = LEASE

    def params(self) -> dict[str, object]:
        """The parameters of the store's check of the token."""
        return {"lease": self.lease, "holder": self.holder, "epoch": self.epoch}


@attrs.frozen
class LeaseRow:
    """The lock as one call left it, with the keeper's time of that call."""

    holder: str
    """``node/run`` of the holder; "" when released or never taken."""
    epoch: int
    expires: int
    """Epoch milliseconds of the keeper's clock (the database's, or the host's)."""
    now: int
    """The keeper's clock when the call ran, in epoch milliseconds."""

    @property
    def held(self) -> bool:
        return bool(self.holder) and self.expires >= self.now

    @property
    def node(self) -> str:
        """The holder's node name ("" when nobody holds the lease)."""
        return self.holder.rpartition("/")[0]


class ILiveLock(Interface):
    """The live lock's calls. Blocking: call from one thread only. Each is bounded by
    ``query_timeout`` where the keeper can bound it, and by the caller in any case."""

    query_timeout = Attribute("float: the longest one call may take, in seconds")

    def acquire(me: Holder, reap: float) -> LeaseRow | None:
        """Take the lock with a new epoch (the old one plus one), or None when another
        holder has it."""

    def renew(me: Holder, epoch: int, reap: float) -> LeaseRow | None:
        """Confirm the lock is still ``me``'s at ``epoch`` (and extend it by ``reap`` where
        it expires): None when it is not."""

    def release(me: Holder, epoch: int) -> LeaseRow | None:
        """Give the lock up at once, if it is still ``me``'s at ``epoch`` (None if not),
        keeping the epoch so the next holder's is higher."""

    def waiting(me: Holder | None, window: float) -> tuple[str, ...]:
        """The backups waiting (``me``, if given, says it waits now), seen within
        ``window`` seconds, the holder left out, as ``node/run``."""

    def read() -> LeaseRow:
        """The lock as it stands."""

    def close() -> None:
        """Close what the calls opened; a lock held is given up with it."""


class IReplicaLock(ILiveLock):
    """A live lock that also says, with replication, which backup's store is in sync."""

    def mark_replica(me: Holder, epoch: int, replica: str) -> LeaseRow | None:
        """The live node ``me`` at ``epoch`` names the backup whose copy of its store is in
        sync (``node/run``; "" for none): None if the lock is no longer ``me``'s."""


class IReleaseNotices(Interface):
    """The notices of a lock's release, on a connection of their own: the reactor watches
    ``fileno`` and reads them with ``received`` (non-blocking), so that a backup learns of a
    release the moment it commits instead of at its next try."""

    def fileno() -> int:
        """The connection's descriptor, readable when a notice (or its loss) arrives."""

    def received() -> int:
        """The releases of this lock among what arrived, read without blocking; raises
        when the connection is lost."""


class IReleaseNotifier(ILiveLock):
    """A live lock that tells its backups when its holder releases it."""

    def listen() -> IReleaseNotices:
        """Start listening for releases (blocking, on the lock's thread): the notices, on a
        connection the lock closes with ``close`` or the next ``listen``."""


@attrs.frozen
class ReplicaGate:
    """Acquisition with replication: by the node whose store is the latest, by the backup
    in sync with it, or (``primary``) by this node when no node was ever live."""

    node: str
    primary: bool
