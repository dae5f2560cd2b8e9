"""Finding what a test left behind: delayed calls, sockets, threads, child processes.

Every test runs under the ``no_leaks`` fixture (tests/conftest.py). What a test leaves is
reported by name, as the failure of that test, and cleaned away so the tests after it
start from a clean reactor.
"""

from __future__ import annotations

import os
import signal
import threading

import attrs
import psutil
from twisted.internet import reactor
from twisted.internet.base import DelayedCall
from twisted.internet.interfaces import IReactorFDSet, IReactorTime

# Record where every delayed call was made, so a leaked one names its origin.
DelayedCall.debug = True

_fdset = IReactorFDSet(reactor)
_time = IReactorTime(reactor)


def _thread_is_pool(thread: threading.Thread) -> bool:
    # The reactor's thread pool lives for the whole run and is not a test's leak.
    return thread.name.startswith("PoolThread-twisted.internet.reactor")


def _internal() -> set[object]:
    # The reactor's own wakers (signals, threads) come and go with it, never with a test.
    return set(getattr(reactor, "_internalReaders", ()))


@attrs.define
class Snapshot:
    readers: set[object]
    writers: set[object]
    threads: set[threading.Thread]
    children: set[int]

    @classmethod
    def take(cls) -> Snapshot:
        return cls(
            readers=set(_fdset.getReaders()) - _internal(),
            writers=set(_fdset.getWriters()) - _internal(),
            threads={t for t in threading.enumerate() if t.is_alive()},
            children={p.pid for p in psutil.Process().children(recursive=True)},
        )


def find_leaks(before: Snapshot) -> list[str]:
    """Describe everything alive now that was not alive at ``before``."""
    leaks = []
    for call in _time.getDelayedCalls():
        if call.active():
            leaks.append(f"delayed call {call!r}")
    now = Snapshot.take()
    for selectable in (now.readers | now.writers) - (before.readers | before.writers):
        leaks.append(f"open socket or port {selectable!r}")
    for thread in now.threads - before.threads:
        if not _thread_is_pool(thread):
            leaks.append(f"thread {thread.name!r} ({thread!r})")
    for pid in now.children - before.children:
        try:
            cmdline = " ".join(psutil.Process(pid).cmdline())
        except psutil.Error:
            continue
        leaks.append(f"child process {pid}: {cmdline}")
    return leaks


def clean_up(before: Snapshot) -> None:
    """Remove what a leaking test left, so the next test is not affected."""
    for call in _time.getDelayedCalls():
        if call.active():
            call.cancel()
    now = Snapshot.take()
    for selectable in (now.readers | now.writers) - (before.readers | before.writers):
        _fdset.removeReader(selectable)  # type: ignore[arg-type]
        _fdset.removeWriter(selectable)  # type: ignore[arg-type]
        close = getattr(selectable, "connectionLost", None)
        if close is not None:
            try:
                from twisted.python.failure import Failure

                close(Failure(RuntimeError("closed by the leak check")))
            except Exception:
                pass
    for pid in now.children - before.children:
        try:
            os.kill(pid, signal.SIGKILL)
            psutil.Process(pid).wait(timeout=10)
        except (OSError, psutil.Error):
            pass
