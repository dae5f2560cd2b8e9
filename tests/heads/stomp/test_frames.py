"""The sans-IO STOMP codec: what it parses, what it refuses (and how early), escaping per
version, and properties: serialize then parse gives the frame back in every version and
however the bytes are split; random bytes give events or a FrameError, nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.heads.stomp.frames import (
    HEART_BEAT,
    NEED_DATA,
    SERVER_COMMANDS,
    Command,
    Event,
    Frame,
    FrameError,
    FrameParser,
    Limits,
    NeedData,
    Version,
    encodable,
    serialize_bytes,
)


def parse(data: bytes, version: Version | None = None, **limits: int) -> list[Event]:
    parser = FrameParser(Limits(**limits), version=version)
    parser.feed(data)
    events: list[Event] = []
    while not isinstance(event := parser.next_event(), NeedData):
        events.append(event)
    return events


def test_a_frame_with_headers_and_a_body_ending_at_the_nul():
    [frame] = parse(b"SEND\ndestination:/queue/a\nx:1\n\nhello\x00")
    assert frame == Frame(Command.SEND, (("destination", "/queue/a"), ("x", "1")), b"hello")


def test_content_length_bodies_may_hold_nuls():
    [frame] = parse(b"SEND\ncontent-length:5\n\na\x00b\x00c\x00")
    assert frame.body == b"a\x00b\x00c"


def test_crlf_line_endings_and_heart_beats_between_frames():
    events = parse(b"\r\n\nSEND\r\ndestination:/queue/a\r\n\r\nx\x00\n\nDISCONNECT\n\n\x00")
    assert events == [
        HEART_BEAT,
        HEART_BEAT,
        Frame(Command.SEND, (("destination", "/queue/a"),), b"x"),
        HEART_BEAT,
        HEART_BEAT,
        Frame(Command.DISCONNECT),
    ]


def test_several_frames_in_one_chunk_and_one_frame_byte_by_byte():
    data = b"BEGIN\ntransaction:t\n\n\x00COMMIT\ntransaction:t\n\n\x00"
    assert [e.command for e in parse(data)] == ["BEGIN", "COMMIT"]  # type: ignore[union-attr]
    parser = FrameParser()
    events = []
    for index in range(len(data)):
        parser.feed(data[index : index + 1])
        while not isinstance(event := parser.next_event(), NeedData):
            events.append(event)
    assert events == parse(data)
    assert parser.buffered == 0


def test_repeated_headers_keep_their_order_and_the_first_counts():
    [frame] = parse(b"SEND\na:1\na:2\n\n\x00")
    assert frame.headers == (("a", "1"), ("a", "2"))
    assert frame.header("a") == "1" and frame.header_map() == {"a": "1"}


@pytest.mark.parametrize(
    ("version", "wire", "value"),
    [
        (Version.V1_0, "a\\cb\\n", "a\\cb\\n"),  # 1.0 has no escapes
        (Version.V1_1, "a\\cb\\nc\\\\", "a:b\nc\\"),
        (Version.V1_2, "a\\cb\\nc\\\\d\\r", "a:b\nc\\d\r"),
    ],
)
def test_header_escapes_per_version(version, wire, value):
    [frame] = parse(f"SEND\nk\\c{wire}:{wire}\n\n\x00".encode(), version)
    if version is Version.V1_0:
        assert frame.headers == ((f"k\\c{wire}", wire),)
    else:
        assert frame.headers == ((f"k:{value}", value),)


def test_connect_frames_are_never_unescaped():
    [frame] = parse(b"CONNECT\npasscode:a\\cb\n\n\x00", Version.V1_2)
    assert frame.header("passcode") == "a\\cb"


@pytest.mark.parametrize(
    ("data", "version", "message", "detail"),
    [
        (b"HELLO\n\n\x00", None, "unknown command", "b'HELLO' is not a STOMP client command"),
        (b"MESSAGE\n\n\x00", None, "unknown command", "b'MESSAGE' is not a STOMP client command"),
        (b"SEND\nnocolon\n\n\x00", None, "malformed header", "'nocolon' has no colon"),
        (b"SEND\na:\xff\n\n\x00", None, "header not UTF-8", "is not UTF-8"),
        (b"SEND\na:\\t\n\n\x00", Version.V1_2, "malformed header", "'\\\\t' is not an escape"),
        (b"SEND\na:\\r\n\n\x00", Version.V1_1, "malformed header", "of STOMP 1.1"),
        (b"SEND\ncontent-length:x\n\n\x00", None, "malformed content-length", "'x' is not"),
        (b"H\xffLLO\na:\xff\n\n\x00", None, "unknown command", "b'H\\xffLLO' is not"),
        (b"HELLO\r\na:\xff\n\n\x00", None, "unknown command", "b'HELLO\\r' is not"),
        (b"SEND\r\na:\xfe\n\n\x00", None, "header not UTF-8", "'a:\\xfe' is not UTF-8"),
        ("SEND\ncontent-length:\u0661\n\n\x00".encode(), None, "malformed content-length", ""),
        (b"SEND\ncontent-length:" + b"1" * 20 + b"\n\n\x00", None, "malformed content-length", ""),
        (b"SEND\ncontent-length:1\n\nab\x00", None, "malformed frame", "not followed by a NUL"),
        (b"\rX", None, "malformed frame", "carriage return not followed by a line feed"),
    ],
)
def test_malformed_frames_are_named(data, version, message, detail):
    with pytest.raises(FrameError) as raised:
        parse(data, version)
    assert raised.value.message == message
    assert detail in raised.value.detail


def test_an_oversized_body_is_refused_from_its_content_length_before_it_arrives():
    parser = FrameParser(Limits(max_body=10))
    parser.feed(b"SEND\ncontent-length:11\n\n")
    with pytest.raises(FrameError, match="frame body of 11 bytes exceeds the limit of 10"):
        parser.next_event()


def test_an_oversized_body_without_content_length_is_refused_once_past_the_limit():
    parser = FrameParser(Limits(max_body=10))
    parser.feed(b"SEND\n\n" + b"x" * 10)
    assert parser.next_event() is NEED_DATA
    parser.feed(b"x")
    with pytest.raises(FrameError, match="exceeds the limit of 10 bytes"):
        parser.next_event()


def test_headers_are_bounded_in_bytes_and_in_count():
    parser = FrameParser(Limits(max_header_bytes=100))
    parser.feed(b"SEND\n" + b"a:" + b"x" * 100)
    with pytest.raises(FrameError, match="may take at most 100 bytes"):
        parser.next_event()
    with pytest.raises(FrameError, match="SEND frame has 3 headers; at most 2"):
        parse(b"SEND\na:1\nb:2\nc:3\n\n\x00", max_headers=2)


def test_serialized_frames_carry_escapes_per_version_and_bodies_apart():
    frame = Frame(Command.MESSAGE, (("a:b", "c\nd\\"),), b"\x00body")
    assert serialize_bytes(frame, Version.V1_2) == b"MESSAGE\na\\cb:c\\nd\\\\\n\n\x00body\x00"
    with pytest.raises(ValueError, match="line break"):
        serialize_bytes(Frame(Command.MESSAGE, (("a", "b\nc"),)), Version.V1_0)
    with pytest.raises(ValueError, match="carriage return"):
        serialize_bytes(Frame(Command.MESSAGE, (("a", "b\rc"),)), Version.V1_1)
    assert serialize_bytes(Frame(Command.CONNECTED, (("a", "b:c"),)), Version.V1_2) == (
        b"CONNECTED\na:b:c\n\n\x00"
    )


# -- properties -------------------------------------------------------------------------

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)


@st.composite
def frames(draw: st.DrawFn, version: Version) -> Frame:
    command = draw(st.sampled_from(sorted(SERVER_COMMANDS - {Command.CONNECTED})))
    pairs = draw(st.lists(st.tuples(_text, _text), max_size=6))
    pairs = [(k, v) for k, v in pairs if k != "content-length" and encodable(version, k, v)]
    if version is not Version.V1_2:
        # A line end cannot be told from the CR of a CRLF ending before 1.2.
        pairs = [(k, v) for k, v in pairs if not v.endswith("\r")]
    if version is Version.V1_0:
        pairs = [(k, v) for k, v in pairs if k and not k.endswith("\r")]
    body = draw(st.binary(max_size=200))
    if b"\x00" in body or draw(st.booleans()):
        pairs.append(("content-length", str(len(body))))
    return Frame(command, tuple(pairs), body)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@given(data=st.data())
def test_serialize_then_parse_gives_the_frames_back_however_split(data):
    version = data.draw(st.sampled_from(Version))
    sent = data.draw(st.lists(frames(version), min_size=1, max_size=4))
    wire = b"".join(serialize_bytes(frame, version) for frame in sent)
    cuts = data.draw(st.lists(st.integers(min_value=0), max_size=8))
    parser = FrameParser(commands=SERVER_COMMANDS, version=version)
    received = []
    for chunk in _split(wire, cuts):
        parser.feed(chunk)
        while not isinstance(event := parser.next_event(), NeedData):
            received.append(event)
    assert received == sent


@given(frames(Version.V1_2))
def test_a_head_that_needs_no_escape_is_written_as_escaping_would_write_it(frame):
    """1.2 writes a head with nothing to escape as it is, and any other head escaped:
    byte for byte what escaping every name and value gives."""

    def escaped(text: str) -> str:
        return (
            text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace(":", "\\c")
        )

    lines = [frame.command.value, *[f"{escaped(k)}:{escaped(v)}" for k, v in frame.headers]]
    expected = ("\n".join(lines) + "\n\n").encode() + frame.body + b"\x00"
    assert serialize_bytes(frame, Version.V1_2) == expected


@given(st.binary(max_size=500), st.sampled_from([None, *Version]))
def test_random_bytes_give_events_or_a_frame_error(data, version):
    parser = FrameParser(Limits(max_body=100, max_headers=5, max_header_bytes=100))
    parser.version = version
    parser.feed(data)
    try:
        for _ in range(len(data) + 1):
            event = parser.next_event()
            if event is NEED_DATA:
                break
            assert isinstance(event, Frame | type(HEART_BEAT))
    except FrameError as error:
        assert error.message and error.detail
