"""A node process whose store is PostgreSQL (``[store] type = "postgresql"``): what it
confirmed survives a kill, and a store it cannot use stops it at start, exit status 1, with
one line naming ``store.url``."""

from __future__ import annotations

import signal

import pytest
import pytest_twisted
from twisted.internet import reactor

from bridge.client.api import connect
from tests.postgresql import schema_url
from tests.system.nodes import node_document


def on_postgresql(url: str) -> dict[str, object]:
    return node_document(
        address=[{"name": "orders", "routing": "anycast"}],
        store={"type": "postgresql", "url": url},
    )


@pytest_twisted.ensureDeferred
async def test_confirmed_sends_survive_a_kill_of_a_node_on_postgresql(nodes, pg_schema):
    document = on_postgresql(schema_url(pg_schema))
    node = await nodes(document).wait_started()
    client = await connect(reactor, node.core_url)
    for number in range(50):
        await client.send("orders", b"%02d" % number)  # returns once the store committed
    await node.stop(signal.SIGKILL)
    await client.close()

    restarted = await nodes(document).wait_started()
    reader = await connect(reactor, restarted.core_url)
    consumer = await reader.consumer("orders")
    received = []
    for _ in range(50):
        message = await consumer.receive()
        received.append(message.body)
        await message.ack_durably()
    await reader.close()
    assert received == [b"%02d" % number for number in range(50)]
    await restarted.stop(signal.SIGTERM)
    assert "node a stopped" in restarted.output  # the store closed cleanly


async def refused(nodes, url: str) -> str:
    """Start a node on ``url``; it must end with status 1: the line that says why."""
    node = nodes(on_postgresql(url))
    with pytest.raises(RuntimeError, match="ended before starting"):
        await node.wait_started()
    await node.ended
    assert node.exit_code == 1
    lines = [line for line in node.output.splitlines() if "store.url" in line]
    assert len(lines) == 1, node.output
    return lines[0]


@pytest_twisted.ensureDeferred
async def test_a_malformed_url_ends_the_node_with_status_1(nodes):
    line = await refused(nodes, "postgresql://[bad")
    assert "could not start: store.url: not a PostgreSQL URL" in line


@pytest_twisted.ensureDeferred
async def test_an_unreachable_server_ends_the_node_with_status_1(nodes, pg_schema):
    line = await refused(nodes, "postgresql://postgres@127.0.0.1:1/test")
    assert "store.url: postgresql://postgres@127.0.0.1:1/test: cannot connect" in line


@pytest_twisted.ensureDeferred
async def test_missing_privileges_end_the_node_with_status_1(nodes, pg_schema, pg_reader_role):
    url = schema_url(pg_schema).replace("postgres@", f"{pg_reader_role}@", 1)
    line = await refused(nodes, url)
    assert "store.url: " in line and "permission denied for schema" in line
