"""Socket settings on real sockets: ``io_size`` sets what a connection reads and sends per
call, ``read_size`` what it reads, ``tcp_no_delay`` whether Nagle's algorithm holds small
frames back, on plain TCP and beneath TLS."""

from __future__ import annotations

import socket
from typing import Any

import attrs
import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.abstract import FileDescriptor
from twisted.internet.interfaces import IListeningPort
from twisted.internet.task import deferLater

from tests.transport.memory import APP, Recorder
from transport.endpoints import connect, listen
from transport.settings import ConnectionSettings
from transport.wire import socket_beneath

KIB = 1024


def _socket_of(receiver: Recorder) -> FileDescriptor:
    """The TCP transport beneath a connection (beneath TLS too)."""
    assert receiver.connection is not None
    inner = socket_beneath(getattr(receiver.connection, "transport", None))
    assert inner is not None, "no socket beneath the connection"
    return inner


@attrs.define
class ConnectedPair:
    """A listening server with the connection it accepted, and the client's end."""

    port: IListeningPort
    server: Recorder
    client: Recorder

    async def close(self) -> None:
        if self.client.connection is not None:
            self.client.connection.close()
            await self.client.connection.when_lost()
        await self.port.stopListening()


async def connected_pair(
    scheme: str, certs: Any, settings: ConnectionSettings, payload: bytes
) -> ConnectedPair:
    """A server on ``settings`` and a client on the defaults, once the server has the
    client's first frame, ``payload``."""
    accepted: list[Recorder] = []

    def make() -> Recorder:
        accepted.append(Recorder())
        return accepted[-1]

    port = await listen(
        reactor,
        f"{scheme}://127.0.0.1:0",
        make,
        settings=settings,
        accepted_types=[APP],
        tls=certs.server_tls() if scheme == "tls" else None,
    )
    client = Recorder()
    await connect(
        reactor,
        f"{scheme}://127.0.0.1:{port.getHost().port}",
        client,
        accepted_types=[APP],
        tls=certs.client_tls() if scheme == "tls" else None,
    )
    assert client.connection is not None
    client.connection.send(APP, payload)
    for _ in range(500):  # 5 s at most
        if accepted and accepted[0].frames:
            return ConnectedPair(port, accepted[0], client)
        await deferLater(reactor, 0.01, lambda: None)
    await ConnectedPair(port, Recorder(), client).close()
    raise AssertionError("the server did not get the client's frame")


@pytest.mark.parametrize("scheme", ["tcp", "tls"])
@pytest_twisted.ensureDeferred
async def test_a_server_reads_its_read_size_and_sends_its_io_size(scheme, certs):
    settings = ConnectionSettings(io_size=256 * KIB, read_size=32 * KIB)
    pair = await connected_pair(scheme, certs, settings, b"x" * 100 * KIB)
    try:
        server_socket = _socket_of(pair.server)
        assert (server_socket.bufferSize, server_socket.SEND_LIMIT) == (32 * KIB, 256 * KIB)
        assert pair.server.frames[0].payload == b"x" * 100 * KIB  # read in four calls
        client_socket = _socket_of(pair.client)
        assert (client_socket.bufferSize, client_socket.SEND_LIMIT) == (256 * KIB, 256 * KIB)
    finally:
        await pair.close()


def _no_delay(receiver: Recorder) -> bool:
    """Whether the kernel has Nagle's algorithm off on the connection's socket."""
    handle = _socket_of(receiver).getHandle()
    return bool(handle.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


@pytest.mark.parametrize("scheme", ["tcp", "tls"])
@pytest.mark.parametrize("server_no_delay", [True, False])
@pytest_twisted.ensureDeferred
async def test_sockets_send_small_frames_at_once_unless_told_not_to(scheme, server_no_delay, certs):
    pair = await connected_pair(
        scheme, certs, ConnectionSettings(tcp_no_delay=server_no_delay), b"ping"
    )
    try:
        assert _no_delay(pair.server) is server_no_delay
        assert _no_delay(pair.client)  # the default
    finally:
        await pair.close()


def test_a_read_size_below_a_page_is_refused():
    with pytest.raises(ValueError, match="read_size must be at least 4096 bytes, got 100"):
        ConnectionSettings(read_size=100)
