"""The client against the real node: a Broker on SQLite behind the core head
(``bridge.heads.core.listen_core``), security disabled, on loopback TCP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from bridge.client.api import Client, connect
from bridge.config.node import parse_node_config
from bridge.heads.core import listen_core
from bridge.node.broker import Broker
from bridge.store.sqlite import SQLiteMessageStore
from security.config import SecuritySettings
from security.store import SecurityStore

CONFIG: dict[str, Any] = {
    "node": {"name": "a", "data-dir": "data"},
    "address": [{"name": "orders", "routing": "anycast"}],
}


class RealNode:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.clients: list[Client] = []

    async def start(self) -> RealNode:
        config = parse_node_config(CONFIG, self.path / "node.toml")
        self.broker = Broker(config, SQLiteMessageStore(config.data_dir, reactor))
        await self.broker.open()
        security = SecurityStore(SecuritySettings(enabled=False), time.monotonic)
        self.port = await listen_core(
            reactor, "tcp://127.0.0.1:0", self.broker, security, node_name="a", node_id="id-a"
        )
        self.url = f"tcp://127.0.0.1:{self.port.getHost().port}"
        return self

    async def client(self, **options: Any) -> Client:
        client = await connect(reactor, self.url, **options)
        self.clients.append(client)
        return client

    async def stop(self) -> None:
        for client in self.clients:
            await client.close()
        await self.port.stopListening()
        await self.broker.close()


@pytest.fixture
def real(tmp_path: Path) -> Iterator[RealNode]:
    node = pytest_twisted.blockon(Deferred.fromCoroutine(RealNode(tmp_path).start()))
    yield node
    pytest_twisted.blockon(Deferred.fromCoroutine(node.stop()))


@pytest_twisted.ensureDeferred
async def test_send_confirm_consume_ack(real):
    client = await real.client()
    assert client.node_name == "a"
    await client.send("orders", b"one", {"n": 1})
    consumer = await client.consumer("orders")
    message = await consumer.receive()
    assert (message.body, message.headers, message.delivery_count) == (b"one", {"n": 1}, 1)
    await message.ack_durably()
    await consumer.close()


@pytest_twisted.ensureDeferred
async def test_redelivery_counts_after_a_consumer_closes(real):
    client = await real.client()
    await client.send("orders", b"again")
    first = await client.consumer("orders")
    assert (await first.receive()).delivery_count == 1
    await first.close()
    second = await client.consumer("orders")
    message = await second.receive()
    assert (message.body, message.delivery_count) == (b"again", 2)
    message.ack()
    await second.close()


@pytest_twisted.ensureDeferred
async def test_transaction_commit_and_rollback(real):
    client = await real.client()
    tx = await client.begin()
    await client.send("orders", b"rolled back", tx=tx)
    await tx.rollback()
    tx = await client.begin()
    await client.send("orders", b"committed", tx=tx)
    await tx.commit()
    consumer = await client.consumer("orders")
    message = await consumer.receive()
    assert message.body == b"committed"
    message.ack()
    await consumer.close()


@pytest_twisted.ensureDeferred
async def test_browse_and_filter(real):
    client = await real.client()
    await client.send("orders", b"blue", {"colour": "blue"})
    await client.send("orders", b"red", {"colour": "red"})
    browser = await client.consumer("orders", browse_only=True)
    assert [(await browser.receive()).body for _ in range(2)] == [b"blue", b"red"]
    await browser.close()
    reds = await client.consumer("orders", filter="colour = 'red'")
    message = await reds.receive()
    assert message.body == b"red"
    message.ack()
    await reds.close()


@pytest_twisted.ensureDeferred
async def test_a_large_message_from_a_file(real, tmp_path):
    body = bytes(range(256)) * 1024  # 256 KiB
    path = tmp_path / "body.bin"
    path.write_bytes(body)
    client = await real.client()
    with path.open("rb") as file:
        await client.send("orders", file)
    consumer = await client.consumer("orders")
    message = await consumer.receive()
    assert message.body_file.read() == body
    message.ack()
    await consumer.close()
