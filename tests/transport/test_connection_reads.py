"""Reading on a framed connection: delivery, inbound pause, and bad input."""

from __future__ import annotations

import logging

import pytest
from twisted.logger import LegacyLogObserverWrapper, globalLogPublisher
from twisted.python.log import PythonLoggingObserver

from tests.transport.memory import APP, wired
from transport.errors import PeerError, ProtocolError
from transport.frames import ControlType, Frame, FrameDecoder, encode_frame


def _stream(*payloads: bytes) -> bytes:
    return b"".join(encode_frame(Frame(APP, p)) for p in payloads)


def test_frames_are_delivered_in_order_and_pings_are_not():
    w = wired()
    w.connection.dataReceived(_stream(b"a") + encode_frame(Frame(ControlType.PING, b"")))
    w.connection.dataReceived(_stream(b"b", b"c"))
    assert [f.payload for f in w.receiver.frames] == [b"a", b"b", b"c"]


def test_pause_reading_holds_decoded_frames_and_stops_the_transport():
    w = wired()

    def pause_after_first(frame: Frame) -> None:
        w.receiver.frames.append(frame)
        w.connection.pause_reading()

    w.receiver.frame_received = pause_after_first  # type: ignore[method-assign]
    w.connection.dataReceived(_stream(b"1", b"2", b"3"))
    assert [f.payload for f in w.receiver.frames] == [b"1"]
    assert w.transport.producerState == "paused"

    w.receiver.frame_received = w.receiver.frames.append  # type: ignore[method-assign]
    w.connection.resume_reading()
    assert [f.payload for f in w.receiver.frames] == [b"1", b"2", b"3"]
    assert w.transport.producerState == "producing"


def test_frames_arriving_while_paused_wait_for_resume():
    w = wired()
    w.connection.pause_reading()
    w.connection.dataReceived(_stream(b"x"))
    assert w.receiver.frames == []
    w.connection.resume_reading()
    assert [f.payload for f in w.receiver.frames] == [b"x"]


def test_a_protocol_error_delivers_valid_frames_then_sends_an_error_and_closes():
    w = wired()
    w.connection.dataReceived(_stream(b"ok") + b"GET / HTTP/1.1\r\n")
    assert [f.payload for f in w.receiver.frames] == [b"ok"]
    sent = FrameDecoder().feed(w.transport.value())
    assert sent[-1].type == ControlType.ERROR
    assert sent[-1].payload.startswith(b"not a txbridge frame")
    assert w.transport.disconnecting
    w.connection.dataReceived(_stream(b"ignored"))
    w.connection.connectionLost()
    assert len(w.receiver.frames) == 1
    assert isinstance(w.receiver.lost[0], ProtocolError)


def test_an_error_frame_from_the_peer_closes_with_its_message():
    w = wired()
    w.connection.dataReceived(encode_frame(Frame(ControlType.ERROR, b"you are not welcome")))
    assert w.transport.disconnecting
    w.connection.connectionLost()
    (reason,) = w.receiver.lost
    assert isinstance(reason, PeerError)
    assert "you are not welcome" in str(reason)


def test_a_receiver_that_fails_gets_its_connection_closed_not_the_process():
    w = wired()

    def broken(frame: Frame) -> None:
        raise KeyError("bug")

    w.receiver.frame_received = broken  # type: ignore[method-assign]
    w.connection.dataReceived(_stream(b"boom"))
    sent = FrameDecoder().feed(w.transport.value())
    assert sent[-1] == Frame(ControlType.ERROR, b"internal error while handling a frame")
    assert w.transport.disconnecting


def test_a_stream_cut_inside_a_frame_is_reported_when_the_connection_ends():
    w = wired()
    w.connection.dataReceived(_stream(b"whole")[:-2])
    w.connection.connectionLost()
    (reason,) = w.receiver.lost
    assert isinstance(reason, ProtocolError)
    assert "connection closed inside a frame" in str(reason)


def test_when_lost_fires_with_the_reason():
    w = wired()
    waiting = w.connection.when_lost()
    w.connection.connectionLost()
    assert waiting.called
    assert w.connection.when_lost().called


def test_the_peer_is_host_colon_port_with_ipv6_in_brackets():
    from twisted.internet.address import IPv4Address, IPv6Address
    from twisted.internet.task import Clock
    from twisted.internet.testing import StringTransport

    from tests.transport.memory import Recorder
    from transport.connection import FrameConnection

    for address, expected in [
        (IPv4Address("TCP", "10.1.2.3", 5000), "10.1.2.3:5000"),
        (IPv6Address("TCP", "2001:db8::7", 41000), "[2001:db8::7]:41000"),
    ]:
        connection = FrameConnection(Recorder(), Clock())
        connection.makeConnection(StringTransport(peerAddress=address))
        assert connection.peer == expected
        connection.connectionLost()


@pytest.mark.parametrize(
    ("data", "line", "text"),
    [
        (
            encode_frame(Frame(ControlType.ERROR, b"the node is shutting down")),
            "reported an error",
            "the node is shutting down",
        ),
        (b"GET / HTTP/1.1\r\n", "protocol error from", "not a txbridge frame"),
    ],
)
def test_what_a_peer_did_wrong_reaches_python_logging_in_words(data, line, text, caplog):
    """Python logging gets Twisted's events through the legacy observer (crochet sets it up
    for the blocking client): their text must survive it, not come out as ``()``."""
    wrapped = LegacyLogObserverWrapper(PythonLoggingObserver().emit)
    globalLogPublisher.addObserver(wrapped)
    caplog.set_level(logging.INFO, logger="twisted")
    try:
        wired().connection.dataReceived(data)
    finally:
        globalLogPublisher.removeObserver(wrapped)
    [logged] = [r.getMessage() for r in caplog.records if line in r.getMessage()]
    assert text in logged
