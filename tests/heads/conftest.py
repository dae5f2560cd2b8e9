"""A core node on loopback TCP for the head tests, and a wire-level peer to talk to it.

The peer is deliberately raw (packets in, packets out) so the tests can break every
session rule; the real client is tested in tests/client.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IListeningPort
from twisted.internet.task import deferLater
from zope.interface import implementer

from bridge.config.node import parse_node_config
from bridge.heads.core import CoreHead
from bridge.message import Message
from bridge.node.broker import Broker
from bridge.protocol import PACKET_TYPES, decode_packet, encode_packet
from bridge.protocol import packets as p
from bridge.store.sqlite import SQLiteMessageStore
from security import SecurityStore
from tests.security.helpers import write_users
from transport.endpoints import connect
from transport.frames import Frame
from transport.interfaces import IFrameConnection, IFrameReceiver
from transport.settings import ConnectionSettings

CONFIG: dict[str, Any] = {
    "node": {"name": "a", "data-dir": "data"},
    "address": [
        {"name": "orders", "routing": "anycast"},
        {"name": "news", "routing": "multicast"},
    ],
    "address-setting": [{"match": "private.#", "auto-create-addresses": False}],
}

SECURITY: dict[str, Any] = {
    "enabled": True,
    "users-file": "users.toml",
    "setting": [
        {
            "match": "orders.#",
            "send": ["producers", "admins"],
            "consume": ["consumers", "admins"],
            "browse": ["browsers", "admins"],
        },
        {
            "match": "#",
            "create-address": ["admins"],
            "create-durable-queue": ["admins"],
            "delete-durable-queue": ["admins"],
            "create-non-durable-queue": ["admins"],
            "delete-non-durable-queue": ["admins"],
            "send": ["admins"],
            "consume": ["admins"],
            "browse": ["admins"],
        },
    ],
}


@implementer(IFrameReceiver)
class Peer:
    """A raw core-protocol peer: sends packets, collects what the node answers. A
    DELIVER_MANY is collected as the DELIVERs it stands for; ``packets`` keeps what came
    as it came."""

    def __init__(self) -> None:
        self.received: list[p.Packet | Frame] = []
        self.packets: list[p.Packet | Frame] = []
        self.connection: IFrameConnection | None = None
        self._waiting: list[tuple[Any, Deferred[Any]]] = []
        self.lost: Deferred[BaseException] = Deferred()

    def connection_made(self, connection: IFrameConnection) -> None:
        self.connection = connection

    def frame_received(self, frame: Frame) -> None:
        item: p.Packet | Frame = (
            decode_packet(frame.type, frame.payload) if frame.type in PACKET_TYPES else frame
        )
        self.packets.append(item)
        if isinstance(item, p.DeliverMany):
            self.received += [
                p.Deliver(item.consumer_id, item.first_delivery_id + i, item.delivery_count, m)
                for i, m in enumerate(item.messages)
            ]
        else:
            self.received.append(item)
        self._wake()

    def connection_lost(self, reason: BaseException) -> None:
        self.lost.callback(reason)
        self._wake()

    def _wake(self) -> None:
        for test, waiter in list(self._waiting):
            if test():
                self._waiting.remove((test, waiter))
                waiter.callback(None)

    def send(self, *packets: p.Packet) -> None:
        assert self.connection is not None
        for packet in packets:
            self.connection.send(*encode_packet(packet))

    async def until(self, test: Any, timeout: float = 10.0) -> None:
        """Wait (bounded) until ``test()`` holds."""
        if test():
            return
        waiter: Deferred[None] = Deferred()
        self._waiting.append((test, waiter))
        waiter.addTimeout(timeout, reactor)
        await waiter

    def of(self, kind: type) -> list[Any]:
        return [item for item in self.received if isinstance(item, kind)]

    async def next(self, kind: type, count: int = 1) -> Any:
        """The ``count``-th packet of ``kind`` received (waiting for it)."""
        await self.until(lambda: len(self.of(kind)) >= count)
        return self.of(kind)[count - 1]

    async def reply(self, request_id: int) -> p.Ok | p.Failed | p.AddressInfo:
        def answered() -> list[Any]:
            return [
                r
                for r in self.received
                if isinstance(r, p.Ok | p.Failed | p.AddressInfo) and r.request_id == request_id
            ]

        await self.until(lambda: bool(answered()))
        return answered()[0]  # type: ignore[no-any-return]

    async def confirmed(self, sequence: int) -> None:
        await self.until(
            lambda: any(c.up_to_sequence >= sequence for c in self.of(p.SendConfirmed))
        )

    def close(self) -> Deferred[BaseException]:
        assert self.connection is not None
        self.connection.close()
        return self.lost


async def eventually(test: Any, timeout: float = 10.0) -> None:
    """Wait (bounded) until ``test()`` holds, for what no peer event announces (files, the
    node's state): checked every few milliseconds."""
    deadline = reactor.seconds() + timeout
    while not test():
        if reactor.seconds() > deadline:
            raise AssertionError(f"still not so after {timeout}s: {test}")
        await deferLater(reactor, 0.005, lambda: None)


class WatchedStore(SQLiteMessageStore):
    """The SQLite store, keeping the Deferred of each body file it deletes: the deletion
    runs later on the writer thread, so a test awaits ``discarded()`` before it looks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.discards: list[Deferred[None]] = []

    def discard_body(self, path: str) -> Deferred[None]:
        done = super().discard_body(path)
        self.discards.append(done)
        return done

    async def discarded(self) -> int:
        """Wait (bounded) until every deletion asked so far is done; how many there were."""
        pending = list(self.discards)
        await DeferredList(pending).addTimeout(10, reactor)
        return len(pending)


def message(address: str, body: bytes = b"x", durable: bool = True, **headers: Any) -> Message:
    return Message(id=0, address=address, durable=durable, headers=headers, body=body)


@attrs.define
class Node:
    """A broker with the core head listening on a loopback port."""

    path: Path
    security_table: dict[str, Any] | None = None
    extra: dict[str, Any] = attrs.Factory(dict)
    """Configuration keys replacing CONFIG's."""
    producer_window_size: int = p.UNLIMITED
    settings: ConnectionSettings | None = None
    broker: Broker | None = None
    store: WatchedStore | None = None
    head: CoreHead | None = None
    port: IListeningPort | None = None
    peers: list[Peer] = attrs.Factory(list)
    name: str = "a"

    async def start(self) -> Node:
        document = CONFIG | self.extra
        if self.security_table is not None:
            document["security"] = self.security_table
        config = parse_node_config(document, self.path / "node.toml")
        self.store = WatchedStore(config.data_dir, reactor)
        self.broker = Broker(config, self.store)
        await self.broker.open()
        security = SecurityStore(config.security, time.monotonic)
        self.head = CoreHead(
            self.broker, security, node_name=self.name, node_id=f"id-{self.name}", reactor=reactor
        )
        self.port = await self.head.listen(
            "tcp://127.0.0.1:0",
            settings=self.settings,
            producer_window_size=self.producer_window_size,
        )
        return self

    async def peer(
        self,
        *,
        connect_as: tuple[str | None, str | None] | None = (None, None),
        max_frame_size: int = p.FRAME_SIZE_UNSTATED,
    ) -> Peer:
        """A connected peer; with ``connect_as`` it has sent CONNECT (stating
        ``max_frame_size``) and got the answer."""
        assert self.port is not None
        peer = Peer()
        address = self.port.getHost()
        await connect(reactor, f"tcp://127.0.0.1:{address.port}", peer, accepted_types=PACKET_TYPES)
        self.peers.append(peer)
        if connect_as is not None:
            user, password = connect_as
            peer.send(
                p.Connect(p.PROTOCOL_VERSION, "test", user, password, 1 << 20, max_frame_size)
            )
            await peer.until(lambda: bool(peer.of(p.Connected) or peer.of(p.Failed)))
        return peer

    async def stop(self) -> None:
        assert self.port is not None and self.head is not None and self.broker is not None
        await self.port.stopListening()
        await self.head.close_connections("node stopping")
        for peer in self.peers:
            if not peer.lost.called:
                await peer.close()
        await self.broker.close()

    async def restart(self) -> Node:
        await self.stop()
        self.peers.clear()
        return await self.start()


@pytest.fixture
def node(tmp_path: Path) -> Any:
    running = pytest_twisted.blockon(Deferred.fromCoroutine(Node(tmp_path).start()))
    yield running
    pytest_twisted.blockon(Deferred.fromCoroutine(running.stop()))


@pytest.fixture
def secure_node(tmp_path: Path) -> Any:
    write_users(
        tmp_path / "users.toml",
        {
            "alice": ("alice-secret", ["producers"]),
            "bob": ("bob-secret", ["consumers"]),
            "carol": ("carol-secret", ["browsers"]),
            "root": ("root-secret", ["admins"]),
        },
    )
    running = pytest_twisted.blockon(Deferred.fromCoroutine(Node(tmp_path, SECURITY).start()))
    yield running
    pytest_twisted.blockon(Deferred.fromCoroutine(running.stop()))


@pytest.fixture
def no_cycle_collector() -> Iterator[None]:
    """The cycle collector off for the test: what is freed is freed by reference counts,
    as a closed connection's objects must be."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
