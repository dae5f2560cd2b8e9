"""A TCP proxy to the test's PostgreSQL server (or to a node) that a test can cut, and
small probes of a node (does a port accept, what does a URL answer), for the HA tests that
take the database away from a node or a node away from its clients."""

from __future__ import annotations

import urllib.request
from typing import Any
from urllib.parse import urlsplit

from twisted.internet import reactor
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.protocols.portforward import ProxyFactory, ProxyServer

from tests.postgresql import SERVER


class Cuttable(ProxyFactory):
    """A TCP proxy whose connections can all be dropped at once: to PostgreSQL, or to
    ``host`` and ``port`` if given (a node on a host of its own)."""

    def __init__(self, host: str | None = None, port: int | None = None) -> None:
        parts = urlsplit(SERVER)
        super().__init__(host or parts.hostname or "127.0.0.1", port or parts.port or 5432)
        self.open: list[ProxyServer] = []

    def buildProtocol(self, addr: Any) -> ProxyServer:
        server = super().buildProtocol(addr)
        self.open.append(server)
        return server

    def cut(self) -> None:
        for server in self.open:
            server.transport.abortConnection()
            if server.peer is not None and server.peer.transport is not None:
                server.peer.transport.abortConnection()
        self.open.clear()


def via(url: str, port: int) -> str:
    """``url`` (of the test server) through the proxy listening on ``port``."""
    parts = urlsplit(SERVER)
    return url.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{port}", 1)


async def connects(port: int) -> bool:
    """Whether something accepts TCP connections on the loopback ``port``."""
    try:
        connected = await connectProtocol(
            TCP4ClientEndpoint(reactor, "127.0.0.1", port, timeout=5), Protocol()
        )
    except Exception:
        return False
    connected.transport.loseConnection()
    return True


def get(url: str) -> str:
    """The body of a GET of ``url`` (blocking: run it in a thread)."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())
