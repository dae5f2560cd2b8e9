"""A connection's sends in order (``bridge.node.sends``), without a reactor or a store: a
broker double says whether each send is routed at once or waits for its write."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from bridge.message import Message
from bridge.node.broker import NodeError, Routed
from bridge.node.order import Place
from bridge.node.routing import QUEUED, Queued
from bridge.node.sends import RUN_LENGTH, Sends


@attrs.define(eq=False)
class _Send(Place):
    number: int | str


class _Broker:
    """Routes a non-durable send at once; a durable one waits for ``write``, queued early
    if asked to and it has no duplicate id (as the router does)."""

    def __init__(self) -> None:
        self.writes: list[Any] = []
        self.discarded: list[Message] = []
        self.early: list[bool] = []
        """Whether each durable send was queued early."""
        self.holds: list[Any] = []
        """What each durable send's write tells when the store holds it for bridges."""

    def publish_then(
        self, message: Message, then: Any, *, early: bool, numbered: bool, on_hold: Any = None
    ) -> Routed | Queued | None:
        if message.address == "refused":
            raise NodeError("refused at once")
        if not message.durable:
            return Routed(())
        self.writes.append(then)
        self.holds.append(on_hold)
        early = early and message.duplicate_id is None
        self.early.append(early)
        return QUEUED if early else None

    def discard(self, message: Message) -> None:
        self.discarded.append(message)


class _Head:
    def __init__(self, max_unstored: int | None = None, go_on: bool = True) -> None:
        self.broker = _Broker()
        self.sends: Sends[_Send] = Sends(
            self.broker,
            self,  # type: ignore[arg-type]
            max_unstored,
            lambda: _Send("run"),
        )
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


def _message(
    durable: bool, size: int = 10, duplicate_id: bytes | None = None, address: str = "a"
) -> Message:
    return Message(0, address, durable, {}, b"x" * size, duplicate_id)


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


def test_body_bytes_waiting_for_the_store_make_the_connection_busy_until_half_are_written() -> None:
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

    def refusing(message: Message, then: Any, *, early: bool, numbered: bool, on_hold: Any) -> None:
        then(Failure(OSError("refused")))

    return refusing


def test_silent_sends_in_a_row_take_one_place_written_once_each_of_their_writes_ended() -> None:
    head = _Head()
    for _ in range(3):
        head.sends.publish_silent(_message(True))
    head.sends.publish(_Send(4), _message(True))
    assert len(head.sends.order) == 2
    assert head.broker.early == [True] * 4
    head.broker.writes[3](None)
    head.broker.writes[2](None)
    head.broker.writes[0](None)
    assert head.heard == []  # the second silent send's write has not ended
    head.broker.writes[1](None)
    assert head.heard == ["run", 4]


def test_a_run_holds_at_most_run_length_sends_and_none_joins_it_past_another_place() -> None:
    head = _Head()
    for _ in range(RUN_LENGTH + 1):
        head.sends.publish_silent(_message(True))
    assert len(head.sends.order) == 2
    head.sends.order.enter_done(_Send(1))
    head.sends.publish_silent(_message(True))
    assert len(head.sends.order) == 4  # a new run behind the place entered after the last
    for write in head.broker.writes:
        write(None)
    assert head.heard == ["run", "run", 1, "run"]


def test_a_run_ends_once_written_and_the_next_silent_send_starts_another() -> None:
    head = _Head()
    head.sends.publish_silent(_message(True))
    head.broker.writes[0](None)
    assert head.heard == ["run"] and not head.sends.waiting
    head.sends.publish_silent(_message(True))
    assert head.sends.waiting
    head.broker.writes[1](None)
    assert head.heard == ["run", "run"]


def test_a_silent_send_not_queued_early_makes_later_sends_wait_as_a_late_one_does() -> None:
    head = _Head()
    head.sends.publish_silent(_message(True))
    head.sends.publish_silent(_message(True, duplicate_id=b"d"))  # queued once written
    assert head.sends.hold(_Send(3, message=_message(False)))
    head.sends.publish_silent(_message(True))  # its own place, not early
    assert head.broker.early == [True, False, False]
    head.broker.writes[1](None)
    assert head.heard == []
    head.broker.writes[0](None)
    assert head.heard == ["run", "due 3", 3]
    head.broker.writes[2](None)
    assert head.heard == ["run", "due 3", 3, "run"]
    head.sends.publish_silent(_message(True))
    assert head.broker.early[-1] is True  # nothing waits to be queued any more


def test_a_silent_send_routed_at_once_is_written_at_once() -> None:
    head = _Head()
    head.sends.publish_silent(_message(False))
    assert head.heard == ["run"] and not head.sends.waiting


def test_a_silent_sends_failed_write_is_told_and_the_head_says_whether_the_run_goes_on() -> None:
    going_on, ending = _Head(), _Head(go_on=False)
    for head in (going_on, ending):
        head.sends.publish_silent(_message(True))
        head.sends.publish_silent(_message(True))
        head.sends.publish(_Send(3), _message(True))
        head.broker.writes[0](Failure(OSError("disk full")))
        head.broker.writes[1](None)
        head.broker.writes[2](None)
    assert going_on.heard == ["failed run", "run", 3]
    assert ending.heard == ["failed run"]


def test_a_refused_silent_send_is_no_member_and_an_empty_run_keeps_nothing_back() -> None:
    head = _Head(max_unstored=100)
    with pytest.raises(NodeError):
        head.sends.publish_silent(_message(True, 60, address="refused"))
    assert head.heard == ["run"] and not head.sends.waiting
    head.sends.publish_silent(_message(True, 60))
    with pytest.raises(NodeError):
        head.sends.publish_silent(_message(True, 60, address="refused"))
    assert head.heard == ["run"]  # 60 bytes wait: not busy
    head.broker.writes[0](None)
    assert head.heard == ["run", "run"]


def test_a_runs_body_bytes_count_until_the_whole_run_is_written() -> None:
    head = _Head(max_unstored=100)
    for _ in range(3):
        head.sends.publish_silent(_message(True, 40))
    assert head.heard == ["busy"]
    head.broker.writes[0](None)
    head.broker.writes[1](None)
    assert head.heard == ["busy"]
    head.broker.writes[2](None)
    assert head.heard == ["busy", "not busy", "run"]


def test_a_send_held_for_bridges_no_longer_counts_and_is_still_answered_once_written() -> None:
    head = _Head(max_unstored=100)
    for number in (1, 2, 3):
        head.sends.publish(_Send(number, size=40), _message(True, 40))
    assert head.heard == ["busy"]  # 120 > 100
    head.broker.holds[0]()
    head.broker.holds[1]()
    assert head.heard == ["busy", "not busy"]  # 40: the bridges bound the rest
    head.broker.writes[0](None)
    head.broker.writes[1](None)
    assert head.heard == ["busy", "not busy", 1, 2]  # answered once written, as before
    head.sends.publish(_Send(4, size=40), _message(True, 40))
    head.sends.publish(_Send(5, size=40), _message(True, 40))
    assert head.heard[-1] == "busy"  # 120 again: 3, 4 and 5 wait, none held
    for write in head.broker.writes[2:]:
        write(None)
    assert head.heard[-4:] == [3, "not busy", 4, 5]


def test_a_runs_member_held_for_bridges_no_longer_counts() -> None:
    head = _Head(max_unstored=100)
    for _ in range(3):
        head.sends.publish_silent(_message(True, 40))
    assert head.heard == ["busy"]
    head.broker.holds[2]()
    head.broker.holds[0]()
    assert head.heard == ["busy", "not busy"]
    for write in head.broker.writes:
        write(None)
    assert head.heard == ["busy", "not busy", "run"]
    head.sends.publish_silent(_message(True, 40))
    head.sends.publish_silent(_message(True, 40))
    head.sends.publish_silent(_message(True, 40))
    assert head.heard[-1] == "busy"  # nothing of the written run still counts


def test_nothing_is_told_of_holds_where_bytes_are_not_counted() -> None:
    head = _Head()
    head.sends.publish(_Send(1, size=40), _message(True, 40))
    head.sends.publish_silent(_message(True, 40))
    assert head.broker.holds == [None, None]
