"""StreamConnection: what the framed and the STOMP connections share, on a toy framing
(lines), so each rule is seen apart from either protocol."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.abstract import FileDescriptor
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from transport.stream import FRAME_READ_LIMIT, StreamConnection, StreamSettings


class Lines(StreamConnection):
    """Lines in; what it was told kept for the test."""

    def __init__(self, clock: Clock, stream: StreamSettings, ttl: float | None) -> None:
        super().__init__(clock, stream, ttl)
        self.buffer = b""
        self.lines: list[bytes] = []
        self.silences: list[float] = []
        self.frame_lacks = 0
        """What ``_missing`` says: bytes still to come of a frame begun."""

    def _announce(self) -> None:
        self._out.changes_to_announce()

    def _bytes_received(self, data: bytes) -> None:
        self.buffer += data
        self._read_on()

    def _read_on(self) -> None:
        while b"\n" in self.buffer and not self._paused:
            line, self.buffer = self.buffer.split(b"\n", 1)
            self.lines.append(line)

    def _missing(self) -> int:
        return self.frame_lacks

    def _discard_buffered(self) -> None:
        self.buffer = b""

    def _silent(self, silent: float, limit: float) -> None:
        self.silences.append(silent)

    def _frame_overdue(self, why: str) -> None:
        raise AssertionError("no frame timeout in these tests")

    def pause(self, reason: str) -> None:
        self._pause(reason)

    def resume(self, reason: str) -> None:
        self._resume(reason)

    def close(self) -> None:
        self._close_stream()


def connected(
    clock: Clock, ttl: float | None = None, close_timeout: float | None = None
) -> tuple[Lines, StringTransport]:
    connection = Lines(clock, StreamSettings(close_timeout=close_timeout), ttl)
    wire = StringTransport()
    connection.makeConnection(wire)
    return connection, wire


@given(
    st.lists(
        st.tuples(st.sampled_from(["pause", "resume"]), st.sampled_from(["a", "b", "c"])),
        max_size=40,
    )
)
def test_reading_is_paused_while_any_reason_still_holds_it(
    steps: list[tuple[str, str]],
) -> None:
    """Each reason counts its own pauses; a resume by a reason that holds nothing is
    ignored, and the socket is paused exactly while some reason holds it."""
    connection, wire = connected(Clock())
    held = {"a": 0, "b": 0, "c": 0}
    for step, reason in steps:
        if step == "pause":
            connection.pause(reason)
            held[reason] += 1
        else:
            connection.resume(reason)
            held[reason] = max(0, held[reason] - 1)
        paused = any(held.values())
        assert bool(connection._paused) is paused
        assert wire.producerState == ("paused" if paused else "producing")


def test_lines_read_while_paused_are_handed_on_when_the_last_reason_resumes() -> None:
    connection, _ = connected(Clock())
    connection.pause("a")
    connection.pause("b")
    connection.dataReceived(b"one\ntwo\n")
    assert connection.lines == []
    connection.resume("a")
    assert connection.lines == []
    connection.resume("b")
    assert connection.lines == [b"one", b"two"]


def test_a_silent_peer_is_dropped_after_the_ttl_but_not_while_this_side_does_not_read() -> None:
    clock = Clock()
    connection, wire = connected(clock, ttl=4.0)
    connection.pause("busy")
    clock.advance(1.0)
    for _ in range(20):  # 20 s without reading: not the peer's silence
        clock.advance(1.0)
    assert connection.silences == [] and not wire.disconnecting
    connection.resume("busy")
    for _ in range(4):
        clock.advance(1.0)
    assert connection.silences == []
    clock.advance(1.0)
    assert connection.silences == [5.0]
    assert wire.disconnected  # aborted: nothing more is sent to a dead peer


def test_a_closing_connection_is_cut_after_the_close_timeout() -> None:
    clock = Clock()
    connection, wire = connected(clock, close_timeout=10.0)
    connection.pause("busy")
    connection.close()
    assert wire.disconnecting and wire.producerState == "producing"  # listens for the end
    clock.advance(9.9)
    assert not wire.disconnected
    clock.advance(0.1)
    assert wire.disconnected


def test_without_a_close_timeout_a_closing_connection_waits_for_its_peer() -> None:
    clock = Clock()
    connection, wire = connected(clock)
    connection.close()
    clock.advance(3600.0)
    assert wire.disconnecting and not wire.disconnected


def test_when_the_connection_is_lost_its_timers_and_partial_bytes_go() -> None:
    clock = Clock()
    connection, _ = connected(clock, ttl=4.0, close_timeout=10.0)
    connection.dataReceived(b"half a li")
    connection.close()
    connection._stream_lost()
    assert connection.buffer == b""
    assert clock.getDelayedCalls() == []


def test_reads_grow_to_what_a_frame_lacks_and_shrink_once_it_is_whole():
    connection = Lines(Clock(), StreamSettings(read_size=4096), None)
    wire = StringTransport()
    socket = wire.transport = FileDescriptor()  # what a TCP transport is, beneath the wire
    connection.makeConnection(wire)
    sizes = []
    for lacks in (0, 4096, 100_000, 5 * FRAME_READ_LIMIT, 10, 0):
        connection.frame_lacks = lacks
        connection.dataReceived(b"x")
        sizes.append(socket.bufferSize)
    assert sizes == [4096, 4096, 100_000, FRAME_READ_LIMIT, 4096, 4096]
