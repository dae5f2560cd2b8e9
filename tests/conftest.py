"""Fixtures every test gets: the leak check, and hypothesis profiles; and the one Spark
session of the run, for the audit tests and the system tests that audit their runs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from hypothesis import HealthCheck, settings
from twisted.internet import reactor
from twisted.internet.task import deferLater

from tests.audit.conftest import require_spark
from tests.leaks import Snapshot, clean_up, find_leaks, of_the_run

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


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One Spark session for the whole run (local[2], no UI, quiet): a JVM takes about ten
    seconds to start, so the tests that audit share one. The threads that call it open
    connections to its gateway as they first do: the run's, not a test's leak."""
    require_spark()
    from bridge.audit.pipeline import spark_session

    session = spark_session("local[2]", console_progress=False, app_name="txbridge tests")
    gateway = session.sparkContext._gateway.gateway_parameters
    of_the_run(f"{gateway.address}:{gateway.port}")
    yield session
    session.stop()
