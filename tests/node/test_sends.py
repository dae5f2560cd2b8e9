"""A connection's sends in order (``bridge.node.sends``), without a reactor or a store: a
broker double says whether each send is routed at once or waits for its write."""

from __future__ import annotations

from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from bridge.message import Message
from bridge.node.broker import Routed
from bridge.node.order import Place
from bridge.node.routing import QUEUED, Queued
from bridge.node.sends import Sends


@attrs.define(eq=False)
class _Send(Place):
    number: int


class _Broker:
    """Routes a non-durable send at once; a durable one waits for ``write``, queued early
    if asked to and it has no duplicate id (as the router does)."""

    def __init__(self) -> None:
        self.writes: list[Any] = []
        self.discarded: list[Message] = []
        self.early: list[bool] = []
        """Whether each durable send was queued early."""

    def publish_then(self, message: Message, then: Any, *, early: bool) -> Routed | Queued | None:
        if not message.durable:
            return Routed(())
        self.writes.append(then)
        early = early and message.duplicate_id is None
        self.early.append(early)
        return QUEUED if early else None

    def discard(self, message: Message) -> None:
        self.discarded.append(message)


class _Head:
    def __init__(self, max_unstored: int | None = None, go_on: bool = True) -> None:
        self.broker = _Broker()
        self.sends: Sends[_Send] = Sends(self.broker, self, max_unstored)  # type: ignore[arg-type]
        self.heard: list[object] = []
        self.go_on = go_on

    def released(self, place: _Send) -> None:
        self.heard.append(place.number)

    def due(self, place: _Send) -> None:
        self.heard.append(f"due {place.number}")
        message, place.message = place.message, None
        assert message is not None
        self.sends.route(place, message)

    def failed(self, place: _Send, failure: Failure) -> bool:
        self.heard.append(f"failed {place.number}")
        return self.go_on

    def busy(self, busy: bool) -> None:
        self.heard.append("busy" if busy else "not busy")


def _message(durable: bool, size: int = 10, duplicate_id: bytes | None = None) -> Message:
    return Message(0, "a", durable, {}, b"x" * size, duplicate_id)


def test_places_are_released_in_the_order_sent_whatever_order_the_writes_end_in() -> None:
    head = _Head()
    head.sends.publish(_Send(1), _message(True))
    head.sends.publish(_Send(2), _message(True))
    head.sends.publish(_Send(3), _message(False))  # routed at once, released in its turn
    assert head.heard == []
    second_written = head.broker.writes[1]
    second_written(None)
    assert head.heard == []
    head.broker.writes[0](None)
    assert head.heard == [1, 2, 3]


def test_a_non_durable_send_is_held_behind_a_late_write_and_routed_in_its_turn() -> None:
    head = _Head()
    assert not head.sends.hold(_Send(0, message=_message(False)))  # nothing waits
    head.sends.publish(_Send(1), _message(True))
    assert not head.sends.hold(_Send(2, message=_message(False)))  # 1 is queued already
    head.sends.publish(_Send(3), _message(True, duplicate_id=b"d"))  # queued once written
    assert head.sends.hold(_Send(4, message=_message(False)))
    head.broker.writes[1](None)
    assert head.heard == []
    head.broker.writes[0](None)
    assert head.heard == [1, 3, "due 4", 4]


def test_a_failed_write_is_told_and_the_head_says_whether_its_turn_still_comes() -> None:
    going_on, ending = _Head(), _Head(go_on=False)
    for head in (going_on, ending):
        head.sends.publish(_Send(1), _message(True))
        head.sends.publish(_Send(2), _message(False))
        head.broker.writes[0](Failure(OSError("disk full")))
    assert going_on.heard == ["failed 1", 1, 2]
    assert ending.heard == ["failed 1"]


def test_a_place_may_wait_for_any_deferred() -> None:
    head = _Head()
    committing: Deferred[None] = Deferred()
    head.sends.wait(_Send(1), committing)
    head.sends.order.enter_done(_Send(2))
    assert head.heard == []
    committing.callback(None)
    assert head.heard == [1, 2]


def test_body_bytes_waiting_for_the_store_make_the_connection_busy_until_half_are_written():
    head = _Head(max_unstored=100)
    for number in (1, 2, 3):
        head.sends.publish(_Send(number, size=40), _message(True, 40))
    assert head.heard == ["busy"]  # 120 > 100
    head.broker.writes[0](None)
    assert head.heard == ["busy", 1]  # 80 > 50
    head.broker.writes[1](None)
    assert head.heard == ["busy", 1, "not busy", 2]


def test_a_closed_connections_held_sends_go_and_nothing_more_is_heard() -> None:
    head = _Head()
    head.sends.publish(_Send(1), _message(True, duplicate_id=b"d"))
    held = _message(False)
    assert head.sends.hold(_Send(2, message=held))
    head.sends.close()
    assert head.broker.discarded == [held]
    head.broker.writes[0](Failure(OSError("too late")))
    assert head.heard == []


def test_a_send_is_queued_early_only_while_none_before_it_waits_to_be_queued() -> None:
    head = _Head()
    head.sends.publish(_Send(1), _message(True))
    head.sends.publish(_Send(2), _message(True, duplicate_id=b"d"))  # queued once written
    head.sends.publish(_Send(3), _message(True))  # would overtake 2: waits as 2 does
    head.broker.writes[1](None)
    head.sends.publish(_Send(4), _message(True))
    assert head.broker.early == [True, False, False, False]  # 3 is still late
    head.broker.writes[3](None)
    head.broker.writes[2](None)
    head.sends.publish(_Send(5), _message(True))
    assert head.broker.early == [True, False, False, False, True]
    head.broker.writes[4](None)
    assert head.heard == []
    head.broker.writes[0](None)
    assert head.heard == [1, 2, 3, 4, 5]


def test_a_late_send_refused_at_once_does_not_keep_the_next_from_going_early() -> None:
    head = _Head()
    head.broker.publish_then = _refusing(head.broker.publish_then)  # type: ignore[method-assign]
    head.sends.publish(_Send(1), _message(True, duplicate_id=b"d"))
    head.broker.publish_then = _Broker.publish_then.__get__(head.broker)  # type: ignore[method-assign]
    head.sends.publish(_Send(2), _message(True))
    assert head.broker.early == [True]
    assert head.heard == ["failed 1", 1]


def _refusing(publish_then: Any) -> Any:
    """A ``publish_then`` whose store refuses the add at once, inside the call (a late
    send: it returns None)."""

    def refusing(message: Message, then: Any, *, early: bool) -> None:
        then(Failure(OSError("refused")))

    return refusing
