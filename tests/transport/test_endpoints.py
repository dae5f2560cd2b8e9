"""Connecting by URL: an address literal is connected to directly, so a refused connect
fails the attempt at once (HostnameEndpoint would hold it for its attempt delay), which a
client failing over between node addresses would pay on every try."""

from __future__ import annotations

import pytest
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from transport.endpoints import client_endpoint


@pytest.mark.parametrize(
    ("url", "host"), [("tcp://127.0.0.1:61616", "127.0.0.1"), ("tcp://[::1]:61616", "::1")]
)
def test_a_refused_connect_to_an_address_fails_without_waiting(url: str, host: str) -> None:
    reactor = MemoryReactorClock()
    attempt = client_endpoint(reactor, url).connect(Factory.forProtocol(Protocol))
    [(connected_host, port, factory, _, _)] = reactor.tcpClients
    assert (connected_host, port) == (host, 61616)
    failures: list[Failure] = []
    attempt.addErrback(failures.append)
    factory.clientConnectionFailed(reactor.connectors[0], Failure(ConnectionRefusedError()))
    assert reactor.seconds() == 0 and not reactor.getDelayedCalls()
    [failure] = failures
    assert failure.check(ConnectionRefusedError)
