"""Heartbeats and the connection TTL, on an injected clock."""

from __future__ import annotations

import pytest

from tests.transport.memory import APP, pair, wired
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
