"""Helpers of the core-bridge system tests (issue 6): ``[[bridge]]`` tables for real node
processes, a TCP proxy between two nodes that a test can cut (and that can read slowly,
for a consumer that reads at a set rate), producers and a consumer on the project's
Twisted client that outlive the restarts of the node they talk to, the bridges of a
node's ``/status``, and ``txbridge ctl`` run as a command.

Producers send 1 KiB-ish bodies with two headers, ``producer`` and ``seq``; the consumer
records, per ``(producer, seq)``, the ids of the messages that carried it on the target.
One id seen twice is a redelivery (a consumer's acknowledgement lost with a killed
node: allowed); two ids for one ``(producer, seq)`` are two messages on the target, a
duplicate the bridge made (not allowed).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomli_w
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred, DeferredList
from twisted.internet.interfaces import IDelayedCall, IListeningPort
from twisted.internet.protocol import ClientFactory, Factory, Protocol
from twisted.internet.task import deferLater
from twisted.python.failure import Failure

from bridge.client.api import Client, ReceivedMessage, connect
from bridge.client.errors import ClientError, Refused
from bridge.message import BRIDGE_PATH
from tests.processes import ROOT
from tests.system.flow import KIB, MIB, POLL_INTERVAL, status
from tests.system.nodes import BIN, NodeProcess

__all__ = ["KIB", "MIB"]

RETRY = {"retry-interval": "100ms", "retry-interval-multiplier": 2.0, "max-retry-interval": "1s"}
"""Quick reconnects, so a test's faults cost little time."""


_HANDED_OUT: set[int] = set()
"""Ports this process's tests were given: the kernel may offer a probe's port again at the
next probe, and two nodes of one test given one port would share it unseen."""


def free_port() -> int:
    """A loopback port free now, for a node that must come back on the same port after a
    restart (or that is not running yet when another node is told where it is); never one
    handed out before in this process."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def bridge_table(name: str, queue: str, target: str | list[str], **extra: Any) -> dict[str, Any]:
    """One ``[[bridge]]`` table in the issue's format, with quick reconnects."""
    return {
        "name": name,
        "queue": queue,
        "target": target,
        **RETRY,
        "reconnect-attempts": -1,
        "use-duplicate-detection": True,
        **extra,
    }


def write_bridges(folder: Path, name: str, *tables: dict[str, Any]) -> Path:
    """A bridges-dir file of ``[[bridge]]`` tables."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(tomli_w.dumps({"bridge": list(tables)}))
    return path


def core_acceptor(port: int = 0) -> list[dict[str, Any]]:
    return [{"name": "core", "url": f"tcp://127.0.0.1:{port}", "protocols": ["core"]}]


async def pause(seconds: float) -> None:
    await deferLater(reactor, seconds, lambda: None)


# -- /status ------------------------------------------------------------------------------


def bridge_in(document: dict[str, Any], name: str) -> dict[str, Any]:
    """One bridge's entry of a ``/status`` document."""
    for entry in document.get("bridges", ()):
        if entry["name"] == name:
            return dict(entry)
    raise AssertionError(f"no bridge {name!r} in /status: {document.get('bridges')}")


async def wait_bridge(
    node: NodeProcess,
    name: str,
    condition: Callable[[dict[str, Any]], bool],
    what: str,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Read ``/status`` until bridge ``name``'s entry meets ``condition``; fail naming
    ``what`` and the last entry after ``timeout`` seconds (observing a node from outside
    has no event to wait on, so this polls, with a deadline)."""
    deadline = time.monotonic() + timeout
    entry: dict[str, Any] | str = "no /status read"
    while True:
        try:
            entry = bridge_in(await status(node), name)
        except AssertionError as missing:
            entry = str(missing)
        else:
            if condition(entry):
                return entry
        if time.monotonic() >= deadline:
            raise AssertionError(f"bridge {name}: {what}: not within {timeout}s; last: {entry}")
        await pause(POLL_INTERVAL)


async def wait_queue_empty(node: NodeProcess, queue: str, timeout: float = 60.0) -> None:
    """Until ``queue`` on ``node`` holds nothing, not even in flight."""
    deadline = time.monotonic() + timeout
    while True:
        document = await status(node)
        found = [q for q in document["queues"] if q["name"] == queue]
        if found and found[0]["depth"] == 0 and found[0]["in_flight"] == 0:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"queue {queue} not empty within {timeout}s: {found}")
        await pause(POLL_INTERVAL)


# -- txbridge ctl -------------------------------------------------------------------------


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ROOT), check=False
    )


async def ctl(
    node: NodeProcess, *args: str, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``txbridge ctl --url NODE ARGS``, run in a thread so the reactor keeps reading the
    nodes' output (a node blocks once its output pipe fills)."""
    from twisted.internet.threads import deferToThread

    argv = [str(BIN / "txbridge"), "ctl", "--url", node.management_url, *args]
    done: subprocess.CompletedProcess[str] = await deferToThread(_run, argv, timeout)
    return done


# -- a TCP proxy that can be cut, and can read slowly --------------------------------------


class _Upstream(Protocol):
    """The proxy's connection to the target, paired with one accepted connection."""

    def __init__(self, downstream: _Downstream) -> None:
        self.downstream = downstream

    def connectionMade(self) -> None:
        self.downstream.upstream = self
        assert self.transport is not None and self.downstream.transport is not None
        self.transport.registerProducer(self.downstream.transport, True)  # type: ignore[attr-defined]
        self.downstream.transport.registerProducer(self.transport, True)  # type: ignore[attr-defined]
        pending, self.downstream.pending = self.downstream.pending, []
        self.transport.writeSequence(pending)
        self.downstream.transport.resumeProducing()  # type: ignore[attr-defined]

    def dataReceived(self, data: bytes) -> None:
        assert self.downstream.transport is not None
        self.downstream.transport.write(data)
        self.downstream.proxy.throttle(self, len(data))

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        self.downstream.proxy.throttled.pop(self, None)
        if self.downstream.transport is not None:
            self.downstream.transport.loseConnection()


class _UpstreamFactory(ClientFactory):
    def __init__(self, downstream: _Downstream) -> None:
        self.downstream = downstream

    def buildProtocol(self, addr: Any) -> _Upstream:
        return _Upstream(self.downstream)

    def clientConnectionFailed(self, connector: Any, reason: Failure) -> None:
        if self.downstream.transport is not None:
            self.downstream.transport.loseConnection()


class _Downstream(Protocol):
    """A connection accepted by the proxy."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.upstream: _Upstream | None = None
        self.pending: list[bytes] = []

    def connectionMade(self) -> None:
        self.proxy.connections.add(self)
        assert self.transport is not None
        self.transport.pauseProducing()  # type: ignore[attr-defined]
        reactor.connectTCP(  # type: ignore[attr-defined]
            "127.0.0.1", self.proxy.target_port, _UpstreamFactory(self), timeout=5
        )

    def dataReceived(self, data: bytes) -> None:
        if self.upstream is None or self.upstream.transport is None:
            self.pending.append(data)
        else:
            self.upstream.transport.write(data)

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        self.proxy.connections.discard(self)
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.loseConnection()
        if not self.proxy.connections and self.proxy.all_closed is not None:
            done, self.proxy.all_closed = self.proxy.all_closed, None
            done.callback(None)


class Proxy(Factory):
    """A loopback TCP proxy to ``127.0.0.1:target_port``, in this process's reactor.

    ``cut()`` aborts every connection through it (both ends see a reset, as when a
    network drops); ``target_port`` may change between connections (a node restarted on
    a new port). With ``read_rate`` (bytes/s) it reads from the target no faster than
    that: the consumer behind it reads at that rate, and the target sees a slow reader.
    """

    def __init__(self, target_port: int, read_rate: float | None = None) -> None:
        self.target_port = target_port
        self.read_rate = read_rate
        self.connections: set[_Downstream] = set()
        self.throttled: dict[_Upstream, IDelayedCall] = {}
        self._next_read = 0.0
        self.cuts = 0
        self.port: IListeningPort | None = None
        self.all_closed: Deferred[None] | None = None

    def listen(self) -> Proxy:
        self.port = reactor.listenTCP(0, self, interface="127.0.0.1")  # type: ignore[attr-defined]
        return self

    @property
    def url(self) -> str:
        assert self.port is not None
        return f"tcp://127.0.0.1:{self.port.getHost().port}"

    def buildProtocol(self, addr: Any) -> _Downstream:
        return _Downstream(self)

    def throttle(self, upstream: _Upstream, size: int) -> None:
        """Token bucket: after ``size`` bytes, read again once they are paid for."""
        if self.read_rate is None or upstream.transport is None:
            return
        now = time.monotonic()
        self._next_read = max(self._next_read, now) + size / self.read_rate
        wait = self._next_read - now
        if wait > 0.002 and upstream not in self.throttled:
            upstream.transport.pauseProducing()  # type: ignore[attr-defined]
            self.throttled[upstream] = reactor.callLater(wait, self._resume, upstream)  # type: ignore[attr-defined]

    def _resume(self, upstream: _Upstream) -> None:
        self.throttled.pop(upstream, None)
        if upstream.transport is not None:
            upstream.transport.resumeProducing()  # type: ignore[attr-defined]

    def cut(self) -> int:
        """Abort every connection now; how many there were."""
        cut = list(self.connections)
        for downstream in cut:
            if downstream.upstream is not None and downstream.upstream.transport is not None:
                downstream.upstream.transport.abortConnection()  # type: ignore[attr-defined]
            if downstream.transport is not None:
                downstream.transport.abortConnection()  # type: ignore[attr-defined]
        self.cuts += 1
        return len(cut)

    async def close(self) -> None:
        """Stop listening, cut what is open, and wait until every connection ended."""
        if self.port is not None:
            port, self.port = self.port, None
            await port.stopListening()
        for call in self.throttled.values():
            if call.active():
                call.cancel()
        self.throttled.clear()
        if self.connections:
            self.all_closed = Deferred()
            self.cut()
            await self.all_closed
        # Let the aborted upstream ends finish closing too.
        for _ in range(4):
            await pause(0)


# -- clients that outlive their node's restarts --------------------------------------------


async def connect_retrying(url: Callable[[], str], timeout: float = 60.0) -> Client:
    """Connect to ``url()`` (asked again at each attempt), retrying while the node is down."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client: Client = await connect(reactor, url())
            return client
        except (ClientError, ConnectionError, OSError):
            if time.monotonic() >= deadline:
                raise
            await pause(0.05)


class Producers:
    """``producers`` producers (named ``prefix`` and a number), each sending ``count`` durable
    messages of ``size`` bytes with headers ``producer`` and ``seq``, at most ``ahead``
    unconfirmed at a time, over one client per producer; a producer whose node dies
    reconnects (to ``url()``) and goes on with its next number (unconfirmed ones are not
    sent again: they may or may not arrive, and nothing is asserted of them). With
    ``paced_by`` (how many arrived at the far end), they keep at most ``lead`` messages
    ahead of it, so that they are still sending while a test injects its faults."""

    def __init__(
        self,
        url: Callable[[], str],
        address: str,
        *,
        producers: int = 2,
        count: int = 1000,
        size: int = KIB,
        ahead: int = 500,
        paced_by: Callable[[], int] | None = None,
        lead: int = 2000,
        prefix: str = "p",
    ) -> None:
        self.url = url
        self.address = address
        self.names = [f"{prefix}{number}" for number in range(producers)]
        self.count = count
        self.size = size
        self.ahead = ahead
        self.paced_by = paced_by
        self.lead = lead
        self.sent: dict[str, set[int]] = {name: set() for name in self.names}
        self.confirmed: dict[str, set[int]] = {name: set() for name in self.names}
        self.refused: list[str] = []
        self.reconnects = 0
        self._next = dict.fromkeys(self.names, 0)
        self._stopping = False
        self._clients: set[Client] = set()
        self._running: Deferred[Any] | None = None

    def start(self) -> Producers:
        self._running = DeferredList(
            [Deferred.fromCoroutine(self._produce(name)) for name in self.names],
            fireOnOneErrback=True,
            consumeErrors=True,
        )
        return self

    @property
    def total_sent(self) -> int:
        return sum(self._next.values())

    @property
    def finished(self) -> bool:
        return self._running is not None and self._running.called

    @property
    def total_confirmed(self) -> int:
        return sum(len(each) for each in self.confirmed.values())

    async def done(self, timeout: float = 120.0) -> None:
        assert self._running is not None
        self._running.addTimeout(timeout, reactor)
        try:
            await self._running
        except Exception as error:
            inner = getattr(error, "subFailure", None)
            raise inner.value if inner is not None else error from None

    async def stop(self) -> None:
        self._stopping = True
        for client in list(self._clients):
            await client.close()
        if self._running is not None and not self._running.called:
            await self.done()

    async def _produce(self, name: str) -> None:
        padding = b"x" * max(0, self.size - 16)
        while self._next[name] < self.count and not self._stopping:
            client = await connect_retrying(self.url)
            self._clients.add(client)
            try:
                await self._send(client, name, padding)
            except ClientError:
                self.reconnects += 1
            finally:
                self._clients.discard(client)
                if not client.is_closed:
                    await client.close()

    async def _send(self, client: Client, name: str, padding: bytes) -> None:
        confirmed = self.confirmed[name]
        outstanding: dict[int, None] = {}
        window: Deferred[None] | None = None
        lost: list[ClientError] = []
        limit = self.ahead

        def settled(seq: int, error: ClientError | None) -> None:
            nonlocal window
            outstanding.pop(seq, None)
            if error is None:
                confirmed.add(seq)
            elif isinstance(error, Refused):
                self.refused.append(f"{name} {seq}: {error}")
            else:
                lost.append(error)
            if window is not None and (len(outstanding) < limit or lost):
                waiting, window = window, None
                waiting.callback(None)

        while self._next[name] < self.count and not self._stopping:
            if lost:
                raise lost[0]
            if len(outstanding) >= limit:
                window = Deferred()
                await window
                continue
            if self.paced_by is not None and self.total_sent - self.paced_by() > self.lead:
                await pause(0.01)  # the far end is behind: no event for it here
                continue
            if not client.address_writable(self.address):
                await client.when_writable(self.address)
            seq = self._next[name]
            outstanding[seq] = None
            self.sent[name].add(seq)
            self._next[name] = seq + 1
            client.send_nowait(
                self.address,
                b"%s %08d " % (name.encode(), seq) + padding,
                {"producer": name, "seq": seq},
                durable=True,
                on_settled=lambda error, seq=seq: settled(seq, error),
            )
        limit = 1  # now wake once every one settled
        while outstanding and not lost:
            window = Deferred()
            await window
        if lost and outstanding:
            raise lost[0]


class Collector:
    """A consumer of ``queue`` on the target that acknowledges each message and records
    it; if its node dies it reconnects (to ``url()``) and goes on."""

    def __init__(
        self, url: Callable[[], str], queue: str, *, window_size: int | None = None
    ) -> None:
        self.url = url
        self.queue = queue
        self.window_size = window_size
        self.ids: dict[tuple[str, int], set[int]] = defaultdict(set)
        self.order: dict[str, list[int]] = defaultdict(list)
        self.paths: Counter[str] = Counter()
        """How many messages arrived with each ``_TXB_BRIDGE_PATH`` (``""``: none)."""
        self.received = 0
        self.reconnects = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self._client: Client | None = None
        self._stopping = False
        self._running: Deferred[None] | None = None
        self._waiters: list[tuple[Callable[[], bool], Deferred[None]]] = []

    def start(self) -> Collector:
        self._running = Deferred.fromCoroutine(self._run())
        return self

    async def _run(self) -> None:
        while not self._stopping:
            client = self._client = await connect_retrying(self.url)
            try:
                if self.window_size is None:
                    consumer = await client.consumer(self.queue)
                else:
                    consumer = await client.consumer(self.queue, window_size=self.window_size)
                while not self._stopping:
                    message = await consumer.receive()
                    self.take(message)
                    message.ack()
            except (ClientError, CancelledError):
                self.reconnects += 1
            finally:
                self._client = None
                if not client.is_closed:
                    await client.close()

    def take(self, message: ReceivedMessage) -> None:
        headers = message.headers
        producer, seq = str(headers["producer"]), int(headers["seq"])  # type: ignore[arg-type]
        key = (producer, seq)
        if message.id not in self.ids[key]:
            self.order[producer].append(seq)
        self.ids[key].add(message.id)
        self.paths[str(headers.get(BRIDGE_PATH, ""))] += 1
        self.received += 1
        self.last_at = time.monotonic()
        if self.first_at is None:
            self.first_at = self.last_at
        ready = [w for w in self._waiters if w[0]()]
        self._waiters = [w for w in self._waiters if w not in ready]
        for _, waiter in ready:
            waiter.callback(None)

    def has(self, producer: str, seq: int) -> bool:
        return (producer, seq) in self.ids

    def distinct(self) -> int:
        return len(self.ids)

    async def until(self, condition: Callable[[], bool], what: str, timeout: float) -> None:
        """Wait (event-driven, on each message) until ``condition()``; fail after ``timeout``."""
        if condition():
            return
        waiter: Deferred[None] = Deferred()
        self._waiters.append((condition, waiter))
        waiter.addTimeout(timeout, reactor)
        try:
            await waiter
        except Exception:
            raise AssertionError(
                f"{what}: not within {timeout}s ({self.distinct()} distinct received)"
            ) from None

    def duplicates(self) -> list[tuple[str, int]]:
        """The (producer, seq) pairs that arrived as more than one message on the target."""
        return sorted(key for key, ids in self.ids.items() if len(ids) > 1)

    async def stop(self) -> None:
        self._stopping = True
        for _, waiter in self._waiters:
            if not waiter.called:
                waiter.cancel()
        if self._client is not None:
            await self._client.close()
        if self._running is not None:
            await self._running


def check_delivered(producers: Producers, collector: Collector) -> None:
    """Every confirmed send arrived, nothing arrived that was not sent, nothing twice."""
    for name in producers.names:
        got = {seq for (who, seq) in collector.ids if who == name}
        lost = producers.confirmed[name] - got
        assert not lost, f"{name}: {len(lost)} confirmed messages lost, e.g. {sorted(lost)[:5]}"
        extra = got - producers.sent[name]
        assert not extra, f"{name}: {len(extra)} messages never sent arrived: {sorted(extra)[:5]}"
    duplicated = collector.duplicates()
    assert not duplicated, f"{len(duplicated)} messages arrived twice, e.g. {duplicated[:5]}"
