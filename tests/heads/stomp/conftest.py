"""A node with the STOMP head (and the core head, for interop) on loopback TCP, and two
kinds of client: a raw one that writes exact bytes and reads frames (for transcripts and
every rule a client can break), and stomp.py, a real, widely used client.

stomp.py blocks and runs its own threads, so its calls go to the reactor's thread pool
and its callbacks come back with ``callFromThread``; the fixture joins its threads, so
no test leaves one behind.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import pytest_twisted
import stomp
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Protocol, connectionDone
from twisted.internet.threads import deferToThread
from twisted.python.failure import Failure

from bridge.config.node import parse_node_config
from bridge.heads.core import CoreHead
from bridge.heads.stomp import StompHead, StompSettings
from bridge.heads.stomp.frames import (
    NEED_DATA,
    SERVER_COMMANDS,
    Command,
    Frame,
    FrameParser,
    Limits,
    Version,
    serialize_bytes,
)
from bridge.node.broker import Broker
from bridge.store.sqlite import SQLiteMessageStore
from security import SecurityStore
from tests.heads.conftest import CONFIG, SECURITY
from tests.security.helpers import write_users
from transport.partial import PartialFrameLimits
from transport.tls import TLSConfig

TIMEOUT = 30.0
"""The longest a test waits for an event: generous, so a loaded machine is not a failure
(a 16 MiB body took over 10 s at a load average of 14)."""


class RawClient(Protocol):
    """A STOMP peer that sends exact bytes and collects the node's frames."""

    def __init__(self) -> None:
        self.parser = FrameParser(Limits(max_body=64 * 1024 * 1024), SERVER_COMMANDS)
        self.frames: list[Frame] = []
        self.heart_beats = 0
        self.received = bytearray()
        self.lost: Deferred[BaseException] = Deferred()
        self._waiting: list[tuple[Callable[[], bool], Deferred[None]]] = []

    def dataReceived(self, data: bytes) -> None:
        self.received += data
        self.parser.feed(data)
        while True:
            event = self.parser.next_event()
            if event is NEED_DATA:
                break
            if isinstance(event, Frame):
                if event.command is Command.CONNECTED:
                    self.parser.version = Version(event.header("version") or "1.0")
                self.frames.append(event)
            else:
                self.heart_beats += 1
        self._wake()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.lost.callback(reason.value)
        self._wake()

    def _wake(self) -> None:
        for test, waiter in list(self._waiting):
            if test():
                self._waiting.remove((test, waiter))
                waiter.callback(None)

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def send(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        version = self.parser.version or Version.V1_0
        frame = Frame(Command(command), tuple((headers or {}).items()), body)
        self.write(serialize_bytes(frame, version))

    async def until(self, test: Callable[[], bool], timeout: float = TIMEOUT) -> None:
        if test():
            return
        waiter: Deferred[None] = Deferred()
        self._waiting.append((test, waiter))
        waiter.addTimeout(timeout, reactor)
        await waiter

    def of(self, command: str) -> list[Frame]:
        return [frame for frame in self.frames if frame.command == command]

    async def next(self, command: str, count: int = 1) -> Frame:
        """The ``count``-th frame of ``command`` received (waiting for it)."""
        await self.until(lambda: len(self.of(command)) >= count)
        return self.of(command)[count - 1]

    async def receipt(self, receipt_id: str) -> Frame:
        def found() -> list[Frame]:
            return [f for f in self.of("RECEIPT") if f.header("receipt-id") == receipt_id]

        await self.until(lambda: bool(found()) or bool(self.of("ERROR")))
        assert not self.of("ERROR"), self.of("ERROR")
        return found()[0]

    async def error(self) -> Frame:
        """The ERROR frame, once the node has also closed the connection."""
        await self.until(lambda: self.lost.called)
        [error] = self.of("ERROR")
        return error

    async def connect(
        self,
        version: str = "1.2",
        login: str | None = None,
        passcode: str | None = None,
        **more: str,
    ) -> Frame:
        headers = {"accept-version": version, "host": "localhost", **more}
        if login is not None:
            headers["login"] = login
        if passcode is not None:
            headers["passcode"] = passcode
        self.send("CONNECT", headers)
        await self.until(lambda: bool(self.of("CONNECTED") or self.of("ERROR")))
        return self.frames[-1]

    def close(self) -> Deferred[BaseException]:
        if not self.lost.called:
            assert self.transport is not None
            self.transport.resumeProducing()
            self.transport.loseConnection()
        return self.lost


class Listener(stomp.ConnectionListener):  # type: ignore[misc]
    """Collects what stomp.py hears, in the reactor thread."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.errors: list[Any] = []
        self.receipts: list[str] = []
        self.disconnected = False
        self.heartbeat_timeouts = 0
        self.on_message_hook: Callable[[Any], None] | None = None

    def on_message(self, frame: Any) -> None:
        reactor.callFromThread(self._record, self.messages.append, frame)

    def on_error(self, frame: Any) -> None:
        reactor.callFromThread(self._record, self.errors.append, frame)

    def on_receipt(self, frame: Any) -> None:
        reactor.callFromThread(self._record, self.receipts.append, frame.headers["receipt-id"])

    def on_disconnected(self) -> None:
        reactor.callFromThread(self._record, lambda _: setattr(self, "disconnected", True), None)

    def on_heartbeat_timeout(self) -> None:
        reactor.callFromThread(self._record, lambda _: setattr(self, "heartbeat_timeouts", 1), None)

    def _record(self, add: Callable[[Any], None], item: Any) -> None:
        add(item)
        if self.on_message_hook is not None and item is not None and add == self.messages.append:
            self.on_message_hook(item)
        for test, waiter in list(_WAITING):
            if test():
                _WAITING.remove((test, waiter))
                waiter.callback(None)

    async def until(self, test: Callable[[], bool], timeout: float = TIMEOUT) -> None:
        """Wait (bounded) until ``test()`` holds; any listener's event checks it again, so
        it may look at several clients."""
        if test():
            return
        waiter: Deferred[None] = Deferred()
        _WAITING.append((test, waiter))
        waiter.addTimeout(timeout, reactor)
        try:
            await waiter
        finally:
            if (test, waiter) in _WAITING:
                _WAITING.remove((test, waiter))


_WAITING: list[tuple[Callable[[], bool], Deferred[None]]] = []


CONNECTIONS = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}


class StompPy:
    """One stomp.py connection, driven from the reactor."""

    def __init__(self, port: int, version: str = "1.2", **options: Any) -> None:
        self.version = version
        self.conn = CONNECTIONS[version]([("127.0.0.1", port)], auto_decode=False, **options)
        self.listener = Listener()
        self.conn.set_listener("test", self.listener)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Deferred[Any]:
        """A stomp.py method, run in the thread pool (it may block)."""
        return deferToThread(getattr(self.conn, name), *args, **kwargs)

    async def connect(
        self, login: str | None = None, passcode: str | None = None, **kw: Any
    ) -> None:
        await self.call("connect", login, passcode, wait=True, **kw)

    async def send(self, destination: str, body: bytes | str = b"", **headers: Any) -> None:
        await self.call("send", destination, body, headers=headers)

    async def confirmed_send(
        self, destination: str, body: bytes | str = b"", **headers: Any
    ) -> None:
        """A SEND with a receipt, waiting for it."""
        receipt = f"send-{time.monotonic_ns()}"
        await self.call("send", destination, body, headers={**headers, "receipt": receipt})
        await self.receipt(receipt)

    async def receipt(self, receipt_id: str) -> None:
        await self.listener.until(
            lambda: receipt_id in self.listener.receipts or bool(self.listener.errors)
        )
        assert not self.listener.errors, [e.headers for e in self.listener.errors]

    async def messages(self, count: int) -> list[Any]:
        await self.listener.until(lambda: len(self.listener.messages) >= count)
        return self.listener.messages[:count]

    async def disconnect(self) -> None:
        if self.listener.errors:
            # The node closed the connection after its ERROR; stomp.py's reader would
            # spin on a TLS socket closed so, until told to stop.
            self.conn.transport.running = False
            await deferToThread(self.conn.transport.disconnect_socket)
        elif self.conn.is_connected():
            receipt = f"bye-{time.monotonic_ns()}"
            await self.call("disconnect", receipt=receipt)

    def ack(self, frame: Any, **headers: Any) -> Deferred[Any]:
        """Acknowledge as the client's version asks (ack id, or message-id)."""
        return self._settle("ack", frame, headers)

    def nack(self, frame: Any, **headers: Any) -> Deferred[Any]:
        return self._settle("nack", frame, headers)

    def _settle(self, name: str, frame: Any, headers: dict[str, Any]) -> Deferred[Any]:
        if self.version == "1.2":
            return self.call(name, frame.headers["ack"], **headers)
        if self.version == "1.1":
            return self.call(
                name, frame.headers["message-id"], frame.headers["subscription"], **headers
            )
        return self.call(name, frame.headers["message-id"], **headers)


@attrs.define
class StompNode:
    """A broker with the STOMP and core heads listening on loopback ports."""

    path: Path
    security_table: dict[str, Any] | None = None
    settings: StompSettings = attrs.Factory(lambda: StompSettings(ttl=None, heart_beat=None))
    tls: TLSConfig | None = None
    partial_frames: PartialFrameLimits | None = None
    extra: dict[str, Any] = attrs.Factory(dict)
    """Configuration keys replacing CONFIG's."""
    broker: Broker | None = None
    head: StompHead | None = None
    core: CoreHead | None = None
    port: IListeningPort | None = None
    core_port: IListeningPort | None = None
    raw_clients: list[RawClient] = attrs.Factory(list)
    stomp_clients: list[StompPy] = attrs.Factory(list)

    async def start(self) -> StompNode:
        document = CONFIG | self.extra
        if self.security_table is not None:
            document["security"] = self.security_table
        config = parse_node_config(document, self.path / "node.toml")
        self.broker = Broker(config, SQLiteMessageStore(config.data_dir, reactor))
        await self.broker.open()
        security = SecurityStore(config.security, time.monotonic)
        self.head = StompHead(self.broker, security, reactor=reactor)
        scheme = "tls" if self.tls is not None else "tcp"
        self.port = await self.head.listen(
            f"{scheme}://127.0.0.1:0",
            settings=self.settings,
            tls=self.tls,
            partial_frames=self.partial_frames,
        )
        self.core = CoreHead(self.broker, security, node_name="a", node_id="id-a", reactor=reactor)
        self.core_port = await self.core.listen("tcp://127.0.0.1:0")
        return self

    @property
    def port_number(self) -> int:
        assert self.port is not None
        return int(self.port.getHost().port)

    @property
    def core_url(self) -> str:
        assert self.core_port is not None
        return f"tcp://127.0.0.1:{self.core_port.getHost().port}"

    async def raw(self) -> RawClient:
        client = RawClient()
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", self.port_number)
        await connectProtocol(endpoint, client)
        self.raw_clients.append(client)
        return client

    async def client(self, version: str = "1.2", **connect: Any) -> StompPy:
        """A connected stomp.py client (``connect``: login, passcode, headers)."""
        client = self.stomp(version)
        await client.connect(**connect)
        return client

    def stomp(self, version: str = "1.2", **options: Any) -> StompPy:
        client = StompPy(self.port_number, version, **options)
        self.stomp_clients.append(client)
        return client

    async def stop(self) -> None:
        assert self.port is not None and self.head is not None and self.broker is not None
        assert self.core_port is not None and self.core is not None
        for client in self.stomp_clients:
            await client.disconnect()
        for raw in self.raw_clients:
            await raw.close()
        await self.port.stopListening()
        await self.core_port.stopListening()
        await self.head.close_connections("node stopping")
        await self.core.close_connections("node stopping")
        await self.broker.close()

    async def restart(self) -> StompNode:
        await self.stop()
        self.raw_clients.clear()
        self.stomp_clients.clear()
        return await self.start()


def _join_new_threads(before: set[threading.Thread]) -> None:
    """stomp.py's reader and heart-beat threads end once their socket closes."""
    for thread in set(threading.enumerate()) - before:
        if not thread.name.startswith("PoolThread-"):
            pytest_twisted.blockon(deferToThread(thread.join, TIMEOUT))


def _run(node: StompNode) -> Iterator[StompNode]:
    before = set(threading.enumerate())
    running = pytest_twisted.blockon(Deferred.fromCoroutine(node.start()))
    yield running
    pytest_twisted.blockon(Deferred.fromCoroutine(running.stop()))
    _join_new_threads(before)


@pytest.fixture
def stomp_node(tmp_path: Path) -> Iterator[StompNode]:
    yield from _run(StompNode(tmp_path))


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``await make_node(settings=..., tls=...)``: nodes with their own settings, started
    inside a test and stopped after it."""
    before = set(threading.enumerate())
    started: list[StompNode] = []

    async def make(**options: Any) -> StompNode:
        node = StompNode(tmp_path / f"node-{len(started)}", **options)
        started.append(node)
        return await node.start()

    yield make
    for node in started:
        pytest_twisted.blockon(Deferred.fromCoroutine(node.stop()))
    _join_new_threads(before)


USERS = {
    "alice": ("alice-secret", ["producers"]),
    "bob": ("bob-secret", ["consumers"]),
    "carol": ("carol-secret", ["browsers"]),
    "root": ("root-secret", ["admins"]),
}


@pytest.fixture
def secure_stomp_node(tmp_path: Path) -> Iterator[StompNode]:
    write_users(tmp_path / "users.toml", USERS)
    yield from _run(StompNode(tmp_path, SECURITY))
