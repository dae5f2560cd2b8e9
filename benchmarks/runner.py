"""Running peer processes from a benchmark or the demo, and saving figures."""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import twisted

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

Event = dict[str, Any]


class Peer:
    """A child process printing JSON event lines."""

    def __init__(self, args: Sequence[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.peers", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.events: list[Event] = []

    def until(self, name: str, on_event: Callable[[Event], None] | None = None) -> Event:
        """Read events until one called ``name``; each is also passed to ``on_event``."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event: Event = json.loads(line)
            self.events.append(event)
            if on_event is not None:
                on_event(event)
            if event["event"] == "error":
                raise RuntimeError(f"peer failed: {event['message']}")
            if event["event"] == name:
                return event
        self.process.wait()
        stderr = self.process.stderr.read() if self.process.stderr else ""
        raise RuntimeError(f"peer exited before {name!r}:\n{stderr[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@contextmanager
def peers() -> Iterator[Callable[[Sequence[str]], Peer]]:
    """Start peers with the yielded function; all are stopped on the way out, however it is
    taken: an error, Ctrl-C (KeyboardInterrupt), or SIGTERM (which would otherwise end
    this process at once and leave them running; here it becomes ``SystemExit(143)``)."""
    started: list[Peer] = []
    starting = False
    pending: int | None = None

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        # Python runs this in the main thread between two bytecodes, wherever it is. Not
        # inside Popen, though: raising there would leave a child started but untracked.
        nonlocal pending
        if starting:
            pending = signum
            return
        raise SystemExit(128 + signum)

    def start(args: Sequence[str]) -> Peer:
        nonlocal starting
        starting = True
        try:
            started.append(Peer(args))
        finally:
            starting = False
        if pending is not None:
            raise SystemExit(128 + pending)
        return started[-1]

    # Signal handlers can only be set from the main thread.
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_sigterm) if in_main else None
    try:
        yield start
    finally:
        if in_main:
            # A second SIGTERM must not cut the clean-up short.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            for peer in started:
                peer.stop()
        finally:
            if in_main:
                signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (for a process that must be told
    its port before it starts, or come back on it after a restart)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "twisted": twisted.__version__,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }


def save(name: str, figures: dict[str, Any], output: Path | None = None) -> Path:
    """Write ``figures`` with the machine's description as JSON to ``output``, or by
    default to ``benchmarks/results/NAME.json``; the path written."""
    if output is None:
        RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json" if output is None else output
    path.write_text(json.dumps({"machine": machine(), **figures}, indent=2) + "\n")
    return path
