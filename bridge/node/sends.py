"""A connection's sends outside transactions, routed in the order its client sent them,
for every head.

Both heads route a send the same way: the send takes a place in the connection's
:class:`~bridge.node.order.SendOrder` and is published at once (``publish``: the broker's
hot path, ``publish_then``, no Deferred), or, a non-durable one behind durable ones that
still wait for the store, held until its turn (``hold``; the head hears ``due``). What
waits on a Deferred (a send paged, a commit, an acknowledgement with a receipt) takes a
place the same way (``wait``). The head hears each place's turn (``released``) and a
failed write (``failed``); it says what that means in its protocol.

Body bytes waiting for the store are counted, so that a head may stop reading a client
that sends faster than the store writes (``busy(True)`` above ``max_unstored``,
``busy(False)`` once half of it is written).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Generic, Protocol, TypeVar

import attrs
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from bridge.message import Message
from bridge.node.broker import Broker
from bridge.node.order import Place, SendOrder
from bridge.node.routing import QUEUED

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


@attrs.define(eq=False)
class Sends(Generic[P]):
    """One connection's places in line, and the publishing that fills them."""

    _broker: Broker
    _listener: ISendListener[P]
    _max_unstored: int | None = None
    """Body bytes that may wait for the store before the connection is ``busy`` (None:
    not counted)."""
    order: SendOrder[P] = attrs.field(init=False)
    _unstored: int = attrs.field(init=False, default=0)
    _busy: bool = attrs.field(init=False, default=False)
    _late: int = attrs.field(init=False, default=0)
    """Places whose sends reach their queues only once written."""

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

    def route(self, place: P, message: Message) -> None:
        """``publish`` for a place in line already (a held one whose turn came)."""
        self._routed(place, message)

    def _routed(self, place: P, message: Message) -> None:
        """Route ``message``: queued early only while no send of this connection waits to
        be queued once written (``late``), so that none overtakes another."""
        routed = self._broker.publish_then(
            message, partial(self.written, place), early=not self._late
        )
        if routed is QUEUED:
            return
        if routed is None:
            if not place.done:  # (a refusal at once wrote it already)
                place.late = True
                self._late += 1
            return
        self.written(place)

    def hold(self, place: P) -> bool:
        """Hold ``place`` (its ``message`` a non-durable send) behind the places that wait
        to be queued before it (``late``): False if none does (publish it now), else True
        and ``due`` later."""
        if not self._late or not self.order.hold(place):
            return False
        place.late = True
        self._late += 1
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
            self._late -= 1
        if failure is not None and not self._listener.failed(place, failure):
            return
        size = place.size
        if size and self._max_unstored is not None:
            self._count(-size)
        self.order.written(place)

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
