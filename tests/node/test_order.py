"""The order of a connection's sends (``bridge.node.order``), without a reactor: places are
released in the order they entered whatever order their writes end in, and a held send is
routed only once every place before it is done."""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from bridge.node.order import Place, SendOrder


@attrs.define(eq=False)
class _Send(Place):
    number: int
    durable: bool = True


class _Head:
    """What a head does with the order: records releases and routes held sends."""

    def __init__(self, write_at_once: bool = True) -> None:
        self.released: list[int] = []
        self.routed: list[int] = []
        self.released_before: dict[int, list[int]] = {}
        """For each routed send, what was released when its turn came."""
        self.write_at_once = write_at_once
        self.order: SendOrder[_Send] = SendOrder(self._released, self._due)

    def _released(self, place: _Send) -> None:
        self.released.append(place.number)

    def _due(self, place: _Send) -> None:
        self.routed.append(place.number)
        self.released_before[place.number] = list(self.released)
        if self.write_at_once:
            self.order.written(place)


def test_a_place_with_nothing_before_it_is_released_at_once() -> None:
    head = _Head()
    head.order.enter_done(_Send(1))
    assert head.released == [1]
    assert not head.order.waiting


def test_a_place_done_behind_a_waiting_one_waits_for_it() -> None:
    head = _Head()
    first = _Send(1)
    head.order.enter(first)
    head.order.enter_done(_Send(2))
    assert head.released == []
    head.order.written(first)
    assert head.released == [1, 2]


def test_a_held_send_is_routed_when_the_writes_before_it_end() -> None:
    head = _Head()
    first = _Send(1)
    assert not head.order.hold(_Send(0, durable=False))  # nothing waits: route it now
    head.order.enter(first)
    assert head.order.hold(_Send(2, durable=False))
    assert head.routed == []
    head.order.written(first)
    assert head.routed == [2]
    assert head.released == [1, 2]


def test_a_held_send_whose_write_waits_stops_the_line_again() -> None:
    head = _Head(write_at_once=False)
    first, later = _Send(1), _Send(3)
    head.order.enter(first)
    head.order.hold(held := _Send(2, durable=False))
    head.order.enter(later)
    head.order.written(later)
    head.order.written(first)
    assert head.routed == [2]
    assert head.released == [1]
    head.order.written(held)
    assert head.released == [1, 2, 3]


def test_a_place_written_before_it_enters_is_no_harm() -> None:
    """The store may answer inside the publish, before the head puts the place in line."""
    head = _Head()
    waiting, early = _Send(1), _Send(2)
    head.order.enter(waiting)
    head.order.written(early)
    assert head.released == []
    head.order.enter_done(early)
    head.order.written(waiting)
    assert head.released == [1, 2]


def test_closing_returns_the_held_sends_and_releases_nothing_more() -> None:
    head = _Head()
    first, held = _Send(1), _Send(2, durable=False)
    head.order.enter(first)
    head.order.hold(held)
    assert head.order.close() == [held]
    head.order.written(first)
    assert head.released == []
    assert head.routed == []
    assert not head.order.waiting


@given(
    kinds=st.lists(st.sampled_from(["durable", "at-once", "held"]), min_size=1, max_size=30),
    data=st.data(),
)
def test_places_are_released_in_the_order_sent_whatever_order_the_writes_end_in(
    kinds: list[str], data: st.DataObject
) -> None:
    """Sends enter as a head makes them enter (a non-durable one held while anything
    waits), their writes end in any order: every send is released once, in the order
    sent, and a held send is routed only after every send before it is released."""
    head = _Head()
    writing: list[_Send] = []
    for number, kind in enumerate(kinds):
        place = _Send(number, durable=kind == "durable")
        if kind == "durable":
            head.order.enter(place)
            writing.append(place)
        elif kind == "held" and head.order.hold(place):
            pass
        else:
            head.order.enter_done(place)
    for place in data.draw(st.permutations(writing)):
        head.order.written(place)
    assert head.released == list(range(len(kinds)))
    assert not head.order.waiting
    for number, before in head.released_before.items():
        assert before == list(range(number))
