"""The STOMP relay, the ceiling of the peers benchmark: its frame reader gives back the
frames written, however the bytes are cut into reads; and stomp.py clients pass messages,
large and small, through one relay and through two, each whole and in order."""

from __future__ import annotations

import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
import stomp
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.node_throughput import Child
from benchmarks.stomp_relay import CHUNK, Frames
from tests.processes import ROOT


class Reads:
    """Bytes handed out in reads of the given sizes (then whatever is left), then EOF."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data = data
        self.sizes = iter(sizes)

    def recv_into(self, buffer: memoryview) -> int:
        size = min(len(buffer), len(self.data), next(self.sizes, len(self.data)) or 1)
        buffer[:size] = self.data[:size]
        self.data = self.data[size:]
        return size


header_text = st.text(
    alphabet=st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=8
)
frame = st.tuples(
    st.sampled_from([b"SEND", b"SUBSCRIBE", b"CONNECT"]),
    st.lists(st.tuples(header_text, header_text), max_size=3),
    st.binary(max_size=3000),
    st.booleans(),
    st.sampled_from([b"", b"\n", b"\r\n\n"]),
)


def encode(command: bytes, headers: list[tuple[str, str]], body: bytes, length: bool) -> bytes:
    lines = [command, *(f"{name}:{value}".encode() for name, value in headers)]
    if length:
        lines.append(b"content-length:%d" % len(body))
    return b"\n".join(lines) + b"\n\n" + body + b"\0"


@given(st.lists(frame, max_size=6), st.lists(st.integers(1, 5000), max_size=30))
def test_the_reader_gives_back_each_frame_however_the_reads_cut_it(
    frames: list[tuple[bytes, list[tuple[str, str]], bytes, bool, bytes]], sizes: list[int]
) -> None:
    """A body without ``content-length`` ends at its first NUL (as STOMP says); the EOLs
    between frames are heart-beats, skipped."""
    wire = b"".join(eol + encode(c, h, b, n) for c, h, b, n, eol in frames)
    reader = Frames(Reads(wire, sizes), lambda: None)
    for command, headers, body, length, _ in frames:
        got_command, got_headers, _ = reader.head()
        assert got_command == command
        expected = {}
        for name, value in headers:
            expected.setdefault(name.encode(), value.encode())
        if length:
            expected.setdefault(b"content-length", b"%d" % len(body))
        assert got_headers == expected
        got_body = b"".join(bytes(piece) for piece in reader.body(got_headers))
        assert got_body == (body if length else body.split(b"\0")[0])
        if not length and b"\0" in body:
            return  # the rest of that body reads as garbage frames: STOMP's own rule


def test_headers_longer_than_the_buffer_are_refused() -> None:
    reader = Frames(Reads(b"SEND\nx:" + b"y" * CHUNK, []), lambda: None)
    with pytest.raises(ValueError, match="headers are over"):
        reader.head()


def _relay(stack: ExitStack, tmp_path: Path, name: str, *forward: str) -> int:
    """A relay process (passing SENDs on to ``--forward PORT``, if given): its port."""
    relay = Child(
        f"the {name}",
        [sys.executable, "-m", "benchmarks.stomp_relay", *forward],
        ROOT,
        tmp_path / f"{name}.stderr",
    )
    stack.callback(relay.stop)
    return int(relay.event("listening", time.monotonic() + 30)["port"])


class Received(stomp.ConnectionListener):  # type: ignore[misc]
    """The bodies a consumer got (in stomp.py's thread); ``done`` once ``count`` came."""

    def __init__(self, count: int) -> None:
        self.bodies: list[bytes] = []
        self.count = count
        self.done = threading.Event()

    def on_message(self, frame: stomp.utils.Frame) -> None:
        self.bodies.append(frame.body)
        if len(self.bodies) == self.count:
            self.done.set()


@pytest.mark.system
@pytest.mark.timeout(120)
@pytest.mark.parametrize("hops", [1, 2])
def test_stomp_clients_pass_messages_through_the_relay(tmp_path: Path, hops: int) -> None:
    bodies = [b"%d:" % n + bytes([n % 251]) * size for n, size in enumerate([10, 0, 3 << 20, 5])]
    with ExitStack() as stack:
        consume_port = produce_port = _relay(stack, tmp_path, "relay B")
        if hops == 2:
            produce_port = _relay(stack, tmp_path, "relay A", "--forward", str(consume_port))
        consumer = stomp.Connection12([("127.0.0.1", consume_port)], auto_decode=False)
        producer = stomp.Connection12([("127.0.0.1", produce_port)], auto_decode=False)
        # (registered after the relays, so run before they stop)
        stack.callback(consumer.disconnect)
        stack.callback(producer.disconnect)
        received = Received(len(bodies))
        consumer.set_listener("received", received)
        consumer.connect(wait=True)
        consumer.subscribe("/queue/q", id="s1", ack="auto")
        producer.connect(wait=True)
        for body in bodies:
            producer.send("/queue/q", body, headers={"persistent": "true"})
        assert received.done.wait(60), f"{len(received.bodies)} of {len(bodies)} arrived"
        assert received.bodies == bodies
