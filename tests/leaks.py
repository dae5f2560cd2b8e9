"""Finding what a test left behind: delayed calls, sockets, threads, child processes.

Every test runs under the ``no_leaks`` fixture (tests/conftest.py). What a test leaves is
reported by name, as the failure of that test, and cleaned away so the tests after it
start from a clean reactor.

Sockets are found two ways: the reactor's readers and writers, and the process's own open
internet sockets (from the kernel, through psutil). The second finds a connection that is
in neither of the reactor's sets: one whose reading is paused (``pauseProducing`` stops
reading) with nothing left to write, as a stalled flow-control test leaves it. Connections
to a service the whole run keeps (``of_the_run``: the run's Spark gateway, to which each
thread that calls Spark opens its own) are nobody's leak.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import threading
from typing import Any

import attrs
import psutil
from twisted.internet import reactor
from twisted.internet.abstract import FileDescriptor
from twisted.internet.base import DelayedCall
from twisted.internet.error import ConnectionAborted
from twisted.internet.interfaces import IReactorFDSet, IReactorTime
from twisted.python.failure import Failure

# Record where every delayed call was made, so a leaked one names its origin.
DelayedCall.debug = True

_fdset = IReactorFDSet(reactor)
_time = IReactorTime(reactor)
_process = psutil.Process()


def _thread_is_pool(thread: threading.Thread) -> bool:
    # The reactor's thread pool lives for the whole run and is not a test's leak.
    return thread.name.startswith("PoolThread-twisted.internet.reactor")


def _internal() -> set[object]:
    # The reactor's own wakers (signals, threads) come and go with it, never with a test.
    return set(getattr(reactor, "_internalReaders", ()))


@attrs.frozen
class OpenSocket:
    """One of this process's internet sockets, as the kernel reports it."""

    fd: int
    kind: str
    local: str
    remote: str
    status: str

    @classmethod
    def from_psutil(cls, connection: Any) -> OpenSocket:
        kind = "udp" if connection.type == socket.SOCK_DGRAM else "tcp"
        return cls(
            fd=connection.fd,
            kind=kind,
            local=_address(connection.laddr),
            remote=_address(connection.raddr),
            status=connection.status,
        )

    @property
    def key(self) -> tuple[int, str, str, str]:
        # The state changes as a connection closes; the descriptor and addresses do not
        # (a descriptor reused by a new socket gets new addresses, so counts as new).
        return (self.fd, self.kind, self.local, self.remote)

    def describe(self) -> str:
        where = f"{self.local} -> {self.remote}" if self.remote else self.local
        return f"{self.kind} {where} ({self.status}, fd {self.fd})"


_run_services: set[str] = set()
"""Addresses (``host:port``) of services the run keeps open for all its tests."""


def of_the_run(address: str) -> None:
    """Connections to ``address`` come and go with the run, never with a test."""
    _run_services.add(address)


def _address(address: Any) -> str:
    if not address:
        return ""
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _open_sockets() -> dict[tuple[int, str, str, str], OpenSocket]:
    found = (OpenSocket.from_psutil(c) for c in _process.net_connections(kind="inet"))
    return {s.key: s for s in found if s.fd >= 0 and s.remote not in _run_services}


@attrs.define
class Snapshot:
    readers: set[Any]
    writers: set[Any]
    threads: set[threading.Thread]
    children: set[int]
    sockets: dict[tuple[int, str, str, str], OpenSocket]

    @classmethod
    def take(cls) -> Snapshot:
        return cls(
            readers=set(_fdset.getReaders()) - _internal(),
            writers=set(_fdset.getWriters()) - _internal(),
            threads={t for t in threading.enumerate() if t.is_alive()},
            children={p.pid for p in _process.children(recursive=True)},
            sockets=_open_sockets(),
        )

    def new_selectables(self, before: Snapshot) -> set[object]:
        return (self.readers | self.writers) - (before.readers | before.writers)

    def new_sockets(self, before: Snapshot) -> list[OpenSocket]:
        return [s for key, s in sorted(self.sockets.items()) if key not in before.sockets]


def _owners(fds: set[int]) -> dict[int, object]:
    """The object holding each of ``fds``: a Twisted ``FileDescriptor`` (a connection or a
    port) when there is one, else a plain ``socket.socket``."""
    twisted: dict[int, object] = {}
    plain: dict[int, object] = {}
    if not fds:
        return twisted
    for candidate in gc.get_objects():
        # type(), not isinstance(): a dead weakref proxy raises on __class__.
        kind = type(candidate)
        if issubclass(kind, FileDescriptor):
            table = twisted
        elif issubclass(kind, socket.socket):
            table = plain
        else:
            continue
        try:
            fd = candidate.fileno()
        except Exception:
            continue
        if fd in fds and not getattr(candidate, "disconnected", False):
            table.setdefault(fd, candidate)
    return {**plain, **twisted}


def _describe_owner(owner: object | None, readers: set[object], writers: set[object]) -> str:
    if owner is None:
        return "owner not found"
    kind = type(owner)
    text = f"owned by {kind.__module__}.{kind.__qualname__} {owner!r}"
    if isinstance(owner, FileDescriptor):
        protocol = getattr(owner, "protocol", None)
        if protocol is not None:
            text += f" with protocol {protocol!r}"
            # TLS and endpoint wrappers: name the application's protocol inside.
            for attribute in ("wrappedProtocol", "_wrappedProtocol"):
                wrapped = getattr(protocol, attribute, None)
                if wrapped is not None:
                    text += f" wrapping {wrapped!r}"
                    break
        if owner not in readers and owner not in writers:
            text += "; not reading (paused) and nothing to write"
    return text


def find_leaks(before: Snapshot) -> list[str]:
    """Describe everything alive now that was not alive at ``before``."""
    leaks = []
    for call in _time.getDelayedCalls():
        if call.active():
            leaks.append(f"delayed call {call!r}")
    now = Snapshot.take()
    selectables = now.new_selectables(before)
    for selectable in selectables:
        leaks.append(f"open socket or port {selectable!r}")
    new_sockets = now.new_sockets(before)
    owners = _owners({s.fd for s in new_sockets})
    for open_socket in new_sockets:
        owner = owners.get(open_socket.fd)
        if owner is not None and owner in selectables:
            continue  # reported above
        leaks.append(
            f"open socket {open_socket.describe()}, "
            + _describe_owner(owner, now.readers, now.writers)
        )
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


def _close(owner: object) -> None:
    """Close a leaked socket's owner at once: out of the reactor, then connectionLost
    (abortive for a connection: no orderly close to wait for), or a plain socket's close."""
    if isinstance(owner, socket.socket):
        owner.close()
        return
    _fdset.removeReader(owner)  # type: ignore[arg-type]
    _fdset.removeWriter(owner)  # type: ignore[arg-type]
    close = getattr(owner, "connectionLost", None)
    if close is not None:
        # The protocol's own connectionLost may fail on a connection cut mid-way; the
        # descriptor is closed before it runs.
        with contextlib.suppress(Exception):
            close(Failure(ConnectionAborted("closed by the leak check")))


def clean_up(before: Snapshot) -> None:
    """Remove what a leaking test left, so the next test is not affected."""
    now = Snapshot.take()
    closed: list[object] = []
    for selectable in now.new_selectables(before):
        _close(selectable)
        closed.append(selectable)
    new_sockets = now.new_sockets(before)
    owners = _owners({s.fd for s in new_sockets})
    for open_socket in new_sockets:
        owner = owners.get(open_socket.fd)
        if owner is not None and not any(owner is done for done in closed):
            _close(owner)
            closed.append(owner)
    # Last, as closing a connection may have scheduled a call (a reconnect, a timeout).
    for call in _time.getDelayedCalls():
        if call.active():
            call.cancel()
    for pid in now.children - before.children:
        try:
            os.kill(pid, signal.SIGKILL)
            psutil.Process(pid).wait(timeout=10)
        except (OSError, psutil.Error):
            pass
