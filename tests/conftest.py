"""Fixtures every test gets: the leak check, and hypothesis profiles."""

from __future__ import annotations

import os

import pytest
import pytest_twisted
from hypothesis import HealthCheck, settings
from twisted.internet import reactor
from twisted.internet.task import deferLater

from tests.leaks import Snapshot, clean_up, find_leaks

pytest_plugins = ["tests.processes", "tests.postgresql"]

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "ci", parent=settings.get_profile("default"), derandomize=True, print_blob=True
)
settings.load_profile("ci" if os.environ.get("CI") else "default")

# Reactor iterations a test's own last closes may take to finish (a TCP close needs one
# write pass, the peer's end one read): iterations, never seconds.
SETTLE_TURNS = 4


def _settle() -> None:
    for _ in range(SETTLE_TURNS):
        pytest_twisted.blockon(deferLater(reactor, 0, lambda: None))


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest):
    """Fail a test that leaves a delayed call, a socket, a thread or a child process."""
    before = Snapshot.take()
    yield
    leaks = find_leaks(before)
    if leaks:
        _settle()
        leaks = find_leaks(before)
    if leaks:
        clean_up(before)
        pytest.fail(
            f"{request.node.nodeid} left behind:\n  - " + "\n  - ".join(leaks), pytrace=False
        )
