"""Repeated heads: the parser reuses its last head's parse when the next head has the
same bytes, and only under the same version and limits, so a stream parses exactly as if
every frame were parsed afresh."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.heads.stomp.frames import (
    SERVER_COMMANDS,
    Command,
    Frame,
    FrameError,
    FrameParser,
    LargeFrame,
    Limits,
    Version,
    serialize_bytes,
)
from tests.heads.stomp.test_frames import frames
from tests.heads.stomp.test_frames_streaming import events_of


def afresh(data: bytes, version: Version | None, limits: Limits) -> list[object]:
    return events_of(FrameParser(limits, commands=SERVER_COMMANDS, version=version), data)


@given(data=st.data())
def test_a_stream_of_repeated_heads_parses_as_each_frame_alone(data):
    version = data.draw(st.sampled_from(Version))
    distinct = data.draw(st.lists(frames(version), min_size=1, max_size=3))
    picks = data.draw(st.lists(st.integers(0, len(distinct) - 1), min_size=1, max_size=8))
    sent = [distinct[pick] for pick in picks]
    limits = Limits()
    parser = FrameParser(limits, commands=SERVER_COMMANDS, version=version)
    received = events_of(parser, b"".join(serialize_bytes(frame, version) for frame in sent))
    expected = [
        event
        for frame in sent
        for event in afresh(serialize_bytes(frame, version), version, limits)
    ]
    assert received == expected == sent


def test_the_same_head_under_another_version_is_unescaped_by_that_version():
    frame = b"SEND\ndestination:/queue/a\\nb\n\nx\x00"
    parser = FrameParser(version=Version.V1_0)
    assert events_of(parser, frame) == [
        Frame(Command.SEND, (("destination", "/queue/a\\nb"),), b"x")
    ]
    parser.version = Version.V1_2
    assert events_of(parser, frame)[0].headers == (("destination", "/queue/a\nb"),)
    parser.version = Version.V1_0
    assert events_of(parser, frame)[0].headers == (("destination", "/queue/a\\nb"),)


def test_the_same_head_under_other_limits_is_checked_against_them():
    head = b"SEND\ncontent-length:100\n\n"
    frame = head + b"z" * 100 + b"\x00"
    parser = FrameParser(Limits(max_body=200, min_large=None), version=Version.V1_2)
    assert [type(event) for event in events_of(parser, frame)] == [Frame]
    parser.limits = Limits(max_body=64, min_large=64, max_large=4096)
    assert events_of(parser, frame)[0] == LargeFrame(
        Command.SEND, (("content-length", "100"),), 100
    )
    parser = FrameParser(Limits(max_body=200, min_large=None), version=Version.V1_2)
    events_of(parser, frame)
    parser.limits = Limits(max_body=64, min_large=None)
    with pytest.raises(FrameError, match="body of 100 bytes exceeds the limit of 64 bytes"):
        events_of(parser, frame)
