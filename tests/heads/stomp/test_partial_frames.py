"""Partial STOMP frames, on an injected clock over the real broker: before CONNECTED a
frame may hold a CONNECT's worth; a client that stops mid-frame is closed after the frame
timeout even when it negotiated no heart-beats; the node-wide budget closes the connection
that would exceed it, and nobody else."""

from __future__ import annotations

import pytest
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from bridge.heads.stomp import StompHead, StompSettings
from bridge.heads.stomp.frames import FrameError, FrameParser, Limits, Version
from bridge.heads.stomp.protocol import StompFactory, _prelogin
from tests.heads.stomp.test_transcripts import _frames, _open
from transport.partial import PartialFrameBudget, PartialFrameLimits

KIB = 1024
CONNECT = b"CONNECT\naccept-version:1.2\nheart-beat:0,0\n\n\x00"


def _head(stomp_node, partial):
    clock = Clock()
    head = StompHead(stomp_node.broker, stomp_node.head.security, reactor=clock)
    factory = StompFactory(head, StompSettings(ttl=60, heart_beat=None), partial)
    return clock, head, factory


def _send(length: int, body: bytes) -> bytes:
    return f"SEND\ndestination:/queue/p\ncontent-length:{length}\n\n".encode() + body


def _end(clock, head, *connections):
    for protocol, wire in connections:
        wire.loseConnection()
        protocol.connectionLost(Failure(ConnectionDone()))
    clock.advance(0)
    assert head.connections == 0


def test_before_connected_a_frame_may_hold_a_connect_s_worth(stomp_node):
    clock, head, factory = _head(stomp_node, PartialFrameLimits(prelogin_size=4 * KIB))
    before, before_wire = _open(factory, clock)
    before.dataReceived(b"CONNECT\naccept-version:1.2\ncontent-length:1000000\n\n")
    clock.advance(0)
    [error] = _frames(before_wire.value())
    assert error.header("message") == "frame too large"
    assert before._parser.buffered == 0
    after, after_wire = _open(factory, clock)
    after.dataReceived(CONNECT)
    after.dataReceived(_send(64 * KIB, b"x" * 64 * KIB) + b"\x00")
    clock.advance(0)
    assert [f.command for f in _frames(after_wire.value())] == ["CONNECTED"]
    assert stomp_node.broker.queue("p").depth == 1
    _end(clock, head, (before, before_wire), (after, after_wire))


def test_a_client_without_heart_beats_stopped_mid_frame_is_closed_after_the_timeout(stomp_node):
    partial = PartialFrameLimits(prelogin_size=4 * KIB, timeout=30)
    clock, head, factory = _head(stomp_node, partial)
    idle, idle_wire = _open(factory, clock)
    idle.dataReceived(CONNECT)
    stalled, stalled_wire = _open(factory, clock)
    stalled.dataReceived(CONNECT)
    stalled.dataReceived(_send(1000, b"x" * 10))
    clock.advance(30)
    assert not stalled_wire.disconnecting
    clock.advance(10)
    assert stalled_wire.disconnecting and not idle_wire.disconnecting
    error = _frames(stalled_wire.value())[-1]
    assert error.header("message") == "frame timeout"
    assert b"frame-timeout 30s" in error.body
    _end(clock, head, (idle, idle_wire), (stalled, stalled_wire))


def test_the_budget_closes_the_connection_that_would_exceed_it_and_no_other(stomp_node):
    budget = PartialFrameBudget(16 * KIB)
    clock, head, factory = _head(stomp_node, PartialFrameLimits(4 * KIB, None, budget))
    first, first_wire = _open(factory, clock)
    second, second_wire = _open(factory, clock)
    for protocol in (first, second):
        protocol.dataReceived(CONNECT)
    first.dataReceived(_send(64 * KIB, b"a" * 13 * KIB))
    second.dataReceived(_send(64 * KIB, b"b" * 13 * KIB))
    clock.advance(0)
    assert second_wire.disconnecting and not first_wire.disconnecting
    error = _frames(second_wire.value())[-1]
    assert error.header("message") == "partial-frame budget exhausted"
    assert b"partial-frame-budget of 16384 bytes" in error.body
    assert budget.used <= 16 * KIB
    first.dataReceived(b"a" * 51 * KIB + b"\x00")
    assert budget.used == 0
    _end(clock, head, (first, first_wire), (second, second_wire))


def test_before_login_no_body_is_streamed_however_large_its_content_length():
    """A SEND pipelined behind CONNECT (parsed once the version is known, while the login
    may still run) is held to the pre-login size, not streamed up to the large limit."""
    parser = FrameParser(_prelogin(Limits(), 4 * KIB), version=Version.V1_2)
    parser.feed(_send(200 * KIB, b"x" * KIB))
    with pytest.raises(FrameError, match="frame too large"):
        parser.next_event()
