"""Fixtures of the system tests: node processes that are always stopped."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from tests.postgresql import schema_url
from tests.system.ha import Shared
from tests.system.nodes import NodeProcess


class Nodes:
    """Starts node processes; kills whatever is still running when the test ends."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[NodeProcess] = []

    def __call__(
        self,
        document: dict[str, Any],
        *,
        name: str = "node",
        twistd: bool = False,
        wrap: Callable[[list[str]], list[str]] | None = None,
        host: str = "127.0.0.1",
    ) -> NodeProcess:
        directory = self.tmp_path / name
        directory.mkdir(exist_ok=True)
        process = NodeProcess(directory, document, twistd, wrap=wrap, host=host).start()
        self.started.append(process)
        return process


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    made = Nodes(tmp_path)
    yield made
    for process in made.started:
        pytest_twisted.blockon(Deferred.fromCoroutine(process.stop(signal.SIGKILL)))


@pytest.fixture(params=["postgresql", "file-lock"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shared]:
    """Each test once on a PostgreSQL schema (the lease row) and once on an SQLite store
    directory (the file lock)."""
    if request.param == "postgresql":
        yield schema_url(request.getfixturevalue("pg_schema"))
    else:
        yield tmp_path / "shared-store"
