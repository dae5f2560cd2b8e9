"""The node's side of high availability: runs the activation machine (bridge.ha) against
the live lock (the lease in PostgreSQL, the file lock of a shared SQLite store, or for a
replication pair without a lease the activation sequence in its store, taken by a quorum
vote: bridge.ctl.quorum) and the node service's activate / deactivate steps.

A backup tries to acquire every ``lease-ping-time``, and at once when the live node releases
the lease or the file lock (its notice, bridge.ha.released); once it holds the lease, the lease's
thread renews it every ``lease-ping-time`` (counted from each renewal's start) and moves
the fence's deadline on as each renewal lands, whatever the reactor is doing
(bridge.ha.renewer); the reactor hears of each answer as the machine's input. A watchdog
thread (bridge.ha.watchdog, on the monotonic clock) tells the machine when no renewal
landed before the fence's deadline. Every answer also updates the clock skew, which is
logged when above ``max-clock-skew``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from bridge.config.cluster import ClusterSettings
from bridge.config.ha import HaPolicy, HaSettings
from bridge.ctl.quorum import QuorumClient
from bridge.ctl.status import HaStatus, ReplicationView
from bridge.ha.activation import Activation, HaState, IActivationActions
from bridge.ha.client import LeaseClient, Observed
from bridge.ha.fence import Fence, margin
from bridge.ha.lock import (
    Holder,
    ILiveLock,
    IReleaseNotices,
    LeaseRow,
    LeaseToken,
    ReplicaGate,
)
from bridge.ha.released import ReleaseWatch
from bridge.ha.renewer import Heartbeat, Renewer
from bridge.ha.watchdog import Watchdog
from bridge.store import Fenced
from bridge.store.file_lock import FileLock
from bridge.store.sequence import ActivationSequence
from bridge.store.sqlite import FILENAME

log = Logger()

Step = Callable[[], Coroutine[Any, Any, None]]


def _live_lock(settings: HaSettings, holder: Holder, gate: ReplicaGate | None) -> ILiveLock:
    """The lease in PostgreSQL where ``url`` names one, else the lock file in the shared
    store."""
    if settings.url is None:
        return FileLock(settings.store_dir, settings.query_timeout)
    # imported here: psycopg is about 10 MiB of a node's memory, for the nodes that use it
    from bridge.ha.lease import LeaseTable  # noqa: PLC0415

    return LeaseTable(settings.url, settings.query_timeout, holder=holder, gate=gate)


@implementer(IActivationActions)
class HaNode:
    """One node's activation, driven by the lease. ``activate`` and ``deactivate`` are the
    node service's steps; ``failed`` ends the node when an activation fails."""

    def __init__(
        self,
        name: str,
        settings: HaSettings,
        reactor: Any,
        *,
        activate: Step,
        deactivate: Step,
        failed: Callable[[Failure], None],
        monotonic: Callable[[], float] = time.monotonic,
        cluster: ClusterSettings | None = None,
    ) -> None:
        """``cluster``: the voters of a replication pair without a lease."""
        self.settings = settings
        self.holder = Holder(name)
        self._reactor = reactor
        self._activate = activate
        self._deactivate = deactivate
        self._failed = failed
        self._monotonic = monotonic
        gate = (
            ReplicaGate(name, settings.policy is HaPolicy.REPLICATION_PRIMARY)
            if settings.policy.replicated
            else None
        )
        self.quorum: QuorumClient | None = None
        """A replication pair without a lease: the vote, and the store's sequence."""
        if settings.quorum is not None:
            assert cluster is not None and settings.replication is not None
            sequence = ActivationSequence(settings.store_dir / FILENAME, settings.query_timeout)
            self.quorum = QuorumClient(
                sequence,
                reactor,
                quorum=settings.quorum,
                cluster=cluster,
                replication=settings.replication,
                fence=self.stale,
                monotonic=monotonic,
            )
            self.client: LeaseClient = self.quorum
        else:
            lock = _live_lock(settings, self.holder, gate)
            self.client = LeaseClient(lock, reactor, monotonic=monotonic)
        gap = margin(settings.reap, settings.ping, settings.query_timeout)
        self.machine = Activation(self, Fence(settings.reap, gap, monotonic), self._entered)
        self._watchers: list[tuple[HaState, Deferred[None]]] = []
        self.epoch = 0
        """The epoch this node last acquired (0: never)."""
        self.lease: LeaseRow | None = None
        """The lease as last seen, by any statement."""
        self.skew = 0
        """The node's clock minus the database's, in ms, at the last statement."""
        self.backups: tuple[str, ...] = ()
        """The backups waiting for the lease (``node/run``), as last seen."""
        self._acquire_call: IDelayedCall | None = None
        self._renewer: Renewer | None = None
        self._heartbeat = Heartbeat(monotonic)
        self._handing_over = False
        self._tried = False
        self._woken = False
        """Woken while a try was under way: the next one comes at once."""
        self._watch: ReleaseWatch | None = None
        self._listening = False
        self._watchdog = Watchdog(self.machine.fence, reactor, self._deadline_check)
        self._activating: Deferred[None] | None = None
        self._deactivating: Deferred[None] | None = None
        self._stopped: Deferred[None] = Deferred()
        self.replication: Callable[[], ReplicationView | None] = lambda: None
        """With replication: this node's side of the copy, for status."""

    # -- what the node service calls ---------------------------------------------------
    def start(self) -> None:
        log.info(
            "node {name}: HA {policy}, waiting for the lease ({keeper})",
            keeper=self.settings.keeper,
            **self._names(),
        )
        self._watchdog.start()
        self.machine.inputs.start()

    def stop(self) -> Deferred[None]:
        """Deactivate, release the lease if held, close the lease's connection: fires when
        all is done."""
        self.machine.inputs.stop()
        done: Deferred[None] = Deferred()
        self._stopped.addBoth(lambda _: done.callback(None))
        return done

    @property
    def state(self) -> HaState:
        return self.machine.state

    def reached(self, state: HaState) -> Deferred[None]:
        """Fires when the machine next enters ``state``."""
        waiter: Deferred[None] = Deferred()
        self._watchers.append((state, waiter))
        return waiter

    def _entered(self, state: HaState) -> None:
        waiting = [entry for entry in self._watchers if entry[0] is state]
        self._watchers = [entry for entry in self._watchers if entry[0] is not state]
        for _, waiter in waiting:  # after the transition, not inside it
            self._reactor.callLater(0, waiter.callback, None)

    def status(self) -> HaStatus:
        """For ``/status``, ``/metrics`` and ``txbridge ctl ha status``."""
        lease = self.lease
        return HaStatus(
            state=self.machine.state.value,
            policy=self.settings.policy.value,
            live=lease.node if lease is not None and lease.held else "",
            epoch=lease.epoch if lease is not None else 0,
            lease_expires_ms=lease.expires if lease is not None else 0,
            lease_left_ms=max(0, lease.expires - lease.now) if lease is not None else 0,
            clock_skew_ms=self.skew,
            max_clock_skew_ms=round(self.settings.max_clock_skew * 1000),
            reason=self.machine.reason,
            backups=tuple(holder.rpartition("/")[0] for holder in self.backups),
            replication=self.replication(),
            last_vote=self.quorum.last_vote() if self.quorum is not None else None,
        )

    @property
    def token(self) -> LeaseToken:
        """The fencing token of the epoch this node holds, for its store to write under."""
        return LeaseToken(str(self.holder), self.epoch)

    def mark(self, replica: str) -> Deferred[bool]:
        """With replication, as the live node: name ``replica`` (``node/run``) the backup in
        sync in the lease ("" for none); True once done, False if the lease is not this
        node's any more."""
        marked = self.client.mark_replica(self.holder, self.epoch, replica)
        return marked.addCallback(self._marked)

    def _marked(self, observed: Observed) -> bool:
        self._observe(observed)
        return observed.row is not None

    def fenced(self) -> None:
        """The store refused a write: the lease no longer carries this node's epoch."""
        if self._serving_states():
            log.warn("node {name}: a store write found a newer epoch", **self._names())
            self.machine.inputs.lease_lost()

    def stale(self, reason: str) -> None:
        """Without a lease: this node can no longer show it is the live one (it lost the
        quorum vote, or another node's store is newer)."""
        if self._serving_states():
            self.machine.inputs.stale(reason)

    def newer(self, sequence: int, backup: str) -> None:
        """A backup announced a store at a newer activation ``sequence`` than this node's:
        record it (the store refuses this node's writes from now on) and stop serving."""
        if self.quorum is not None:
            self.quorum.seen(sequence)
        self.stale(f"{backup.rpartition('/')[0]}'s store carries the newer sequence {sequence}")

    def try_now(self) -> None:
        """The live node released the lease, or (with replication) a backup's link to it
        dropped while in sync: try to take over now, not at the next ``lease-ping-time``."""
        if self.machine.state is not HaState.BACKUP:
            return
        call = self._acquire_call
        if call is None:
            self._woken = True  # a try is under way, and may have come before the release
        elif call.active():
            call.reset(0)

    # -- IActivationActions ------------------------------------------------------------
    def failover(self, why: str = "failover asked") -> bool:
        """Soft failover: stop serving, release the lease, and leave it to the backups for
        ``lease-reap-time`` before trying again. False unless LIVE."""
        if self.machine.state is not HaState.LIVE:
            return False
        log.info("node {name}: {why}, handing the lease over", why=why, **self._names())
        self._handing_over = True
        self.machine.inputs.failover()
        return True

    def acquire(self) -> None:
        if self._handing_over:
            self._handing_over = False
            Deferred.fromCoroutine(self._hand_over())
            return
        # the first try at once, and one woken while the last was under way
        delay = self.settings.ping if self._tried and not self._woken else 0.0
        self._tried = True
        self._acquire_call = self._reactor.callLater(delay, self._try_acquire)

    async def _hand_over(self) -> None:
        """Back in BACKUP after a failover: release, then wait out a reap before trying."""
        try:
            observed = await self.client.release(self.holder, self.epoch)
        except Exception as error:
            names = self._names()
            log.warn("node {name}: releasing the lease failed: {why}", why=error, **names)
        else:
            if observed.row is not None:
                log.info("node {name}: released the lease", **self._names())
        if self.machine.state is HaState.BACKUP:
            self._acquire_call = self._reactor.callLater(self.settings.reap, self._try_acquire)

    def _try_acquire(self) -> None:
        self._acquire_call = None
        self._woken = False  # this try comes after any wake-up so far
        self._listen()
        started = self._monotonic()
        asked = self.client.acquire(self.holder, self.settings.reap)
        asked.addCallbacks(self._acquire_answered, self._acquire_failed, (started,))

    def _acquire_answered(self, observed: Observed, started: float) -> None:
        self._observe(observed)
        row = observed.row
        if self.machine.state is not HaState.BACKUP:
            return  # stopping: a lease taken now expires unrenewed
        if row is None:
            self.machine.inputs.not_acquired()
            self._read_live()
            return
        self.epoch = row.epoch
        log.info(
            "node {name}: acquired the lease, epoch {epoch}, activating",
            epoch=row.epoch,
            **self._names(),
        )
        self.machine.inputs.acquired(started)
        self._arm_deadline()
        self._start_renewing(started)

    def _acquire_failed(self, failure: Failure) -> None:
        log.warn(
            "node {name}: acquiring the lease failed: {why}", why=failure.value, **self._names()
        )
        self.machine.inputs.not_acquired()

    def _listen(self) -> None:
        """Watch for the lease's release, where the lock tells of it and no watch is open:
        asked before a try, on the lock's thread, so that a release after the try is seen."""
        if not self.client.notifies or self._watch is not None or self._listening:
            return
        self._listening = True
        self.client.listen().addCallbacks(self._watch_opened, self._watch_failed)

    def _watch_opened(self, notices: IReleaseNotices) -> None:
        self._listening = False
        if self.machine.state in (HaState.STOPPING, HaState.STOPPED):
            return  # the lock's close ends the connection
        self._watch = ReleaseWatch(self._reactor, notices, self.try_now, self._watch_lost)

    def _watch_failed(self, failure: Failure) -> None:
        self._listening = False
        self._watch_lost(str(failure.value))

    def _watch_lost(self, why: str) -> None:
        """The release notices' connection is gone. A backup tries every lease-ping-time
        until its next try listens again; a live node, whose own lease it is, has no use
        for them until it is a backup again (and then listens before it tries)."""
        self._watch = None
        if self._serving_states():
            log.info(
                "node {name}: the connection listening for the lease's release was lost "
                "({why}); live, the node does not need it: it listens again before it next "
                "tries the lease",
                why=why,
                **self._names(),
            )
            return
        log.warn(
            "node {name}: not listening for the lease's release ({why}): trying every "
            "lease-ping-time until the next try listens again",
            why=why,
            **self._names(),
        )

    def _read_live(self) -> None:
        """Who is live, for the log and status, when this node did not acquire; and say
        that this node waits."""
        self.client.read().addCallbacks(self._observe, lambda _: None)
        self._list_backups(self.holder)

    def _list_backups(self, me: Holder | None) -> None:
        listed = self.client.waiting(me, self.settings.reap)
        listed.addCallbacks(self._backups_seen, lambda _: None)

    def _backups_seen(self, backups: tuple[str, ...]) -> None:
        self.backups = backups

    def activate(self) -> None:
        activating = Deferred.fromCoroutine(self._activate())
        activating.addCallbacks(self._activated, self._activation_failed)
        self._activating = activating

    def _activation_failed(self, failure: Failure) -> None:
        if failure.check(Fenced):
            self.fenced()  # the epoch moved on while loading the store: back to BACKUP
        elif self.machine.state is HaState.ACTIVATING:
            self._failed(failure)

    def _activated(self, _: object) -> None:
        self.machine.inputs.started()
        if self.machine.state is HaState.LIVE:
            log.info("node {name}: LIVE, epoch {epoch}", epoch=self.epoch, **self._names())

    def deactivate(self, reason: str) -> None:
        self._cancel()
        log.warn("node {name}: stops serving: {reason}", reason=reason, **self._names())
        self._deactivating = Deferred.fromCoroutine(self._stop_serving())

    async def _stop_serving(self) -> None:
        """Once an activation in progress has finished (so nothing it opens stays open),
        close everything, then tell the machine."""
        if self._activating is not None:
            await _after(self._activating)
        try:
            await self._deactivate()
        except Exception as error:
            # the database gone, the store cannot record its clean stop: it was stopped all
            # the same (the next open recovers as after a crash)
            why = str(error).splitlines()[0] if str(error) else repr(error)
            log.warn("node {name}: stopped serving, not cleanly: {why}", why=why, **self._names())
        self.machine.inputs.deactivated()

    def release(self) -> None:
        Deferred.fromCoroutine(self._release())

    async def _release(self) -> None:
        """After the deactivation: give the lease up, close the lease's connection."""
        if self._deactivating is not None:
            await _after(self._deactivating)
        if self.epoch:
            try:
                observed = await self.client.release(self.holder, self.epoch)
            except Exception as error:
                log.warn(
                    "node {name}: releasing the lease failed: {why}", why=error, **self._names()
                )
            else:
                if observed.row is not None:
                    log.info("node {name}: released the lease", **self._names())
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()  # before the lock closes its connection
        await self.client.close()
        self._watchdog.stop()
        self.machine.inputs.stopped()
        self._stopped.callback(None)

    # -- renewals and the deadline -----------------------------------------------------
    def _start_renewing(self, acquired: float) -> None:
        """The lease's thread renews the epoch just acquired from now on."""
        self._heartbeat.beat()
        self._renewer = Renewer(
            self.client.lock,
            self.holder,
            self.epoch,
            fence=self.machine.fence,
            reactor=self._reactor,
            answers=self,
            heartbeat=self._heartbeat,
            ping=self.settings.ping,
            critical_timeout=self.settings.critical_timeout,
            acquired=acquired,
            clock=self._monotonic,
            wall_clock=self.client.wall_clock,
        )
        self.client.renew_with(self._renewer)

    def _serving_states(self) -> bool:
        return self.machine.state in (HaState.ACTIVATING, HaState.LIVE)

    def renewal_landed(self, renewer: Renewer, observed: Observed, started: float) -> None:
        """From the lease's thread: a renewal landed (the deadline moved on already)."""
        if renewer is not self._renewer:
            return  # an epoch this node no longer serves under
        self._observe(observed)
        if not self._serving_states():
            return
        self.machine.inputs.renewed(started)
        self._list_backups(None)

    def renewal_refused(self, renewer: Renewer, observed: Observed) -> None:
        """From the lease's thread: the lease is not this node's at its epoch any more."""
        if renewer is not self._renewer:
            return
        self._observe(observed)
        if self._serving_states():
            self.machine.inputs.lease_lost()

    def renewal_failed(self, renewer: Renewer, error: Exception) -> None:
        """From the lease's thread: a renewal failed (the deadline stands)."""
        if renewer is not self._renewer or not self._serving_states():
            return
        log.warn("node {name}: renewing the lease failed: {why}", why=error, **self._names())
        self.machine.inputs.renew_failed()

    def _arm_deadline(self) -> None:
        self._watchdog.rearm()

    def _deadline_check(self) -> None:
        """From the watchdog: a deadline passed (a renewal may have moved it since)."""
        if not self.machine.fence.valid:
            self.machine.inputs.deadline_passed()

    def _cancel(self) -> None:
        call, self._acquire_call = self._acquire_call, None
        if call is not None and call.active():
            call.cancel()
        if self._renewer is not None:
            self._renewer = None
            self.client.renew_with(None)

    # -- what was seen -----------------------------------------------------------------
    def _observe(self, observed: Observed) -> None:
        row = observed.row
        if self.quorum is not None and row is not None and row.holder == str(self.holder):
            self.epoch = max(self.epoch, row.epoch)  # went on without its backup, moved on
        if row is not None:
            if self.lease is None or row.holder != self.lease.holder:
                who = row.node or "nobody"
                log.info(
                    "node {name}: live is {who}, epoch {epoch}",
                    who=who,
                    epoch=row.epoch,
                    **self._names(),
                )
            self.lease = row
        limit = round(self.settings.max_clock_skew * 1000)
        if abs(observed.skew) > limit >= abs(self.skew):
            log.warn(
                "node {name}: clock {skew} ms off the database's (max-clock-skew {limit} ms)",
                skew=observed.skew,
                limit=limit,
                **self._names(),
            )
        self.skew = observed.skew

    def _names(self) -> dict[str, object]:
        return {"name": self.holder.node, "policy": self.settings.policy.value}


def _after(step: Deferred[None]) -> Deferred[None]:
    """A Deferred that fires (with None) once ``step`` has, leaving ``step``'s result to
    its own callbacks."""
    done: Deferred[None] = Deferred()

    def passed(result: object) -> object:
        done.callback(None)
        return result

    step.addBoth(passed)
    return done
