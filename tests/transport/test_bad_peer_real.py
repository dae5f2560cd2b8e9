"""A peer that sends garbage on a real socket gets an error frame and is closed; the
listener goes on serving everyone else."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol

from tests.transport.memory import APP, Recorder
from transport.endpoints import connect, listen
from transport.errors import ProtocolError
from transport.frames import ControlType, FrameDecoder


class RawClient(Protocol):
    """A plain socket client: sends what it is told, keeps what it gets."""

    def __init__(self) -> None:
        self.received = b""
        self.lost: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: object = None) -> None:
        self.lost.callback(None)


class Echo(Recorder):
    def frame_received(self, frame):  # type: ignore[no-untyped-def]
        super().frame_received(frame)
        assert self.connection is not None
        self.connection.send(APP, frame.payload)


@pytest_twisted.ensureDeferred
async def test_garbage_closes_only_its_own_connection():
    servers: list[Echo] = []

    def make() -> Echo:
        servers.append(Echo())
        return servers[-1]

    port = await listen(reactor, "tcp://127.0.0.1:0", make, accepted_types=[APP])
    address = port.getHost()
    try:
        good_receiver = Recorder()
        good = await connect(
            reactor, f"tcp://127.0.0.1:{address.port}", good_receiver, accepted_types=[APP]
        )
        bad = RawClient()
        await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", address.port), bad)
        assert bad.transport is not None
        bad.transport.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await bad.lost

        pings, error = FrameDecoder().feed(bad.received)  # the node's first ping, its ask
        assert pings.type == ControlType.PING
        assert error.type == ControlType.ERROR
        assert error.payload.startswith(b"not a txbridge frame: stream starts b'GET / HTTP/1.1")
        bad_server = next(s for s in servers if s.lost)
        assert isinstance(bad_server.lost[0], ProtocolError)

        # The other connection is untouched and still served.
        good.send(APP, b"still here")
        echoed = Deferred()
        good_receiver.frame_received = lambda frame: echoed.callback(frame.payload)  # type: ignore[method-assign]
        assert await echoed == b"still here"
        good.close()
        await good.when_lost()
        for server in servers:
            assert server.connection is not None
            await server.connection.when_lost()
    finally:
        await port.stopListening()
