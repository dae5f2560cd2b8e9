"""Properties of the frame codec: round trips, and garbage that never does worse than
ProtocolError or allocates past the maximum frame size."""

from __future__ import annotations

import tracemalloc

from hypothesis import given
from hypothesis import strategies as st

from transport.errors import ProtocolError
from transport.frames import HEADER_SIZE, ControlType, Frame, FrameDecoder, encode_frame

APP_TYPES = list(range(16, 40))
MAX = 4096

frame_types = st.sampled_from([*APP_TYPES, *ControlType])
frames = st.builds(Frame, frame_types, st.binary(max_size=MAX))


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks, start = [], 0
    for point in [*points, len(data)]:
        chunks.append(data[start:point])
        start = point
    return chunks


@given(st.lists(frames, max_size=20), st.lists(st.integers(min_value=0), max_size=30))
def test_round_trip_of_every_frame_type_however_split(sent, cuts):
    stream = b"".join(encode_frame(f) for f in sent)
    decoder = FrameDecoder(APP_TYPES, max_frame_size=MAX)
    received = []
    for chunk in _split(stream, cuts):
        received.extend(decoder.feed(chunk))
    assert received == sent
    decoder.end_of_stream()


def _decode_all(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(APP_TYPES, max_frame_size=MAX)
    try:
        for chunk in chunks:
            decoder.feed(chunk)
        decoder.end_of_stream()
    except ProtocolError:
        pass


def _peak_while(function, *args) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        function(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# Slack for the decoder's own objects (deque, memoryviews, the Frame list).
OVERHEAD = 16 * 1024


@given(st.lists(st.binary(max_size=512), max_size=20))
def test_random_bytes_raise_only_protocol_error_and_stay_bounded(chunks):
    peak = _peak_while(_decode_all, chunks)
    assert peak <= MAX + sum(map(len, chunks)) + OVERHEAD


@given(
    st.lists(frames, min_size=1, max_size=8),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=8),
    st.lists(st.integers(min_value=0), max_size=10),
)
def test_mutated_streams_raise_only_protocol_error_and_stay_bounded(sent, mutations, cuts):
    stream = bytearray(b"".join(encode_frame(f) for f in sent))
    for position, value in mutations:
        stream[position % len(stream)] = value
    chunks = _split(bytes(stream), cuts)
    peak = _peak_while(_decode_all, chunks)
    assert peak <= MAX + len(stream) + OVERHEAD


@given(st.integers(min_value=MAX + 1, max_value=2**32 - 1))
def test_a_hostile_length_allocates_nothing_for_its_payload(length):
    header = b"TX\x01\x10" + length.to_bytes(4, "big")
    peak = _peak_while(_decode_all, [header])
    assert peak <= OVERHEAD


def _lacking(sent: list[Frame], position: int) -> int:
    """What the decoder lacks after ``position`` bytes of ``sent``'s stream: the rest of the
    header begun, else of the payload begun, else nothing."""
    start = 0
    for frame in sent:
        end = start + HEADER_SIZE + len(frame.payload)
        if start < position < end:
            into = position - start
            return HEADER_SIZE - into if into < HEADER_SIZE else end - position
        start = end
    return 0


@given(st.lists(frames, min_size=1, max_size=10), st.lists(st.integers(min_value=0), max_size=30))
def test_missing_is_what_the_frame_begun_still_lacks(sent, cuts):
    stream = b"".join(encode_frame(f) for f in sent)
    decoder = FrameDecoder(APP_TYPES, max_frame_size=MAX)
    position = 0
    for chunk in _split(stream, cuts):
        decoder.feed(chunk)
        position += len(chunk)
        assert decoder.missing == _lacking(sent, position)
