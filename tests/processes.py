"""Child processes for tests: spawned on the reactor, talking JSON lines on stdout.

The ``spawn`` fixture kills and reaps whatever a test started, even when it fails, and its
stderr is attached to any error so a failing child explains itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

ROOT = Path(__file__).resolve().parent.parent
STDERR_KEPT = 64 * 1024


def run_benchmark(
    scenario: str, argv: list[str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks SCENARIO ARGV`` from the repository, to its end (bounded by
    ``timeout``), its output captured as text; the caller checks the exit status."""
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", scenario, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class ChildFailed(Exception):
    """The child exited before sending the awaited event."""


class JSONLinesProcess(ProcessProtocol):
    """Collects a child's JSON events and lets a test await them by name, in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self._cursor: dict[str, int] = {}
        self._waiting: list[tuple[str, Deferred[dict[str, Any]]]] = []
        self._partial = b""
        self.stderr = b""
        self.exit_code: int | None = None
        self.ended: Deferred[int | None] = Deferred()
        self._running = True

    def outReceived(self, data: bytes) -> None:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if line.strip():
                self.events.append(json.loads(line))
        self._wake()

    def errReceived(self, data: bytes) -> None:
        self.stderr = (self.stderr + data)[-STDERR_KEPT:]

    def processEnded(self, reason: Failure) -> None:
        self._running = False
        self.exit_code = getattr(reason.value, "exitCode", None)
        waiting, self._waiting = self._waiting, []
        for name, waiter in waiting:
            waiter.errback(ChildFailed(self.describe(f"exited before {name!r}")))
        self.ended.callback(self.exit_code)

    def describe(self, what: str) -> str:
        tail = self.stderr.decode(errors="replace")[-4000:]
        return f"{self.name} {what} (exit code {self.exit_code}); stderr:\n{tail}"

    def next_event(self, name: str) -> Deferred[dict[str, Any]]:
        """The next event called ``name`` not yet returned by this method."""
        waiter: Deferred[dict[str, Any]] = Deferred()
        self._waiting.append((name, waiter))
        self._wake()
        if not self._running and not waiter.called:
            self._waiting.remove((name, waiter))
            waiter.errback(ChildFailed(self.describe(f"exited before {name!r}")))
        return waiter

    def _wake(self) -> None:
        """Fire the waiters whose events have arrived; a callback may await the next one."""
        ready: list[tuple[Deferred[dict[str, Any]], dict[str, Any]]] = []
        still = []
        for name, waiter in self._waiting:
            event = self._take(name)
            if event is None:
                still.append((name, waiter))
            else:
                ready.append((waiter, event))
        self._waiting = still
        for waiter, event in ready:
            waiter.callback(event)

    def _take(self, name: str) -> dict[str, Any] | None:
        start = self._cursor.get(name, 0)
        for index in range(start, len(self.events)):
            if self.events[index]["event"] == name:
                self._cursor[name] = index + 1
                return self.events[index]
        return None

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == name]

    def kill(self) -> None:
        if self._running and self.transport is not None:
            self.transport.signalProcess("KILL")


class Spawner:
    def __init__(self) -> None:
        self.children: list[JSONLinesProcess] = []

    def __call__(self, *args: str, name: str | None = None) -> JSONLinesProcess:
        """Start ``python ARGS`` in the repository root."""
        child = JSONLinesProcess(name or " ".join(args[:3]))
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        reactor.spawnProcess(  # type: ignore[attr-defined]
            child, sys.executable, [sys.executable, *args], env=env, path=str(ROOT)
        )
        self.children.append(child)
        return child


@pytest.fixture
def spawn() -> Iterator[Spawner]:
    spawner = Spawner()
    yield spawner
    for child in spawner.children:
        child.kill()
    for child in spawner.children:
        if not child.ended.called:
            pytest_twisted.blockon(child.ended)
