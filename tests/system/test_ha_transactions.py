"""A transacted client across a failover: nodes a (live) and b (backup) on one core port;
a client moves three messages from ``in`` to ``orders`` in one transaction (three acks,
three sends with duplicate ids), and a is killed with -9 before the commit. The client
reconnects to b; the transaction, which had sent and acknowledged, is rollback-only: its
commit raises TransactionRolledBack. The application's retry loop (docs/client.md) runs
the work again in a new transaction, which commits: each message is moved exactly once.

Once with the nodes sharing one store, once with replication (each node its own store,
b in sync with a before the messages are fed: the lease in PostgreSQL)."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor

from bridge.client.api import Client, connect
from bridge.client.errors import TransactionRolledBack
from tests.forward.conftest import eventually
from tests.postgresql import schema_url
from tests.system.bridges import free_port
from tests.system.flow import status
from tests.system.ha import PING, REAP, SLACK, ha_node
from tests.system.nodes import NodeProcess
from tests.system.replication import replicated_node
from transport.reconnect import ReconnectPolicy

QUICK = ReconnectPolicy(retry_interval=0.1, retry_interval_multiplier=1.0, max_retry_interval=0.1)
BODIES = [b"one", b"two", b"three"]


async def _move(
    client: Client, attempts: list[str], between: Callable[[], Awaitable[None]]
) -> None:
    """The retry loop of docs/client.md: receive, send on, acknowledge, commit; again in a
    new transaction when the commit says the transaction was rolled back. ``between`` is
    awaited once, after the first attempt's work and before its commit."""
    consumer = await client.consumer("in")
    first = True
    while True:
        tx = await client.begin()
        for _ in BODIES:
            message = await consumer.receive()
            await client.send("orders", message.body, tx=tx, duplicate_id=b"moved-" + message.body)
            message.ack(tx=tx)
        if first:
            await between()
            first = False
        try:
            await tx.commit()
        except TransactionRolledBack:
            attempts.append("rolled back")
            await tx.rollback()
            continue
        attempts.append("committed")
        await consumer.close()
        return


async def _queue(node: object, name: str) -> dict[str, int]:
    document = await status(node)  # type: ignore[arg-type]
    [queue] = [q for q in document["queues"] if q["name"] == name]
    return {key: queue[key] for key in ("depth", "in_flight")}


def _on_one_port(documents: dict[str, dict[str, Any]], port: int) -> None:
    """Both nodes bind ``port`` when live: one address for the client; and an ``in``."""
    for document in documents.values():
        document["acceptor"][0]["url"] = f"tcp://127.0.0.1:{port}"
        document["address"].append({"name": "in", "routing": "anycast"})


async def _moved_once_across_a_failover(
    nodes: Any,
    documents: dict[str, dict[str, Any]],
    port: int,
    backup_ready: Callable[[NodeProcess, NodeProcess], Awaitable[object]],
) -> None:
    """a live, b its backup (``backup_ready`` once b may take over); three messages in
    ``in``; the retry loop's first commit cut by a's kill -9; each moved exactly once."""
    _on_one_port(documents, port)
    a = nodes(documents["a"], name="a")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(SLACK)
    b = nodes(documents["b"], name="b")
    await backup_ready(a, b)

    feeder = await connect(reactor, a.core_url)
    for body in BODIES:
        await feeder.send("in", body)
    await feeder.close()

    client = await connect(reactor, a.core_url, reconnect=QUICK)

    async def failover() -> None:
        live = b.wait_for(r"node b: LIVE, epoch 2", REAP + PING + SLACK)
        await a.stop(signal.SIGKILL)
        await live
        await b.wait_started(SLACK)
        await eventually(lambda: client.node_name == "b", timeout=SLACK)

    attempts: list[str] = []
    try:
        await _move(client, attempts, failover)
    finally:
        await client.close()
    assert attempts == ["rolled back", "committed"]

    reader = await connect(reactor, b.core_url)
    try:
        consumer = await reader.consumer("orders")
        moved = [await consumer.receive() for _ in BODIES]
        assert sorted(m.body for m in moved) == sorted(BODIES)
        assert not any(m.redelivered for m in moved)  # the first attempt's sends were dropped
        for message in moved:
            await message.ack_durably()
        await consumer.close()
        assert await _queue(b, "orders") == {"depth": 0, "in_flight": 0}
        assert await _queue(b, "in") == {"depth": 0, "in_flight": 0}
    finally:
        await reader.close()


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_a_transaction_cut_by_a_failover_is_rolled_back_and_its_retry_commits_once(
    shared_store, nodes
):
    documents = {
        name: ha_node(name, shared_store, f"shared-store-{role}")
        for name, role in (("a", "primary"), ("b", "backup"))
    }

    async def waiting(a: NodeProcess, b: NodeProcess) -> None:
        await b.wait_for(r"node b: live is a, epoch 1", SLACK)

    await _moved_once_across_a_failover(nodes, documents, free_port(), waiting)


@pytest.mark.system
@pytest_twisted.ensureDeferred
async def test_a_transaction_cut_by_a_replication_failover_is_rolled_back_and_retried_once(
    pg_schema, nodes
):
    lease_url, port = schema_url(pg_schema), free_port()  # b finds a where the live one is
    documents = {
        name: replicated_node(name, f"replication-{role}", lease_url, port, port)
        for name, role in (("a", "primary"), ("b", "backup"))
    }

    async def in_sync(a: NodeProcess, b: NodeProcess) -> None:
        await a.wait_for(r"replication: b/\w+ is in sync .*, named so in the lease", SLACK, since=0)

    await _moved_once_across_a_failover(nodes, documents, port, in_sync)
