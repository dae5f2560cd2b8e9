"""A TCP port forwarder for the ``faults`` scenario: the scenario's clients and bridge
connect through it, so the runner can drop their connections and point it at a node
restarted on another port.

    python -m benchmarks.scenarios.proxy --upstream PORT

It prints ``{"event": "listening", "port": P}``, then reads commands on standard input:
``drop`` aborts every connection through it (both sides see the connection reset) and
prints ``dropped`` with their number; ``upstream PORT`` sends new connections to that
port. Flow control is Twisted's port forwarder's: each side's transport is the other's
producer, so a slow side stops the reads of the fast one.
"""

from __future__ import annotations

import argparse
import sys

from twisted.internet import reactor, stdio
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.protocol import connectionDone
from twisted.logger import globalLogBeginner, textFileLogObserver
from twisted.protocols.basic import LineReceiver
from twisted.protocols.portforward import ProxyFactory, ProxyServer
from twisted.python.failure import Failure

from benchmarks.peers import emit


class _Server(ProxyServer):
    noisy = False

    def connectionMade(self) -> None:
        self.factory.live.add(self)  # type: ignore[attr-defined]
        super().connectionMade()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.factory.live.discard(self)  # type: ignore[attr-defined]
        super().connectionLost(reason)  # type: ignore[no-untyped-call]


class _Forwarder(ProxyFactory):
    protocol = _Server
    noisy = False

    def __init__(self, host: str, port: int) -> None:
        super().__init__(host, port)
        self.live: set[_Server] = set()

    def drop(self) -> int:
        dropped = list(self.live)
        for server in dropped:
            server.transport.abortConnection()  # type: ignore[attr-defined]
            peer = server.peer
            if peer is not None and peer.transport is not None:
                peer.transport.abortConnection()  # type: ignore[attr-defined]
        return len(dropped)


class _Commands(LineReceiver):
    delimiter = b"\n"

    def __init__(self, forwarder: _Forwarder) -> None:
        self.forwarder = forwarder

    def lineReceived(self, line: bytes) -> None:
        word, _, argument = line.decode().strip().partition(" ")
        if word == "drop":
            emit("dropped", connections=self.forwarder.drop())
        elif word == "upstream":
            self.forwarder.port = int(argument)
            emit("upstream", port=self.forwarder.port)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if reactor.running:
            reactor.stop()


def _failed(failure: Failure) -> None:
    emit("error", message=str(failure.value))
    reactor.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scenarios.proxy")
    parser.add_argument("--upstream", type=int, required=True, help="the node's port")
    args = parser.parse_args(argv)
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    forwarder = _Forwarder("127.0.0.1", args.upstream)
    listening = TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(forwarder)
    listening.addCallback(lambda port: emit("listening", port=port.getHost().port))
    listening.addErrback(_failed)
    stdio.StandardIO(_Commands(forwarder))
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
