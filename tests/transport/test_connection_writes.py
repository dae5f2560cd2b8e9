"""Writing on a framed connection: batching per turn, water marks, listeners."""

from __future__ import annotations

import pytest
from twisted.internet.defer import CancelledError

from tests.transport.memory import APP, wired
from transport.errors import ConnectionClosed
from transport.frames import Frame


def test_a_turns_frames_leave_in_one_write_sequence():
    w = wired()
    for i in range(5):
        w.connection.send(APP, b"%d" % i)
    assert w.transport.value() == b""
    w.turn()
    assert w.transport.sequences == 1
    assert w.written_frames() == [Frame(APP, b"%d" % i) for i in range(5)]


def test_calls_before_the_flush_send_within_the_turn_once_and_in_order():
    w = wired()
    calls: list[str] = []

    def gathered(name: str) -> None:
        calls.append(name)
        w.connection.send(APP, name.encode())

    w.connection.call_before_flush(lambda: gathered("batch"))  # schedules the turn's end
    assert w.transport.value() == b""
    w.connection.send(APP, b"first")
    w.connection.call_before_flush(lambda: gathered("later"))
    w.turn()
    assert calls == ["batch", "later"]
    assert w.transport.sequences == 1
    assert w.written_frames() == [Frame(APP, b"first"), Frame(APP, b"batch"), Frame(APP, b"later")]
    w.turn()
    assert calls == ["batch", "later"]  # once each


def test_what_calls_before_the_flush_send_or_ask_for_leaves_in_that_same_turn():
    w = wired()

    def again() -> None:
        w.connection.send(APP, b"asked during the call")

    def first() -> None:
        w.connection.send(APP, b"gathered")
        w.connection.call_before_flush(again)

    w.connection.call_before_flush(first)
    w.turn()
    assert w.transport.sequences == 1
    assert w.written_frames() == [Frame(APP, b"gathered"), Frame(APP, b"asked during the call")]
    due = [c for c in w.clock.getDelayedCalls() if c.getTime() <= w.clock.seconds()]
    assert due == []  # no turn left over


def test_a_failing_call_before_the_flush_spoils_neither_the_others_nor_the_flush():
    w = wired()

    def broken() -> None:
        raise RuntimeError("a caller's bug")

    w.connection.send(APP, b"kept")
    w.connection.call_before_flush(broken)
    w.connection.call_before_flush(lambda: w.connection.send(APP, b"after"))
    w.turn()
    assert w.written_frames() == [Frame(APP, b"kept"), Frame(APP, b"after")]


def test_calls_before_the_flush_are_dropped_when_the_connection_closes():
    w = wired()
    calls: list[str] = []
    w.connection.call_before_flush(lambda: calls.append("late"))
    w.connection.close()
    w.turn()
    w.connection.call_before_flush(lambda: calls.append("later"))
    w.turn()
    assert calls == []


def test_the_connection_registers_its_writer_as_one_streaming_producer():
    w = wired()
    assert w.transport.producer is w.connection.writer
    assert w.transport.streaming


def test_unwritable_at_high_water_writable_again_only_at_low_water():
    w = wired(high_water=1000, low_water=300)
    changes: list[bool] = []
    w.connection.add_writability_listener(changes.append)
    w.connection.writer.pauseProducing()  # Twisted's buffer is full
    for _ in range(9):
        w.connection.send(APP, b"x" * 92)  # 100 bytes with the header
    assert w.connection.is_writable
    w.connection.send(APP, b"x" * 92)
    assert not w.connection.is_writable
    assert changes == []  # never inside send
    w.turn()
    assert changes == [False]

    w.connection.writer.resumeProducing()  # Twisted drained: the queue moves on in one pass
    assert w.connection.is_writable
    assert changes == [False, True]
    assert len(w.written_frames()) == 10


def test_bytes_handed_to_a_paused_transport_count_until_it_drains():
    w = wired(high_water=1000, low_water=300)
    w.connection.send(APP, b"x" * 592)
    w.turn()
    w.connection.writer.pauseProducing()
    assert w.connection.pending_bytes == 600
    w.connection.send(APP, b"x" * 392)
    assert not w.connection.is_writable
    w.connection.writer.resumeProducing()
    assert w.connection.pending_bytes == 0
    assert w.connection.is_writable


def test_listeners_fire_once_per_change_in_order_and_survive_each_other():
    w = wired(high_water=100, low_water=10)
    calls: list[tuple[str, bool]] = []

    def broken(writable: bool) -> None:
        calls.append(("broken", writable))
        raise RuntimeError("a listener's bug")

    w.connection.add_writability_listener(lambda v: calls.append(("first", v)))
    w.connection.add_writability_listener(broken)
    w.connection.add_writability_listener(lambda v: calls.append(("last", v)))
    w.connection.writer.pauseProducing()
    w.connection.send(APP, b"x" * 200)
    w.connection.send(APP, b"x" * 200)
    w.turn()
    w.turn()
    w.connection.writer.resumeProducing()
    w.turn()
    assert calls == [
        ("first", False),
        ("broken", False),
        ("last", False),
        ("first", True),
        ("broken", True),
        ("last", True),
    ]


def test_a_removed_listener_is_not_called():
    w = wired(high_water=100, low_water=10)
    calls: list[bool] = []
    w.connection.add_writability_listener(calls.append)
    w.connection.remove_writability_listener(calls.append)
    w.connection.writer.pauseProducing()
    w.connection.send(APP, b"x" * 200)
    w.turn()
    assert calls == []


def test_when_writable_fires_at_once_or_on_the_change():
    w = wired(high_water=100, low_water=10)
    assert w.connection.when_writable().called
    w.connection.writer.pauseProducing()
    w.connection.send(APP, b"x" * 200)
    waiting = w.connection.when_writable()
    cancelled = w.connection.when_writable()
    cancelled.cancel()
    cancelled.addErrback(lambda f: f.trap(CancelledError))
    assert not waiting.called
    w.connection.writer.resumeProducing()
    w.turn()
    assert waiting.called


def test_when_writable_fails_when_the_connection_is_lost():
    w = wired(high_water=100, low_water=10)
    w.connection.writer.pauseProducing()
    w.connection.send(APP, b"x" * 200)
    waiting = w.connection.when_writable()
    w.connection.connectionLost()
    failures = []
    waiting.addErrback(failures.append)
    assert failures
    assert w.connection.when_writable().called  # fails at once from now on
    w.connection.when_writable().addErrback(lambda f: None)


def test_each_pass_hands_over_at_most_its_budget_and_the_rest_follows():
    w = wired(high_water=1000, low_water=100)
    sizes: list[int] = []
    original = w.transport.writeSequence

    def record(parts):  # type: ignore[no-untyped-def]
        sizes.append(sum(map(len, parts)))
        original(parts)

    w.transport.writeSequence = record  # type: ignore[method-assign]
    for _ in range(10):
        w.connection.send(APP, b"x" * 292)  # a 8-byte header part and a 292-byte payload part
    w.turn()
    # Each pass takes whole parts until the budget is reached: the part that crosses it
    # (here a payload) goes too, so a frame's header does not leave without its payload.
    assert sizes == [1200, 1200, 600]
    assert len(w.written_frames()) == 10


def test_nothing_is_handed_to_a_paused_transport():
    w = wired()
    w.connection.writer.pauseProducing()
    w.connection.send(APP, b"held")
    w.turn()
    assert w.transport.value() == b""
    w.connection.writer.resumeProducing()
    assert w.written_frames() == [Frame(APP, b"held")]


def test_oversize_frames_and_sends_after_close_are_refused():
    w = wired(max_frame_size=1024)
    with pytest.raises(ValueError, match="2000 bytes exceeds the maximum frame size of 1024"):
        w.connection.send(APP, b"x" * 2000)
    w.connection.close()
    with pytest.raises(ConnectionClosed):
        w.connection.send(APP, b"late")


def test_close_sends_what_is_queued_unregisters_and_disconnects():
    w = wired()
    w.connection.writer.pauseProducing()
    w.connection.send(APP, b"last words")
    w.connection.close()
    assert w.transport.producer is None
    assert w.transport.disconnecting
    assert w.written_frames() == [Frame(APP, b"last words")]
    assert not w.connection.is_writable


def test_a_writer_that_saw_unwritable_hears_writable_again_even_within_one_turn():
    # A writer stops on is_writable False and waits for the listener; if the queue drains
    # before the change was announced, it must still hear both changes or wait forever.
    w = wired(high_water=1000, low_water=300)
    changes: list[bool] = []
    w.connection.add_writability_listener(changes.append)
    while w.connection.is_writable:
        w.connection.send(APP, b"x" * 92)
    w.turn()  # the transport takes everything in this turn's pass
    assert w.connection.is_writable
    assert changes == [False, True]


def test_when_writable_fails_while_closing():
    w = wired()
    w.connection.close()
    failures: list[object] = []
    w.connection.when_writable().addErrback(failures.append)
    assert failures
    assert failures[0].check(ConnectionClosed)  # type: ignore[attr-defined]


def test_a_waiter_cancelled_while_waiters_are_being_fired_is_harmless():
    w = wired(high_water=100, low_water=10)
    w.connection.writer.pauseProducing()
    w.connection.send(APP, b"x" * 200)
    first = w.connection.when_writable()
    second = w.connection.when_writable()
    second.addErrback(lambda failure: None)
    first.addCallback(lambda _: second.cancel())
    w.connection.writer.resumeProducing()
    w.turn()
    assert first.called and second.called
