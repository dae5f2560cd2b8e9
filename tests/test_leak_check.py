"""The leak check itself: a leaking test fails naming what it left, and the next test
still passes."""

from __future__ import annotations

from pathlib import Path

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent

LEAKY = """
import subprocess
import sys
import threading

import psutil
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.protocol import Factory, Protocol

# What the leaking tests hold on to, as a failed test's frames would.
KEPT = []


def assert_clean():
    assert not [c for c in reactor.getDelayedCalls() if c.active()]
    internal = set(getattr(reactor, "_internalReaders", ()))
    assert not (set(reactor.getReaders()) | set(reactor.getWriters())) - internal
    assert psutil.Process().net_connections(kind="inet") == []
    assert psutil.Process().children(recursive=True) == []


def test_leaves_a_timer():
    reactor.callLater(3600, print, "too late")


def test_after_the_timer():
    assert_clean()


@pytest_twisted.ensureDeferred
async def test_leaves_a_port():
    reactor.listenTCP(0, Factory.forProtocol(Protocol), interface="127.0.0.1")


def test_after_the_port():
    assert_clean()


def test_leaves_a_thread():
    never = threading.Event()
    KEPT.append(never)
    threading.Thread(target=never.wait, name="forgotten-worker", daemon=True).start()


def test_after_the_thread():
    assert_clean()


def test_leaves_a_child_process():
    KEPT.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))


def test_after_the_child_process():
    assert_clean()


class Paused(Protocol):
    # Stops reading at once and never writes: in neither of the reactor's sets.
    def __init__(self, made):
        self.made = made

    def connectionMade(self):
        self.transport.pauseProducing()
        KEPT.append(self)
        self.made.callback(self)


class PausedServer(Factory):
    def __init__(self):
        self.made = Deferred()

    def buildProtocol(self, addr):
        return Paused(self.made)


@pytest_twisted.ensureDeferred
async def test_leaves_a_connection_paused_at_both_ends():
    server = PausedServer()
    port = reactor.listenTCP(0, server, interface="127.0.0.1")
    client_made = Deferred()
    endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port)
    await endpoint.connect(Factory.forProtocol(lambda: Paused(client_made)))
    ends = [await client_made, await server.made]
    await port.stopListening()
    for end in ends:
        assert end.transport not in reactor.getReaders()
        assert end.transport not in reactor.getWriters()


def test_after_the_paused_connection():
    assert_clean()
"""


def test_a_leaking_test_fails_with_what_it_left_and_the_next_one_passes(pytester):
    pytester.makeconftest(
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.conftest import *  # noqa: F403\n"
    )
    pytester.makepyfile(test_leaky=LEAKY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        [
            "*test_leaves_a_timer left behind:*",
            "*delayed call*print*",
            "*test_leaves_a_port left behind:*",
            "*open socket or port*Port*",
            "*test_leaves_a_thread left behind:*",
            "*thread 'forgotten-worker'*",
            "*test_leaves_a_child_process left behind:*",
            "*child process *time.sleep(600)*",
            "*test_leaves_a_connection_paused_at_both_ends left behind:*",
        ]
    )
    # Both ends of the paused connection, by address and by the Twisted object holding it.
    paused = result.stdout.str().split("test_leaves_a_connection_paused_at_both_ends left")[1]
    paused = paused.split("test_after_the_paused_connection")[0]
    assert paused.count("open socket tcp 127.0.0.1:") == 2, paused
    for end in ("Client", "Server"):
        result.stdout.fnmatch_lines(
            [
                "*open socket tcp 127.0.0.1:* -> 127.0.0.1:* (ESTABLISHED, fd *), owned by "
                f"twisted.internet.tcp.{end} *Paused*; not reading (paused) and nothing to write"
            ]
        )
    result.assert_outcomes(passed=10, errors=5)
