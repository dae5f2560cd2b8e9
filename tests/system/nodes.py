"""Nodes as real processes for the system tests: ``txbridge node`` (or ``twistd``) on a
configuration written to a temporary directory, ports read back from the node's start-up
line, stopped with SIGTERM or killed with SIGKILL."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import tomli_w
from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

from tests.processes import ROOT

STARTED = re.compile(r"node (\S+) \((\S+)\) started: (.*)")
BIN = Path(sys.executable).parent
OUTPUT_SHOWN = 20_000
"""Characters of a node's output (its last) that a timed-out wait shows."""


def node_document(name: str = "a", **extra: Any) -> dict[str, Any]:
    """A node on loopback ports chosen by the system, security off unless overridden."""
    return {
        "node": {"name": name, "data-dir": f"var/{name}"},
        "acceptor": [{"name": "core", "url": "tcp://127.0.0.1:0", "protocols": ["core"]}],
        "management": {"url": "http://127.0.0.1:0"},
        "security": {"enabled": False},
        **extra,
    }


class NodeProcess(ProcessProtocol):
    """One node process: its output, its ports once started, its exit code once ended."""

    def __init__(
        self,
        directory: Path,
        document: dict[str, Any],
        twistd: bool = False,
        *,
        bin_dir: Path | None = None,
        path_first: Path | None = None,
        wrap: Callable[[list[str]], list[str]] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.directory = directory
        self.wrap = wrap
        """Turns the node's command into the one to run (in a network namespace, say)."""
        self.host = host
        """Where the node's acceptors are reached."""
        self.bin_dir = bin_dir
        """Where ``txbridge`` and ``twistd`` are, for an install other than this checkout's
        (run then without the checkout on ``PYTHONPATH``)."""
        self.path_first = path_first
        """A directory put first on ``PYTHONPATH``: a test's ``sitecustomize``."""
        self.config = directory / "node.toml"
        self.config.write_text(tomli_w.dumps(document))
        self.twistd = twistd
        self.output = ""
        self.ports: dict[str, int] = {}
        self.started: Deferred[None] = Deferred()
        """Fires once the node says it started; fails if it ends first and someone waits
        (``wait_started``), else stays unfired: a backup stopped while it waited for the
        lease never started, and its failure would only be logged as unhandled."""
        self._start_failure: RuntimeError | None = None
        self._start_awaited = False
        self.ended: Deferred[int | None] = Deferred()
        self.exit_code: int | None = None
        self.signal: int | None = None
        """The signal that ended the process: twistd, once shut down cleanly on SIGTERM,
        ends itself with that signal, as its parent expects."""
        self.pid: int | None = None
        self._waiting: list[tuple[re.Pattern[str], int, Deferred[re.Match[str]]]] = []

    def wait_for(
        self, pattern: str, timeout: float = 60.0, since: int | None = None
    ) -> Deferred[re.Match[str]]:
        """Fires with the first match of ``pattern`` in the output from character
        ``since`` on (by default from now on); fails after ``timeout`` seconds, or at once
        when the node ends first."""
        compiled = re.compile(pattern)
        offset = len(self.output) if since is None else since
        waiter: Deferred[re.Match[str]] = Deferred()
        found = compiled.search(self.output, offset)
        if found is not None:
            waiter.callback(found)
        elif self.ended.called:
            waiter.errback(
                RuntimeError(f"the node ended before saying {pattern!r}:\n{self.output}")
            )
        else:
            self._waiting.append((compiled, offset, waiter))
            waiter.addTimeout(timeout, reactor, onTimeoutCancel=self._timed_out(pattern))
        return waiter

    def _timed_out(self, pattern: str) -> Callable[[object, float], NoReturn]:
        """A wait's timeout as an error naming what was awaited, with the end of the
        node's output, so that a failure in CI shows what the node was doing."""

        def timed_out(_: object, timeout: float) -> NoReturn:
            raise defer.TimeoutError(
                f"no {pattern!r} within {timeout} s; the node's output ends:\n"
                f"{self.output[-OUTPUT_SHOWN:]}"
            )

        return timed_out

    def start(self) -> NodeProcess:
        where = self.bin_dir or BIN
        if self.twistd:
            argv = [str(where / "twistd"), "-n", "--pidfile=", "txbridge", "--config", "node.toml"]
        else:
            argv = [str(where / "txbridge"), "node", "--config", "node.toml"]
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        if self.bin_dir is None:
            env["PYTHONPATH"] = str(ROOT)
        if self.path_first is not None:
            before = [str(self.path_first), env.get("PYTHONPATH", "")]
            env["PYTHONPATH"] = os.pathsep.join(part for part in before if part)
        if self.wrap is not None:
            argv = self.wrap(argv)
            argv[0] = shutil.which(argv[0]) or argv[0]
        transport = reactor.spawnProcess(  # type: ignore[attr-defined]
            self, argv[0], argv, env=env, path=str(self.directory)
        )
        self.pid = transport.pid
        return self

    def outReceived(self, data: bytes) -> None:
        self.output += data.decode(errors="replace")
        for entry in list(self._waiting):
            pattern, offset, waiter = entry
            found = pattern.search(self.output, offset)
            if waiter.called:  # timed out
                self._waiting.remove(entry)
            elif found is not None:
                self._waiting.remove(entry)
                waiter.callback(found)
        if not self.started.called:
            found = STARTED.search(self.output)
            if found:
                for part in found.group(3).split(", "):
                    name, _, where = part.partition(" on ")
                    self.ports[name] = int(where.rsplit(":", 1)[1])
                self.started.callback(None)

    errReceived = outReceived

    def processEnded(self, reason: Failure) -> None:
        self.exit_code = getattr(reason.value, "exitCode", None)
        self.signal = getattr(reason.value, "signal", None)
        waiting, self._waiting = self._waiting, []
        for pattern, _, waiter in waiting:
            if not waiter.called:
                waiter.errback(
                    RuntimeError(
                        f"the node ended before saying {pattern.pattern!r}:\n{self.output}"
                    )
                )
        # Ended first: whoever awaits the start may go on to stop the node at once.
        self.ended.callback(self.exit_code)
        if not self.started.called:
            self._start_failure = RuntimeError(f"the node ended before starting:\n{self.output}")
            if self._start_awaited:
                self.started.errback(self._start_failure)

    @property
    def core_url(self) -> str:
        return f"tcp://{self.host}:{self.ports['core']}"

    @property
    def management_url(self) -> str:
        return f"http://{self.host}:{self.ports['management']}"

    async def wait_output(self, text: str, since: int = 0, timeout: float = 30.0) -> None:
        """Wait until the node's output from character ``since`` on (``len(output)``
        before the step that should make it say so) holds ``text``; fail after
        ``timeout`` seconds or when the node ends first."""
        try:
            await self.wait_for(re.escape(text), timeout, since=since)
        except defer.TimeoutError:
            raise AssertionError(f"the node did not say {text!r}:\n{self.output}") from None

    async def wait_started(self, timeout: float = 60.0) -> NodeProcess:
        if self._start_failure is not None and not self.started.called:
            raise self._start_failure
        self._start_awaited = True
        self.started.addTimeout(timeout, reactor)
        await self.started
        return self

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int | None:
        """Send ``sig`` and wait (bounded) for the exit; SIGKILL if it does not come."""
        if not self.ended.called and self.pid is not None:
            os.kill(self.pid, sig)
            waiter: Deferred[int | None] = Deferred()
            self.ended.addBoth(lambda result: (waiter.callback(result), result)[1])
            call = reactor.callLater(timeout, os.kill, self.pid, signal.SIGKILL)  # type: ignore[attr-defined]
            await waiter
            if call.active():
                call.cancel()
        return self.exit_code
