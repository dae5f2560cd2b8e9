"""The live lock of a replication pair without a lease (docs/ha.md, "Quorum vote"): the
activation sequence in the node's own store (:class:`bridge.store.sequence.ActivationSequence`,
on the lock's thread), raised only once a quorum of the ``[cluster] members`` granted it
(:func:`bridge.replication.vote.ask`).

- acquire: a backup whose link to its live node dropped, and which was in sync, asks the
  voters whether that node is gone and for the next sequence; a primary that has copied
  nothing yet asks likewise on its own store. Granted by ``quorum-size`` voters, it raises
  the sequence in its store, then activates. A node that may not (not in sync, the link
  still up) loses the vote unasked, and the log says why once.
- renew: the store still names this node at its sequence (no newer one was seen).
- mark: with ``vote-on-replication-failure``, a live node that lost its backup asks the
  voters, before it confirms anything without it, to go on alone as the next sequence;
  granted, it moves its store and its writer to it (``write_under``), so that the
  backup's copy, now behind, can never win a takeover; refused, it stops serving
  (``fence``).

Every answer that names a newer sequence than this node's is recorded in its store, which
then refuses this node's writes.

While the node copies a live node's store (``bridge.replication.backup``), its calls on the
store run on the copy's thread, between two of its packets, and close the file after
them: a copy starts the store over as a new file, which an open connection would break.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from bridge.config.cluster import ClusterSettings
from bridge.config.ha import QuorumVote, Replication
from bridge.ctl.status import VoteView
from bridge.ha.client import LeaseClient, Observed
from bridge.ha.lock import Holder, LeaseRow, LeaseToken
from bridge.replication.backup import ReplicaSink
from bridge.replication.vote import Login, VoteOutcome, ask
from bridge.store.sequence import ActivationSequence

log = Logger()

_T = TypeVar("_T")

Eligible = Callable[[], tuple[str, str]]
"""Why this node may not ask to take over ("" if it may), and the URL of the live node to
ask about."""


@attrs.frozen
class _Vote:
    kind: str
    sequence: int
    outcome: VoteOutcome
    ended: float
    """Monotonic."""


class QuorumClient(LeaseClient):
    """The calls of :class:`bridge.ha.client.LeaseClient`, the live lock taken by a vote."""

    def __init__(
        self,
        lock: ActivationSequence,
        reactor: Any,
        *,
        quorum: QuorumVote,
        cluster: ClusterSettings,
        replication: Replication,
        fence: Callable[[str], None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``fence(reason)`` stops a live node that lost its vote."""
        super().__init__(lock, reactor, monotonic=monotonic)
        self.sequence = lock
        self.quorum = quorum
        self._voters = cluster.members
        self._needed = quorum.needed(len(cluster.members))
        self._fence = fence
        self._monotonic = monotonic
        self._login = Login(
            replication.cluster_user, replication.cluster_password, "txbridge quorum vote"
        )
        self.eligible: Eligible = lambda: ("replication has not started", "")
        """Set by the node's replication (``bridge.ctl.replication``), as ``sink``."""
        self.sink: ReplicaSink | None = None
        """The node's copy of its live node's store."""
        self.write_under: Callable[[LeaseToken], Deferred[None]] | None = None
        """While live (``bridge.ctl.replication``): move the store and its writer to a new
        sequence between two batches."""
        self._last: _Vote | None = None
        self._said = ""

    def last_vote(self) -> VoteView | None:
        """For status: the last vote this node asked."""
        last = self._last
        if last is None:
            return None
        outcome = last.outcome
        return VoteView(
            last.kind,
            last.sequence,
            outcome.won,
            len(outcome.grants),
            self._needed,
            len(self._voters),
            outcome.reason,
            round(self._monotonic() - last.ended, 3),
        )

    # -- acquire: a takeover ---------------------------------------------------------------
    def acquire(self, me: Holder, reap: float) -> Deferred[Observed]:
        return Deferred.fromCoroutine(self._acquire(me, reap))

    async def _acquire(self, me: Holder, reap: float) -> Observed:
        why_not, about = self.eligible()
        current = await self.read()
        sequence = (current.row.epoch if current.row is not None else 0) + 1
        outcome = await self._ask(me, about, sequence, why_not)
        self._record("takeover", sequence, outcome)
        if not outcome.won:
            self._say(me, f"not taking over: {outcome.reason}")
            return Observed(None, 0)
        why_not, _ = self.eligible()  # the link may have come back meanwhile
        if why_not:
            self._say(me, f"not taking over: {why_not}")
            return Observed(None, 0)
        self._said = ""
        log.info(
            "node {name}: the quorum granted sequence {sequence}: {why}",
            name=me.node,
            sequence=sequence,
            why=outcome.reason,
        )
        return await self._observed(lambda: self._take(me, reap, sequence))

    def _take(self, me: Holder, reap: float, sequence: int) -> LeaseRow | None:
        """On the lock's thread: raise the store's sequence to the one granted, or nothing
        if the store moved meanwhile (a copy began)."""
        row = self.sequence.acquire(me, reap)
        if row is not None and row.epoch != sequence:
            self.sequence.release(me, row.epoch)
            return None
        return row

    def _say(self, me: Holder, what: str) -> None:
        """Log why the node did not take over, once while the reason stays the same."""
        if what != self._said:
            self._said = what
            log.warn("node {name}: {what}", name=me.node, what=what)

    # -- mark: the live node lost its backup -----------------------------------------------
    def mark_replica(self, me: Holder, epoch: int, replica: str) -> Deferred[Observed]:
        """Naming a backup in sync is the backup's to know (it is in sync); losing it asks
        the voters first with ``vote-on-replication-failure``."""
        if replica or not self.quorum.vote_on_replication_failure:
            return self.read()
        return Deferred.fromCoroutine(self._still_live(me, epoch))

    async def _still_live(self, me: Holder, epoch: int) -> Observed:
        sequence = epoch + 1
        outcome = await self._ask(me, "", sequence, "")
        self._record("still-live", sequence, outcome)
        if not outcome.won:
            self._fence(f"lost the quorum vote without its backup: {outcome.reason}")
            if outcome.seen >= sequence:
                await self.seen(outcome.seen)
            return Observed(None, 0)
        move = self.write_under
        if move is None:
            return Observed(None, 0)  # stopped serving meanwhile
        try:
            await move(LeaseToken(str(me), sequence))
        except Exception as error:
            self._fence(f"could not go on as sequence {sequence}: {error}")
            return Observed(None, 0)
        log.info(
            "node {name}: live without its backup as sequence {sequence}, by the quorum: {why}",
            name=me.node,
            sequence=sequence,
            why=outcome.reason,
        )
        return await self.read()

    # -- what both do --------------------------------------------------------------------
    def _run(self, call: Callable[[], _T]) -> Deferred[_T]:
        """On the copy's thread while copying, else on the lock's; the file closed after."""

        def closing() -> _T:
            try:
                return call()
            finally:
                self.sequence.close()

        copying = self.sink.on_thread(closing) if self.sink is not None else None
        if copying is None:
            return super()._run(closing)
        return copying.addTimeout(self.quorum.vote_wait, self._clock)

    def seen(self, sequence: int) -> Deferred[None]:
        """A newer ``sequence`` exists: record it, and the store refuses this node's writes
        from now on (a failure is logged: the node stops serving all the same)."""
        recorded = self._run(lambda: self.sequence.seen(sequence))

        def failed(failure: Failure) -> None:
            log.warn(
                "recording the newer sequence {sequence} failed: {why}",
                sequence=sequence,
                why=failure.getErrorMessage(),
            )

        return recorded.addCallbacks(lambda _: None, failed)

    def _ask(self, me: Holder, about: str, sequence: int, why_not: str) -> Deferred[VoteOutcome]:
        return ask(
            self._reactor,
            self._voters,
            self._login,
            holder=str(me),
            about=about,
            sequence=sequence,
            needed=self._needed,
            wait=self.quorum.vote_wait,
            why_not=why_not,
        )

    def _record(self, kind: str, sequence: int, outcome: VoteOutcome) -> None:
        self._last = _Vote(kind, sequence, outcome, self._monotonic())
