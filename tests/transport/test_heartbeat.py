"""Heartbeats and the connection TTL, on an injected clock."""

from __future__ import annotations

import pytest

from tests.transport.memory import APP, wired
from transport.errors import ConnectionTTLExpired
from transport.frames import ControlType, Frame, encode_frame
from transport.settings import ConnectionSettings


def test_a_ping_goes_out_when_nothing_else_did_for_the_interval():
    w = wired(heartbeat_interval=10, ttl=30)
    w.clock.advance(10)
    w.turn()
    assert w.written_frames() == [Frame(ControlType.PING, b"")]


def test_no_ping_while_other_frames_keep_the_line_busy():
    w = wired(heartbeat_interval=10, ttl=30)
    for _ in range(6):
        w.clock.advance(4)
        w.connection.send(APP, b"busy")
        w.connection.dataReceived(encode_frame(Frame(APP, b"alive")))
        w.turn()
    assert {f.type for f in w.written_frames()} == {APP}


def test_a_silent_peer_is_dropped_after_the_ttl():
    w = wired(heartbeat_interval=5, ttl=12)
    w.clock.advance(10)
    assert not w.transport.aborted
    w.clock.advance(5)
    assert w.transport.aborted
    assert w.transport.producer is None
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
    w.clock.advance(10)
    assert not w.transport.aborted
    w.clock.advance(5)
    assert w.transport.aborted
    w.connection.connectionLost()


def test_no_heartbeat_no_ttl_means_no_timers():
    w = wired(heartbeat_interval=None, ttl=None)
    assert w.clock.getDelayedCalls() == []
    w.connection.connectionLost()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"heartbeat_interval": 30, "ttl": 30}, "must be shorter than the ttl"),
        ({"ttl": 0}, "ttl must be positive"),
        ({"high_water": 10, "low_water": 10}, "0 <= low < high"),
        ({"max_frame_size": 0}, "max_frame_size"),
    ],
)
def test_inconsistent_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        ConnectionSettings(**settings)
