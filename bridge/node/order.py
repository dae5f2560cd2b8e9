"""The order of one connection's sends across durability, sans-IO, for every head.

A durable send reaches its queues once the store has it; a non-durable one could reach
them at once, ahead of the durable sends before it that still wait for their writes.
Artemis keeps a session's sends in order, and so does the node: every effect of a
connection that a client waits to hear of (a send, for STOMP also an acknowledgement or a
commit with a receipt) takes a :class:`Place` in one :class:`SendOrder`, and

- the head is told of each place (``released``) only once it and every place before it are
  done, so confirmations (core) and receipts (STOMP) go out in the order sent, whatever
  order the store's writes end in;
- a send that must not overtake the places before it (a non-durable one) is held in line
  (``hold``) and handed back to the head (``due``) when it reaches the front, to be routed
  then.

A place's life, as a table (h11 writes its states so)::

    state    event                        next
    WAITING  written                      DONE
    HELD     reaches the front: due()     WAITING (the head routes it and writes it)
    DONE     every place before it gone   released() and out of line

Heads subclass :class:`Place` with what they need to answer it (a sequence, a receipt),
so a send costs one object. The order neither routes nor writes: the head does, and tells
it ``written`` (at once, or when the store's write ends; a place may even be written
before it enters, when the store answers inside the publish).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

import attrs

from bridge.message import Message


@attrs.define(eq=False)
class Place:
    """An effect in line: ``done`` once written, ``held`` while a held send waits for its
    turn to be routed (its ``message``); ``size``, the body bytes it waits to have
    written (``bridge.node.sends`` counts them); ``late``, a send that reaches its queues
    only once written (a later send must not be queued before it)."""

    done: bool = attrs.field(default=False, kw_only=True)
    late: bool = attrs.field(default=False, kw_only=True)
    held: bool = attrs.field(default=False, kw_only=True)
    size: int = attrs.field(default=0, kw_only=True)
    message: Message | None = attrs.field(default=None, kw_only=True)


P = TypeVar("P", bound=Place)


class SendOrder(Generic[P]):
    """One connection's places in the order its client sent them."""

    def __init__(self, released: Callable[[P], None], due: Callable[[P], None]) -> None:
        """``released(place)``: the place and every one before it are done, answer it.
        ``due(place)``: a held place reached the front; route its send and call
        ``written(place)`` (now or once stored)."""
        self._line: deque[P] = deque()
        self._released = released
        self._due = due
        self._releasing = False

    @property
    def waiting(self) -> bool:
        """Whether any place waits (a send now would have to keep behind it)."""
        return bool(self._line)

    def __len__(self) -> int:
        return len(self._line)

    def is_last(self, place: P) -> bool:
        """Whether ``place`` is the last in line (nothing entered after it)."""
        line = self._line
        return bool(line) and line[-1] is place

    def enter(self, place: P) -> None:
        """``place`` waits for ``written``."""
        self._line.append(place)

    def enter_done(self, place: P) -> None:
        """``place`` needs no write: released at once if nothing waits before it, else in
        its turn."""
        place.done = True
        if self._line:
            self._line.append(place)
        else:
            self._released(place)

    def hold(self, place: P) -> bool:
        """Hold a send that must not overtake the places before it: False if none waits
        (route it now), else True and ``due(place)`` once they are all done."""
        if not self._line:
            return False
        place.held = True
        self._line.append(place)
        return True

    def written(self, place: P) -> None:
        """``place``'s write ended (or it needed none): release what is done in front."""
        place.done = True
        if not self._releasing:
            self._release()

    def _release(self) -> None:
        line = self._line
        self._releasing = True
        try:
            while line:
                first = line[0]
                if first.held:
                    first.held = False
                    self._due(first)
                if not first.done:
                    break
                line.popleft()
                self._released(first)
        finally:
            self._releasing = False

    def close(self) -> list[P]:
        """The connection is gone: the line empties, nothing more is released (the order
        lets go of the head's callables, which refer back to it). Returns the held places,
        never routed, for the head to let their messages go."""
        held = [place for place in self._line if place.held]
        self._line.clear()
        self._released = self._due = _ignore
        return held


def _ignore(place: Place) -> None:
    """What a closed order calls: nothing."""
