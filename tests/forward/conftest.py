"""Two or more real nodes in this process (broker, SQLite store, core head on loopback
TCP), bridges between them, and the core client to produce and consume.

The bridges run in the same reactor as the nodes they join; their connections are real
TCP connections through the real core head, as between node processes. Whole node
processes are the system tests' business (tests/system/test_bridge_*.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IListeningPort
from twisted.internet.task import deferLater

from bridge.client.api import Client, ReceivedMessage, connect
from bridge.config.bridges import BridgeConfig
from bridge.config.node import parse_node_config
from bridge.forward.manager import Bridges, client_connector
from bridge.heads.core import CoreHead
from bridge.node.broker import Broker
from bridge.store.sqlite import SQLiteMessageStore
from security import SecurityStore
from transport.urls import URL, parse_url


async def eventually(test: Any, timeout: float = 15.0) -> None:
    """Wait (bounded) until ``test()`` holds, for states no event announces."""
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not so after {timeout}s: {test}")
        await deferLater(reactor, 0.005, lambda: None)


@attrs.frozen
class Loaded:
    bridges: tuple[BridgeConfig, ...]
    errors: tuple[Exception, ...] = ()


@attrs.define
class TestNode:
    """A node with its core head on loopback, and optionally bridges."""

    path: Path
    name: str
    config: dict[str, Any]
    port_number: int = 0
    broker: Broker | None = None
    head: CoreHead | None = None
    port: IListeningPort | None = None
    bridges: Bridges | None = None
    bridge_configs: list[BridgeConfig] = attrs.Factory(list)

    @property
    def url(self) -> URL:
        return parse_url(f"tcp://127.0.0.1:{self.port_number}")

    async def start(self) -> TestNode:
        settings = dict(self.config)
        window = settings.pop("producer-window-size", -1)
        document = {"node": {"name": self.name, "data-dir": "data"}} | settings
        config = parse_node_config(document, self.path / "node.toml")
        self.broker = Broker(config, SQLiteMessageStore(config.data_dir, reactor))
        await self.broker.open()
        security = SecurityStore(config.security, time.monotonic)
        self.head = CoreHead(
            self.broker, security, node_name=self.name, node_id=f"id-{self.name}", reactor=reactor
        )
        self.port = await self.head.listen(
            f"tcp://127.0.0.1:{self.port_number}", producer_window_size=window
        )
        self.port_number = self.port.getHost().port
        if self.bridge_configs:
            self.start_bridges()
        return self

    def start_bridges(self, *configs: BridgeConfig) -> Bridges:
        assert self.broker is not None
        self.bridge_configs.extend(configs)
        self.bridges = Bridges(
            self.broker,
            f"id-{self.name}",
            reactor,
            client_connector(reactor, self.name),
            lambda: Loaded(tuple(self.bridge_configs)),
        )
        self.bridges.start_all()
        return self.bridges

    def drop_connections(self) -> Deferred[None]:
        """Cut every client connection to this node (the node keeps listening)."""
        assert self.head is not None
        return Deferred.fromCoroutine(self.head.close_connections("dropped by the test"))

    async def stop(self) -> None:
        if self.bridges is not None:
            await self.bridges.stop_all()
            self.bridges = None
        if self.port is not None:
            await self.port.stopListening()
            self.port = None
        if self.head is not None:
            await self.head.close_connections("node stopping")
            self.head = None
        if self.broker is not None:
            await self.broker.close()
            self.broker = None

    def depth(self, queue: str) -> int:
        assert self.broker is not None
        return self.broker.queue(queue).depth


def bridge_config(name: str, queue: str, *targets: URL, **changes: Any) -> BridgeConfig:
    """A bridge as a [[bridge]] table would give it, with fast retries for tests."""
    settings: dict[str, Any] = {
        "retry_interval": 0.05,
        "max_retry_interval": 0.2,
        "retry_interval_multiplier": 2.0,
        "pending_ack_timeout": 5.0,
    }
    settings.update(changes)
    return BridgeConfig(
        name=name,
        queue=queue,
        targets=targets,
        source="bridges.toml",
        key="bridge[0]",
        **settings,
    )


class Nodes:
    """Makes test nodes and stops them after the test."""

    def __init__(self, base: Path) -> None:
        self._base = base
        self.made: list[TestNode] = []
        self.clients: list[Client] = []

    async def __call__(self, name: str, *, port: int = 0, **config: Any) -> TestNode:
        path = self._base / name
        path.mkdir(exist_ok=True)
        node = TestNode(path, name, config, port_number=port)
        self.made.append(node)
        return await node.start()

    async def client(self, node: TestNode, **options: Any) -> Client:
        client = await connect(reactor, node.url, **options)
        self.clients.append(client)
        return client

    async def stop(self) -> None:
        for client in self.clients:
            await client.close()
        for node in self.made:
            await node.stop()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    made = Nodes(tmp_path)
    yield made
    pytest_twisted.blockon(Deferred.fromCoroutine(made.stop()))


async def receive_all(
    client: Client, queue: str, count: int, timeout: float = 15.0
) -> list[ReceivedMessage]:
    """``count`` messages from ``queue``, each acknowledged."""
    consumer = await client.consumer(queue)
    got = []
    for _ in range(count):
        message = await consumer.receive().addTimeout(timeout, reactor)
        message.ack()
        got.append(message)
    await consumer.close()
    return got
