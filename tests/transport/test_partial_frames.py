"""Partial frames on the accepting side, on an injected clock: a pre-login frame size, a
node-wide budget that the total never exceeds (the connection that would exceed it is
closed, nobody else), and a frame timeout that holds whatever the heartbeats."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.task import Clock

from tests.transport.memory import APP, Recorder, wired
from transport.connection import FrameConnection
from transport.errors import ProtocolError
from transport.frames import HEADER, MAGIC, VERSION, ControlType, Frame, encode_frame
from transport.partial import BudgetExhausted, HeldBytes, PartialFrameBudget, PartialFrameLimits
from transport.settings import ConnectionSettings

KIB = 1024


def header(length: int) -> bytes:
    return HEADER.pack(MAGIC, VERSION, APP, length)


def limits(budget: int | None = None, timeout: float | None = None) -> PartialFrameLimits:
    return PartialFrameLimits(
        prelogin_size=KIB,
        timeout=timeout,
        budget=None if budget is None else PartialFrameBudget(budget),
    )


def test_before_login_a_large_frame_is_refused_at_its_header():
    w = wired(accepting=True, max_frame_size=4 * KIB * KIB, partial_frames=limits())
    w.connection.dataReceived(header(4 * KIB * KIB) + b"x" * 100)
    assert w.transport.disconnecting
    [error] = [f for f in w.written_frames() if f.type == ControlType.ERROR]
    assert b"exceeds the maximum frame size of 1024 bytes" in error.payload
    assert w.connection._decoder.buffered == 0
    assert w.receiver.frames == []


def test_after_login_frames_up_to_the_max_frame_size_are_taken():
    w = wired(accepting=True, max_frame_size=64 * KIB, partial_frames=limits())
    w.connection.dataReceived(encode_frame(Frame(APP, b"c" * 1000)))  # a CONNECT's worth
    w.connection.logged_in()
    big = encode_frame(Frame(APP, b"m" * 60 * KIB))
    w.connection.dataReceived(big[:30000])
    w.connection.dataReceived(big[30000:])
    assert [len(f.payload) for f in w.receiver.frames] == [1000, 60 * KIB]
    assert not w.transport.disconnecting


def test_a_client_is_not_limited_before_login():
    clock = Clock()
    receiver = Recorder()
    connection = FrameConnection(
        receiver, clock, ConnectionSettings(partial_frames=limits()), [APP], is_client=True
    )
    assert connection._decoder.max_frame_size == ConnectionSettings().max_frame_size


def test_the_budget_closes_the_connection_that_would_exceed_it_and_no_other():
    shared = limits(budget=10 * KIB)
    a = wired(accepting=True, partial_frames=shared)
    b = wired(accepting=True, partial_frames=shared)
    for w in (a, b):
        w.connection.logged_in()
    frame = encode_frame(Frame(APP, b"a" * 20 * KIB))
    a.connection.dataReceived(frame[: 8 * KIB])  # 7 KiB beyond its own 1 KiB
    assert shared.budget.used == 8 * KIB - HEADER.size - KIB
    b.connection.dataReceived(header(20 * KIB) + b"b" * 6 * KIB)  # would need 5 more
    assert b.transport.disconnecting and not a.transport.disconnecting
    [error] = [f for f in b.written_frames() if f.type == ControlType.ERROR]
    assert b"partial-frame-budget of 10240 bytes" in error.payload
    assert shared.budget.used == 8 * KIB - HEADER.size - KIB
    a.connection.dataReceived(frame[8 * KIB : 9 * KIB])
    b.connection.connectionLost()
    assert isinstance(b.receiver.lost[0], ProtocolError)
    a.connection.dataReceived(frame[9 * KIB :])
    assert a.receiver.frames == [Frame(APP, b"a" * 20 * KIB)]
    assert shared.budget.used == 0


@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 6 * KIB), st.booleans()),
        max_size=40,
    )
)
def test_the_total_held_never_exceeds_the_budget(steps):
    budget = PartialFrameBudget(8 * KIB)
    lims = PartialFrameLimits(prelogin_size=KIB, timeout=None, budget=budget)
    held = [HeldBytes(lims) for _ in range(3)]
    sizes = [0, 0, 0]
    for index, size, grows in steps:
        target = sizes[index] + size if grows else max(0, sizes[index] - size)
        try:
            held[index].holding(target, 0.0)
            sizes[index] = target
        except BudgetExhausted:
            sizes[index] = 0  # that connection is closed: it holds nothing more
        assert budget.used <= 8 * KIB
        assert budget.used == sum(h.drawn for h in held)
    for h in held:
        h.release()
    assert budget.used == 0


def test_a_connection_stopped_mid_frame_is_closed_after_the_frame_timeout():
    w = wired(accepting=True, heartbeat_interval=5, ttl=1000, partial_frames=limits(timeout=20))
    w.connection.logged_in()
    w.connection.dataReceived(header(100) + b"x" * 10)
    for _ in range(5):  # it keeps pinging: the TTL would keep it forever
        w.clock.advance(4)
        w.connection.dataReceived(encode_frame(Frame(ControlType.PING, b"")))
    assert not w.transport.disconnecting
    w.clock.advance(6)
    assert w.transport.disconnecting
    [error] = [f for f in w.written_frames() if f.type == ControlType.ERROR]
    assert b"frame-timeout 20s" in error.payload


def test_whole_frames_and_time_not_reading_do_not_count_against_the_frame_timeout():
    w = wired(accepting=True, heartbeat_interval=None, ttl=None, partial_frames=limits(timeout=20))
    w.connection.logged_in()
    w.connection.dataReceived(encode_frame(Frame(APP, b"whole")))
    w.clock.advance(100)
    assert not w.transport.disconnecting
    w.connection.dataReceived(header(100) + b"x" * 10)
    w.connection.pause_reading()  # this side chose not to read: not the peer's fault
    for _ in range(20):
        w.clock.advance(5)
    w.connection.resume_reading()
    w.clock.advance(15)
    assert not w.transport.disconnecting
    w.connection.dataReceived(b"x" * 90)
    w.clock.advance(100)
    assert not w.transport.disconnecting
    assert len(w.receiver.frames) == 2
