"""The frame codec on worked examples: layout, splitting, and each kind of bad input."""

from __future__ import annotations

import pytest

from transport.errors import ProtocolError
from transport.frames import (
    HEADER_SIZE,
    ControlType,
    Frame,
    FrameDecoder,
    FramingError,
    encode,
    encode_frame,
)

APP = 16


def test_header_layout():
    header, payload = encode(APP, b"abc")
    assert header == b"TX\x01\x10\x00\x00\x00\x03"
    assert payload == b"abc"
    assert len(header) == HEADER_SIZE


def test_several_frames_in_one_chunk_and_one_frame_across_many():
    frames = [Frame(APP, b"one"), Frame(ControlType.PING, b""), Frame(APP, b"x" * 1000)]
    stream = b"".join(encode_frame(f) for f in frames)
    assert FrameDecoder([APP]).feed(stream) == frames
    decoder = FrameDecoder([APP])
    out = []
    for i in range(len(stream)):
        out.extend(decoder.feed(stream[i : i + 1]))
    assert out == frames
    assert decoder.buffered == 0
    decoder.end_of_stream()


def test_empty_feed_returns_nothing():
    assert FrameDecoder().feed(b"") == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", "not a txbridge frame: stream starts b'GET / HTTP/1.1\\r\\n'"),
        (b"X", "not a txbridge frame"),
        (b"TX\x02\x10\x00\x00\x00\x00", "unsupported protocol version 2 (this side speaks 1)"),
        (b"TX\x01\x63\x00\x00\x00\x00", "unknown frame type 99"),
        (b"TX\x01\x10\xff\xff\xff\xff", "frame of 4294967295 bytes exceeds the maximum"),
    ],
)
def test_bad_headers_name_what_was_wrong(data, message):
    with pytest.raises(ProtocolError) as caught:
        FrameDecoder([APP]).feed(data)
    assert message in str(caught.value)


def test_the_error_keeps_frames_decoded_before_it():
    good = encode_frame(Frame(APP, b"kept"))
    decoder = FrameDecoder([APP])
    with pytest.raises(FramingError) as caught:
        decoder.feed(good + b"garbage!")
    assert caught.value.frames == (Frame(APP, b"kept"),)
    with pytest.raises(ProtocolError):
        decoder.feed(good)


def test_oversize_is_refused_at_the_header_before_the_payload_arrives():
    decoder = FrameDecoder([APP], max_frame_size=1024)
    with pytest.raises(ProtocolError, match="1025 bytes exceeds the maximum frame size of 1024"):
        decoder.feed(b"TX\x01\x10\x00\x00\x04\x01")


def test_a_frame_of_exactly_the_maximum_is_fine():
    decoder = FrameDecoder([APP], max_frame_size=1024)
    assert decoder.feed(encode_frame(Frame(APP, b"z" * 1024))) == [Frame(APP, b"z" * 1024)]


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (b"TX\x01", "3 of 8 bytes of the header"),
        (b"TX\x01\x10\x00\x00\x00\x05ab", "2 of 5 bytes of the payload"),
    ],
)
def test_truncated_stream_is_reported_at_the_end(tail, message):
    decoder = FrameDecoder([APP])
    decoder.feed(tail)
    with pytest.raises(ProtocolError, match=message):
        decoder.end_of_stream()


def test_invalid_maximum_is_refused():
    with pytest.raises(ValueError, match="max_frame_size"):
        FrameDecoder(max_frame_size=0)


def test_application_types_must_not_collide_with_the_transports():
    with pytest.raises(ValueError, match=r"frame types \[2, 300\] are not application types"):
        FrameDecoder([2, 16, 300])
