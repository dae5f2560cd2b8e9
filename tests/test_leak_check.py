"""The leak check itself: a leaking test fails naming what it left, and the next test
still passes."""

from __future__ import annotations

from pathlib import Path

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent

LEAKY = """
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.protocol import Factory, Protocol


def test_leaves_a_timer():
    reactor.callLater(3600, print, "too late")


@pytest_twisted.ensureDeferred
async def test_leaves_a_port():
    reactor.listenTCP(0, Factory.forProtocol(Protocol), interface="127.0.0.1")


def test_after_them():
    assert not [c for c in reactor.getDelayedCalls() if c.active()]
"""


def test_a_leaking_test_fails_with_what_it_left_and_the_next_one_passes(pytester):
    pytester.makeconftest(
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.conftest import *  # noqa: F403\n"
    )
    pytester.makepyfile(test_leaky=LEAKY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*test_leaves_a_timer left behind:*",
            "*delayed call*print*",
            "*test_leaves_a_port left behind:*",
            "*open socket or port*Port*",
        ]
    )
