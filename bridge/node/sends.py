"""A connection's sends outside transactions, routed in the order its client sent them,
for every head.

Both heads route a send the same way: the send takes a place in the connection's
:class:`~bridge.node.order.SendOrder` and is published at once (``publish``: the broker's
hot path, ``publish_then``, no Deferred), or, a non-durable one behind durable ones that
still wait for the store, held until its turn (``hold``; the head hears ``due``). What
waits on a Deferred (a send paged, a commit, an acknowledgement with a receipt) takes a
place the same way (``wait``). The head hears each place's turn (``released``) and a
failed write (``failed``); it says what that means in its protocol.

A durable send that needs no answer of its own (a STOMP SEND without a receipt) is
``publish_silent``: queued early, it joins the run of such sends at the end of the line,
one place for up to ``RUN_LENGTH`` of them, written once each of their writes ended. Its
connection's order is the same as with a place each (the place of a run stands where its
first send stood, and nothing entered after it joins it); what it saves is an object and
its bookkeeping per send, on the path every persistent SEND takes.

Body bytes waiting for the store are counted, so that a head may stop reading a client
that sends faster than the store writes (``busy(True)`` above ``max_unstored``,
``busy(False)`` once half of it is written; a run's bytes count until the whole run is
written). A send whose write the store holds for the core bridges that have it
(``IMessageStore.hold_forwarded``) counts no more from then on: the bridges'
confirmation windows bound those bytes, and the send is answered once written or
confirmed as before.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

import attrs
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from bridge.message import Message
from bridge.node.broker import Broker
from bridge.node.order import Place, SendOrder
from bridge.node.routing import QUEUED, Then

P = TypeVar("P", bound=Place)
P_contra = TypeVar("P_contra", bound=Place, contravariant=True)


class ISendListener(Protocol[P_contra]):
    """What a head hears of its connection's sends."""

    def released(self, place: P_contra) -> None:
        """``place`` and every one before it are done: answer it."""

    def due(self, place: P_contra) -> None:
        """A held send reached the front: route its ``message`` (``publish``) and say the
        held place ``written``."""

    def failed(self, place: P_contra, failure: Failure) -> bool:
        """``place``'s write failed: tell the client; True if the place counts as done
        (its turn still comes), False if the connection ends with it."""

    def busy(self, busy: bool) -> None:
        """Too many body bytes wait for the store (True), or no longer (False)."""


RUN_LENGTH = 64
"""The most silent sends one run holds: their bytes count towards ``busy`` until the whole
run is written, so a run stays short."""


@attrs.define(eq=False)
class _Run(Generic[P]):
    """Silent sends in a row, each queued early: one ``place`` in line for them all."""

    place: P
    then: Then = attrs.field(init=False)
    """What each member's write tells when it ends (one callable for the whole run)."""
    pending: int = 0
    """Members whose writes have not ended."""
    members: int = 0


@attrs.define(eq=False)
class Sends(Generic[P]):
    """One connection's places in line, and the publishing that fills them."""

    _broker: Broker
    _listener: ISendListener[P]
    _max_unstored: int | None = None
    """Body bytes that may wait for the store before the connection is ``busy`` (None:
    not counted)."""
    _new_place: Callable[[], P] | None = None
    """Makes a place with nothing to answer, for ``publish_silent`` (None: not used)."""
    _numbered: bool = False
    """The head numbers its messages (``Broker.allocate_id``): they are published so."""
    order: SendOrder[P] = attrs.field(init=False)
    _unstored: int = attrs.field(init=False, default=0)
    _busy: bool = attrs.field(init=False, default=False)
    late: int = attrs.field(init=False, default=0)
    """Places whose sends reach their queues only once written: while any does, a
    non-durable send is held (``hold``); none, it is routed at once (a head may test this
    before making the place ``hold`` takes)."""
    _run: _Run[P] | None = attrs.field(init=False, default=None)
    """The run silent sends join now, if any (the last in line, not yet written)."""

    def __attrs_post_init__(self) -> None:
        self.order = SendOrder(self._listener.released, self._listener.due)

    @property
    def waiting(self) -> bool:
        """Whether any place waits (a non-durable send now would have to be held)."""
        return self.order.waiting

    def publish(self, place: P, message: Message) -> None:
        """Route ``message`` now, outside a transaction: ``place`` is released in its turn
        once the message is safe (at once if it needs no write). A refusal (``NodeError``
        and its kinds) is raised, ``place`` in line and not written: the head says it
        ``written`` if the client may go on. (The hot path of every durable send: as few
        calls as may be, so ``track`` and ``route`` are not called but written out.)"""
        self.order.enter(place)
        size = place.size
        if size and self._max_unstored is not None:
            self._count(size)
        self._routed(place, message)

    def publish_silent(self, message: Message) -> None:
        """``publish`` for a durable send whose place would have nothing to answer: while
        nothing waits to be queued before it, it joins the run at the end of the line (or
        starts one); otherwise it takes a place of its own. A refusal is raised as by
        ``publish``, the send no member of the run."""
        run = self._run
        if run is None or run.members == RUN_LENGTH or not self.order.is_last(run.place):
            assert self._new_place is not None
            if self.late:  # queued once written: no run waits so
                place = self._new_place()
                place.size = len(message.body)
                self.publish(place, message)
                return
            run = self._run = _Run(self._new_place())
            run.then = partial(self._run_written, run)
            self.order.enter(run.place)
        size = len(message.body)
        run.members += 1
        run.pending += 1
        run.place.size += size  # (counted below, once it is published)
        limit = self._max_unstored
        try:
            routed = self._broker.publish_then(
                message,
                run.then,
                early=True,
                numbered=self._numbered,
                on_hold=partial(self._held, run.place, size) if size and limit else None,
            )
        except BaseException:
            run.members -= 1
            run.place.size -= size
            self._run_written(run)  # (an empty run is written: it keeps nothing back)
            raise
        if size and limit is not None:
            # (``_count``'s work written out: it is called only to turn ``busy`` on)
            unstored = self._unstored = self._unstored + size
            if unstored > limit and not self._busy:
                self._count(0)
        if routed is QUEUED:
            return
        if self._run is run:
            self._run = None  # (not early: what follows takes a place of its own)
        if routed is None:  # queued once written (or refused at once: told already)
            place = run.place
            if not place.done and not place.late:
                place.late = True
                self.late += 1
            return
        self._run_written(run)  # done at once: nobody else tells

    def _run_written(self, run: _Run[P], failure: Failure | None = None) -> None:
        """One of ``run``'s writes ended; once all have, its place is written. A failure
        is told at once, and the head says whether the run's turn still comes."""
        if failure is not None and not self._listener.failed(run.place, failure):
            return
        run.pending -= 1
        if run.pending:
            return
        if self._run is run:
            self._run = None
        self.written(run.place)

    def route(self, place: P, message: Message) -> None:
        """``publish`` for a place in line already (a held one whose turn came)."""
        self._routed(place, message)

    def _routed(self, place: P, message: Message) -> None:
        """Route ``message``: queued early only while no send of this connection waits to
        be queued once written (``late``), so that none overtakes another."""
        size = place.size
        routed = self._broker.publish_then(
            message,
            partial(self.written, place),
            early=not self.late,
            numbered=self._numbered,
            on_hold=partial(self._held, place, size) if size and self._max_unstored else None,
        )
        if routed is QUEUED:
            return
        if routed is None:
            if not place.done:  # (a refusal at once wrote it already)
                place.late = True
                self.late += 1
            return
        self.written(place)

    def hold(self, place: P) -> bool:
        """Hold ``place`` (its ``message`` a non-durable send) behind the places that wait
        to be queued before it (``late``): False if none does (publish it now), else True
        and ``due`` later."""
        if not self.late or not self.order.hold(place):
            return False
        place.late = True
        self.late += 1
        return True

    def wait(self, place: P, work: Deferred[Any]) -> None:
        """``place`` is done once ``work`` is."""
        self.track(place)
        work.addCallbacks(lambda _: self.written(place), partial(self.written, place))

    def track(self, place: P) -> None:
        """``place`` enters the line; its ``size`` counts towards ``busy``."""
        self.order.enter(place)
        size = place.size
        if size and self._max_unstored is not None:
            self._count(size)

    def written(self, place: P, failure: Failure | None = None) -> None:
        """``place``'s write ended (or it needed none): release what is done in front.
        With ``failure``, the write failed: the head hears it, and says whether the
        place's turn still comes."""
        if place.late:
            place.late = False
            self.late -= 1
        if failure is not None and not self._listener.failed(place, failure):
            return
        size = place.size
        if size and self._max_unstored is not None:
            self._count(-size)
        self.order.written(place)

    def _held(self, place: P, size: int) -> None:
        """``size`` bytes of ``place`` are held for core bridges: no longer counted."""
        place.size -= size
        self._count(-size)

    def _count(self, size: int) -> None:
        """``size`` more body bytes wait for the store (fewer, if negative)."""
        assert self._max_unstored is not None
        unstored = self._unstored = self._unstored + size
        if unstored > self._max_unstored and not self._busy:
            self._busy = True
            self._listener.busy(True)
        elif self._busy and unstored <= self._max_unstored // 2:
            self._busy = False
            self._listener.busy(False)

    def close(self) -> None:
        """The connection is gone: nothing more is released or heard, and the sends held
        were never routed: their messages go (a large body's file with them)."""
        for place in self.order.close():
            assert place.message is not None
            self._broker.discard(place.message)
        self._listener = _Nobody()  # (the head refers back to its sends)


class _Nobody:
    """Who hears of a closed connection's sends: nobody."""

    def released(self, place: Place) -> None:
        pass

    def due(self, place: Place) -> None:
        pass

    def failed(self, place: Place, failure: Failure) -> bool:
        return False

    def busy(self, busy: bool) -> None:
        pass
