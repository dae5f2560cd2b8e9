"""Heartbeats and the connection TTL, on an injected clock."""

from __future__ import annotations

import struct

import pytest

from tests.transport.memory import APP, pair, wired
from transport.connection import MIN_ASKED_INTERVAL
from transport.errors import ConnectionTTLExpired
from transport.frames import ControlType, Frame, FrameDecoder, encode_frame
from transport.settings import ConnectionSettings


def test_a_ping_goes_out_every_interval():
    w = wired(heartbeat_interval=10, ttl=30)
    w.clock.advance(10)
    w.turn()
    w.clock.advance(10)
    w.turn()
    assert w.written_frames() == [Frame(ControlType.PING, b"")] * 2


def test_no_ping_joins_bytes_already_waiting_to_leave():
    w = wired(heartbeat_interval=10, ttl=30)
    w.connection.writer.pauseProducing()
    w.connection.send(APP, b"waiting")
    w.clock.advance(10)
    w.connection.writer.resumeProducing()
    assert w.written_frames() == [Frame(APP, b"waiting")]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({}, {}),  # the defaults: 30 s pings, 60 s TTL
        ({"heartbeat_interval": 5, "ttl": 10}, {"heartbeat_interval": 5, "ttl": 10}),
        ({"heartbeat_interval": 1, "ttl": 60}, {"heartbeat_interval": 30, "ttl": 60}),
    ],
)
def test_an_idle_healthy_pair_stays_up_over_many_ttls(a, b):
    joined = pair(a, b)
    ttl = max(s.get("ttl", 60) for s in (a, b))
    joined.run_for(seconds=20 * ttl, step=0.5)
    assert not joined.a.transport.aborted and not joined.b.transport.aborted
    assert joined.a.receiver.lost == [] and joined.b.receiver.lost == []


def test_a_silent_peer_is_dropped_after_the_ttl():
    w = wired(heartbeat_interval=5, ttl=12)
    w.clock.advance(12)
    assert not w.transport.aborted
    w.clock.advance(3)
    assert w.transport.aborted
    assert w.transport.producer is None
    assert not w.connection.is_writable
    w.connection.connectionLost()
    (reason,) = w.receiver.lost
    assert isinstance(reason, ConnectionTTLExpired)
    assert "connection-ttl 12" in str(reason)
    assert w.clock.getDelayedCalls() == []


def test_anything_received_keeps_the_peer_alive():
    w = wired(heartbeat_interval=5, ttl=12)
    for _ in range(10):
        w.clock.advance(5)
        w.connection.dataReceived(encode_frame(Frame(ControlType.PING, b"")))
    assert not w.transport.aborted
    w.connection.connectionLost()


def test_time_spent_with_reading_paused_does_not_count_against_the_peer():
    w = wired(heartbeat_interval=5, ttl=12)
    w.connection.pause_reading()
    w.clock.advance(60)
    w.connection.resume_reading()
    w.clock.advance(12)
    assert not w.transport.aborted
    w.clock.advance(3)
    assert w.transport.aborted
    w.connection.connectionLost()


def test_closing_listens_again_and_the_ttl_still_counts():
    w = wired(heartbeat_interval=5, ttl=12)
    w.connection.pause_reading()
    w.connection.close()
    assert w.transport.producerState == "producing"  # reading again, to see the peer's end
    w.connection.dataReceived(encode_frame(Frame(APP, b"too late")))  # not delivered,
    assert w.receiver.frames == []  # and not proof of life for a closing connection
    w.clock.advance(15)
    assert w.transport.aborted
    w.connection.connectionLost()


def test_an_error_longer_than_a_frame_is_cut_to_fit():
    w = wired(max_frame_size=16, heartbeat_interval=None, ttl=None)
    w.connection.dataReceived(b"GET / HTTP/1.1\r\n\r\n")
    (error,) = FrameDecoder(max_frame_size=16).feed(w.transport.value())
    assert error.type == ControlType.ERROR
    assert error.payload == b"not a txbridge f"
    assert w.transport.disconnecting


def test_no_heartbeat_no_ttl_means_no_timers():
    w = wired(heartbeat_interval=None, ttl=None)
    assert w.clock.getDelayedCalls() == []
    w.connection.connectionLost()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"heartbeat_interval": 31, "ttl": 60}, "must be at most half the ttl"),
        ({"ttl": 0}, "ttl must be positive"),
        ({"high_water": 10, "low_water": 10}, "0 <= low < high"),
        ({"max_frame_size": 0}, "max_frame_size"),
        ({"io_size": 100}, "io_size must be at least 4096"),
    ],
)
def test_inconsistent_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        ConnectionSettings(**settings)


def _ask(seconds: float) -> Frame:
    return Frame(ControlType.PING, struct.pack("!I", round(seconds * 1000)))


def test_an_accepting_side_asks_at_once_for_pings_at_a_third_of_its_ttl():
    w = wired(accepting=True, heartbeat_interval=10, ttl=30)
    w.turn()
    w.clock.advance(10)
    w.turn()
    assert w.written_frames() == [_ask(10), _ask(10)]


def test_a_connecting_side_with_slower_pings_is_not_dropped_by_a_shorter_ttl():
    """The defaults (30 s pings) against an acceptor that drops a peer silent for 3 s."""
    joined = pair({}, {"heartbeat_interval": 1, "ttl": 3})
    joined.run_for(seconds=60, step=0.25)
    assert not joined.a.transport.aborted and not joined.b.transport.aborted
    assert joined.a.receiver.lost == [] and joined.b.receiver.lost == []


def test_a_connecting_side_keeps_its_own_pings_when_they_are_more_frequent():
    w = wired(heartbeat_interval=2, ttl=60)
    w.connection.dataReceived(encode_frame(_ask(10)))
    w.clock.advance(2)
    w.turn()
    assert w.written_frames() == [Frame(ControlType.PING, b"")]


def test_an_ask_is_followed_no_faster_than_the_floor():
    w = wired(heartbeat_interval=30, ttl=60)
    w.connection.dataReceived(encode_frame(_ask(0)))
    w.clock.advance(MIN_ASKED_INTERVAL / 2)
    w.turn()
    assert w.written_frames() == []
    w.clock.advance(MIN_ASKED_INTERVAL / 2)
    w.turn()
    assert w.written_frames() == [Frame(ControlType.PING, b"")]


def test_an_accepting_side_is_not_told_how_often_to_ping():
    w = wired(accepting=True, heartbeat_interval=10, ttl=30)
    w.connection.dataReceived(encode_frame(_ask(0.1)))
    w.clock.advance(1)
    w.turn()
    assert w.written_frames() == [_ask(10)]  # its own first one only


def test_a_ping_of_another_size_closes_the_connection_naming_it():
    w = wired(heartbeat_interval=30, ttl=60)
    w.connection.dataReceived(encode_frame(Frame(ControlType.PING, b"xy")))
    assert w.transport.disconnecting
    [error] = [f for f in w.written_frames() if f.type == ControlType.ERROR]
    assert error.payload == b"a PING carries 0 or 4 bytes, not 2"
