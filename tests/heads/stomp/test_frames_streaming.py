"""The parser's streamed bodies: a SEND whose content-length reaches ``min_large`` comes
as its head, then its body in chunks as the bytes arrive, never held whole; however the
byte stream is split, the frames and bodies are the same; limits and malformed ends are
refused early, and nothing streams before a version is negotiated."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.heads.stomp.frames import (
    NEED_DATA,
    BodyChunk,
    Command,
    Frame,
    FrameError,
    FrameParser,
    HeartBeat,
    LargeFrame,
    Limits,
    NeedData,
    Version,
    serialize_bytes,
    serialize_head,
)

LIMITS = Limits(max_body=64, min_large=32, max_large=4096)


def events_of(parser: FrameParser, data: bytes) -> list[object]:
    parser.feed(data)
    events: list[object] = []
    while not isinstance(event := parser.next_event(), NeedData):
        events.append(event)
    return events


def test_a_large_send_comes_as_its_head_then_chunks_as_they_arrive():
    parser = FrameParser(LIMITS, version=Version.V1_2)
    head = b"SEND\ndestination:/queue/a\ncontent-length:40\n\n"
    assert events_of(parser, head + b"x" * 10) == [
        LargeFrame(Command.SEND, (("destination", "/queue/a"), ("content-length", "40")), 40),
        BodyChunk(b"x" * 10, False),
    ]
    assert parser.buffered == 0  # nothing of the body kept
    assert events_of(parser, b"y" * 30) == [BodyChunk(b"y" * 30, False)]
    assert events_of(parser, b"\x00\nSEND\n\nsmall\x00") == [
        BodyChunk(b"", True),
        HeartBeat(),
        Frame(Command.SEND, (), b"small"),
    ]


def test_a_chunk_that_ends_the_body_with_its_nul_is_the_last():
    parser = FrameParser(LIMITS, version=Version.V1_2)
    [_, chunk] = events_of(parser, b"SEND\ncontent-length:32\n\n" + b"z" * 32 + b"\x00")
    assert chunk == BodyChunk(b"z" * 32, True)


def test_a_streamed_body_without_its_nul_is_refused():
    parser = FrameParser(LIMITS, version=Version.V1_2)
    events_of(parser, b"SEND\ncontent-length:32\n\n" + b"z" * 32)
    with pytest.raises(FrameError, match="not followed by a NUL"):
        events_of(parser, b"!")


def test_the_streamed_limit_is_refused_from_the_content_length():
    parser = FrameParser(LIMITS, version=Version.V1_2)
    with pytest.raises(FrameError, match="body of 4097 bytes exceeds the limit of 4096 bytes"):
        events_of(parser, b"SEND\ncontent-length:4097\n\n")


@pytest.mark.parametrize(
    ("version", "head"),
    [
        (None, b"SEND\ncontent-length:100\n\n"),  # before CONNECT
        (Version.V1_2, b"SUBSCRIBE\ncontent-length:100\n\n"),  # only a SEND's body streams
    ],
)
def test_only_a_send_after_connect_streams_others_keep_the_frame_limit(version, head):
    parser = FrameParser(LIMITS, version=version)
    with pytest.raises(FrameError, match="body of 100 bytes exceeds the limit of 64 bytes"):
        events_of(parser, head)


def test_without_min_large_nothing_streams():
    parser = FrameParser(Limits(max_body=64, min_large=None), version=Version.V1_2)
    with pytest.raises(FrameError, match="exceeds the limit of 64 bytes"):
        events_of(parser, b"SEND\ncontent-length:65\n\n")


def test_a_streamed_frame_head_serializes_apart_from_its_body():
    frame = Frame(Command.MESSAGE, (("content-length", "3"), ("k", "a:b")))
    head = serialize_head(frame, Version.V1_2)
    assert head + b"abc\x00" == serialize_bytes(
        Frame(frame.command, frame.headers, b"abc"), Version.V1_2
    )


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def _collected(events: list[object]) -> list[object]:
    """Events with each streamed body joined: (head, body) in place of its chunks."""
    joined: list[object] = []
    body: bytearray | None = None
    head: LargeFrame | None = None
    for event in events:
        if isinstance(event, LargeFrame):
            assert body is None
            head, body = event, bytearray()
        elif isinstance(event, BodyChunk):
            assert body is not None
            body += event.data
            if event.last:
                joined.append((head, bytes(body)))
                head, body = None, None
        else:
            assert body is None  # nothing comes between a head and its last chunk
            joined.append(event)
    assert body is None
    return joined


def _sends(bodies: list[bytes]) -> bytes:
    """SEND frames with ``bodies`` and their content-length, as STOMP 1.2 puts them."""
    return b"".join(
        serialize_bytes(Frame(Command.SEND, (("content-length", str(len(b))),), b), Version.V1_2)
        for b in bodies
    )


@given(
    bodies=st.lists(st.binary(max_size=120), min_size=1, max_size=5),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
)
def test_any_split_of_the_byte_stream_gives_the_same_frames_and_bodies(bodies, cuts):
    wire, parser = _sends(bodies), FrameParser(LIMITS, version=Version.V1_2)
    whole = _collected(events_of(FrameParser(LIMITS, version=Version.V1_2), wire))
    pieces: list[object] = []
    for piece in _split(wire, cuts):
        pieces += events_of(parser, piece)
        assert parser.buffered <= LIMITS.max_body + 64  # a small frame at most, no large body
    assert _collected(pieces) == whole
    expected = [
        (LargeFrame(Command.SEND, (("content-length", str(len(b))),), len(b)), b)
        if len(b) >= LIMITS.min_large  # type: ignore[operator]
        else Frame(Command.SEND, (("content-length", str(len(b))),), b)
        for b in bodies
    ]
    assert whole == expected
    assert parser.next_event() is NEED_DATA


@given(
    bodies=st.lists(st.binary(max_size=120), min_size=1, max_size=5),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
    drains=st.lists(st.booleans(), max_size=12),
)
def test_reads_fed_before_the_last_was_parsed_give_the_same_frames(bodies, cuts, drains):
    """Reading paused part-way: several reads come before the events of the first are
    taken, whether or not the parser holds a read's body bytes uncopied."""
    wire, parser = _sends(bodies), FrameParser(LIMITS, version=Version.V1_2)
    whole = _collected(events_of(FrameParser(LIMITS, version=Version.V1_2), wire))
    pieces: list[object] = []
    for index, piece in enumerate(_split(wire, cuts)):
        parser.feed(piece)
        if index >= len(drains) or drains[index]:
            pieces += events_of(parser, b"")
    pieces += events_of(parser, b"")
    assert _collected(pieces) == whole
    assert parser.buffered == 0


def test_missing_is_what_the_body_begun_still_lacks_with_its_nul():
    parser = FrameParser(LIMITS, version=Version.V1_2)
    events_of(parser, b"SEND\ncontent-length:40\n\n" + b"x" * 10)  # streamed
    assert parser.missing == 31
    events_of(parser, b"x" * 30)
    assert parser.missing == 1
    events_of(parser, b"\x00SEND\ncontent-length:20\n\n" + b"y" * 5)  # held whole
    assert parser.missing == 16
    events_of(parser, b"y" * 15 + b"\x00SEND\n")
    assert parser.missing == 0  # (headers: as many as the header limit allows, no more)


def test_a_read_of_body_bytes_alone_is_handed_on_uncopied():
    parser = FrameParser(LIMITS, version=Version.V1_2)
    events_of(parser, b"SEND\ncontent-length:40\n\n" + b"x" * 10)
    read = bytes(b"y" * 30)
    [chunk] = events_of(parser, read)
    assert isinstance(chunk, BodyChunk)
    assert chunk == BodyChunk(read, False) and chunk.data is read
