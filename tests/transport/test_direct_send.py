"""DirectSend: a burst goes straight to an idle plain TCP socket, and whatever the kernel
does not take comes back, in order, for Twisted to send."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import attrs
import pytest
import pytest_twisted
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import reactor
from twisted.internet.abstract import FileDescriptor
from twisted.internet.task import deferLater

from tests.transport.memory import APP, wired
from tests.transport.test_socket_io import connected_pair
from transport.settings import ConnectionSettings
from transport.wire import IOV_MAX, DirectSend


@pytest.fixture
def pair() -> Iterator[tuple[FileDescriptor, socket.socket]]:
    """A Twisted FileDescriptor over one end of a connected socket pair (never given to
    the reactor), and the other end to read from."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    theirs.settimeout(5)
    transport = FileDescriptor(reactor)
    transport.socket = ours
    transport.connected = 1
    yield transport, theirs
    ours.close()
    theirs.close()


def _read(sock: socket.socket, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        out += sock.recv(size - len(out))
    return bytes(out)


@pytest.mark.parametrize(
    "parts",
    [
        [b"head", b"", b"payload" * 100, b"tail"],
        [bytes([i % 251]) * 3 for i in range(IOV_MAX * 2 + 7)],
    ],
    ids=["a-burst", "more-parts-than-one-sendmsg-takes"],
)
def test_an_idle_socket_takes_the_whole_burst_in_order(pair, parts):
    transport, theirs = pair
    direct = DirectSend.beneath(transport)
    assert direct is not None
    assert direct.send(parts) == []
    joined = b"".join(parts)
    assert _read(theirs, len(joined)) == joined


def test_what_the_kernel_does_not_take_comes_back_in_order(pair):
    transport, theirs = pair
    direct = DirectSend.beneath(transport)
    assert direct is not None
    parts = [bytes([i]) * 100_000 for i in range(1, 81)]  # 8 MB: more than the buffers hold
    rest = direct.send(parts)
    assert rest, "the kernel took 8 MB at once: the test proves nothing"
    assert len(b"".join(rest)) < len(b"".join(parts))
    joined = b"".join(parts)
    sent = len(joined) - len(b"".join(rest))
    assert _read(theirs, sent) == joined[:sent]
    assert b"".join(rest) == joined[sent:]


@pytest.mark.parametrize(
    "state",
    [
        {"dataBuffer": b"held", "offset": 0},
        {"_tempDataLen": 4},
        {"connected": 0},
        {"disconnecting": 1},
    ],
    ids=["twisted-is-sending", "twisted-holds-a-sequence", "not-connected", "disconnecting"],
)
def test_nothing_goes_direct_unless_twisted_is_idle_and_connected(pair, state):
    transport, theirs = pair
    direct = DirectSend.beneath(transport)
    assert direct is not None
    for name, value in state.items():
        setattr(transport, name, value)
    parts = [b"must", b"wait"]
    assert direct.send(parts) is parts
    theirs.setblocking(False)
    with pytest.raises(BlockingIOError):
        theirs.recv(10)


def test_a_failing_socket_sends_nothing_and_leaves_the_error_to_twisted(pair):
    transport, theirs = pair
    direct = DirectSend.beneath(transport)
    assert direct is not None
    theirs.close()
    parts = [b"lost", b"cause"]
    assert direct.send(parts) == parts


def test_only_a_plain_stream_socket_transport_is_sent_to_directly():
    assert DirectSend.beneath(object()) is None
    transport = FileDescriptor(reactor)
    assert DirectSend.beneath(transport) is None  # no socket
    datagram = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        transport.socket = datagram
        assert DirectSend.beneath(transport) is None
    finally:
        datagram.close()


def test_an_in_memory_transport_is_written_to_as_before():
    connection = wired().connection
    assert connection.writer.direct is None


@attrs.define
class _Kernel:
    """A socket whose sendmsg takes the next of ``takes`` bytes (then everything)."""

    takes: list[int]
    received: bytearray = attrs.Factory(bytearray)

    def sendmsg(self, buffers: list[bytes]) -> int:
        size = sum(map(len, buffers))
        take = min(self.takes.pop(0), size) if self.takes else size
        if take == 0 and size:
            raise BlockingIOError
        self.received += b"".join(buffers)[:take]
        return take


@given(
    sizes=st.lists(st.integers(0, 50), max_size=IOV_MAX + 40),
    takes=st.lists(st.integers(0, 3000), max_size=4),
)
def test_sent_and_returned_bytes_are_the_burst_exactly(sizes, takes):
    transport = FileDescriptor(reactor)
    transport.connected = 1
    kernel = _Kernel(list(takes))
    direct = DirectSend(transport, kernel)  # type: ignore[arg-type]
    parts = [bytes([i % 256]) * size for i, size in enumerate(sizes)]
    rest = direct.send(parts)
    joined = b"".join(parts)
    assert bytes(kernel.received) + b"".join(rest) == joined
    if not takes:
        assert rest == []


@pytest.mark.parametrize("scheme", ["tcp", "tls"])
@pytest_twisted.ensureDeferred
async def test_a_live_connection_sends_directly_only_on_plain_tcp(scheme, certs):
    payloads = [bytes([i]) * (i * 1000) for i in range(1, 200)]
    connected = await connected_pair(scheme, certs, ConnectionSettings(), payloads[0])
    client, server = connected.client, connected.server
    try:
        assert client.connection is not None
        assert (client.connection.writer.direct is not None) is (scheme == "tcp")
        for payload in payloads[1:]:
            client.connection.send(APP, payload)
        for _ in range(500):  # 5 s at most
            if len(server.frames) == len(payloads):
                break
            await deferLater(reactor, 0.01, lambda: None)
        assert [frame.payload for frame in server.frames] == payloads
    finally:
        await connected.close()
