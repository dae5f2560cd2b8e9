"""Connecting by URL: an address literal is connected to directly, so a refused connect
fails the attempt at once (HostnameEndpoint would hold it for its attempt delay), which a
client failing over between node addresses would pay on every try; an address that never
answers fails it at the URL's ``connect-timeout-millis``."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.error import ConnectionRefusedError, TimeoutError
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from tests.forward.conftest import eventually
from transport.endpoints import client_endpoint
from transport.failover import FailoverEndpoint


@pytest.mark.parametrize(
    ("url", "host"), [("tcp://127.0.0.1:61616", "127.0.0.1"), ("tcp://[::1]:61616", "::1")]
)
def test_a_refused_connect_to_an_address_fails_without_waiting(url: str, host: str) -> None:
    clock = MemoryReactorClock()
    attempt = client_endpoint(clock, url).connect(Factory.forProtocol(Protocol))
    [(connected_host, port, factory, _, _)] = clock.tcpClients
    assert (connected_host, port) == (host, 61616)
    failures: list[Failure] = []
    attempt.addErrback(failures.append)
    factory.clientConnectionFailed(clock.connectors[0], Failure(ConnectionRefusedError()))
    assert clock.seconds() == 0 and not clock.getDelayedCalls()
    [failure] = failures
    assert failure.check(ConnectionRefusedError)


def test_each_attempt_is_bounded_by_the_urls_connect_timeout() -> None:
    clock = MemoryReactorClock()
    for url in ("tcp://127.0.0.1:1", "tcp://127.0.0.1:1?connect-timeout-millis=250"):
        client_endpoint(clock, url).connect(Factory.forProtocol(Protocol))
    assert [timeout for (_, _, _, timeout, _) in clock.tcpClients] == [30.0, 0.25]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose listener's accept queue is full: the kernel drops the SYNs sent to it,
    as a partitioned host drops them (nothing answers, nothing refuses)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    queued = socket.socket()
    queued.setblocking(False)
    queued.connect_ex(("127.0.0.1", port))
    _, writable, _ = select.select([], [queued], [], 5)
    assert writable, "the first connection was not queued"
    try:
        yield port
    finally:
        queued.close()
        server.close()


@pytest_twisted.ensureDeferred
async def test_an_address_that_never_answers_fails_the_attempt_at_the_timeout(
    silent_port: int,
) -> None:
    started = time.monotonic()
    url = f"tcp://127.0.0.1:{silent_port}?connect-timeout-millis=300"
    with pytest.raises(TimeoutError):
        await client_endpoint(reactor, url).connect(Factory.forProtocol(Protocol))
    assert 0.3 <= time.monotonic() - started < 20  # (not the default's 30 s)


@pytest_twisted.ensureDeferred
async def test_a_failover_list_moves_past_a_silent_address_at_its_timeout(
    silent_port: int,
) -> None:
    """As a client of a live node cut off by a partition and of its backup does."""
    ends: list[_Closing] = []
    factory = Factory.forProtocol(lambda: ends.append(_Closing()) or ends[-1])
    listening = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(factory)
    try:
        endpoint = FailoverEndpoint(
            [
                client_endpoint(
                    reactor, f"tcp://127.0.0.1:{silent_port}?connect-timeout-millis=300"
                ),
                client_endpoint(reactor, f"tcp://127.0.0.1:{listening.getHost().port}"),
            ]
        )
        with pytest.raises(TimeoutError):
            await endpoint.connect(factory)
        connected = await endpoint.connect(factory)
        assert connected.transport.getPeer().port == listening.getHost().port
        connected.transport.loseConnection()
        await eventually(lambda: len(ends) == 2)  # the client's end and the one accepted
        await DeferredList([end.closed for end in ends])
    finally:
        await listening.stopListening()


class _Closing(Protocol):
    """An end of a connection that says when it is closed."""

    def __init__(self) -> None:
        self.closed: Deferred[None] = Deferred()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.closed.callback(None)
