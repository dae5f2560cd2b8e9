"""Two nodes with [ha] replication, each its own SQLite store, the lease in a PostgreSQL
schema: their configuration (fast lease timings, fixed core ports so each can name the
other as its peer) and the start of a pair, node a live and node b in sync with it."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from bridge.client.api import connect
from bridge.ctl.main import main
from tests.system.bridges import core_acceptor
from tests.system.ha import PING, QUERY_TIMEOUT, REAP, SLACK
from tests.system.nodes import node_document


def replicated_node(
    name: str, policy: str, lease_url: str, port: int, peer_port: int, **ha: Any
) -> dict[str, Any]:
    return node_document(
        name,
        address=[{"name": "orders", "routing": "anycast"}],
        acceptor=core_acceptor(port),
        ha={
            "policy": policy,
            "lease-url": lease_url,
            "peers": [f"tcp://127.0.0.1:{peer_port}"],
            "cluster-user": "cluster",
            "lease-ping-time": f"{round(PING * 1000)}ms",
            "lease-reap-time": f"{round(REAP * 1000)}ms",
            "lease-query-timeout": f"{round(QUERY_TIMEOUT * 1000)}ms",
            **ha,
        },
    )


async def ha_status(node: Any, capsys: Any, login: tuple[str, str] | None = None) -> dict[str, Any]:
    """``txbridge ctl ha status --json`` of ``node`` (as ``login``, with security on)."""
    url = f"http://127.0.0.1:{node.ports['management']}"
    user = ["--user", login[0], "--password", login[1]] if login else []
    argv = ["ctl", "--url", url, *user, "ha", "status", "--json"]
    assert await deferToThread(main, argv) == 0
    shown: dict[str, Any] = json.loads(capsys.readouterr().out)
    return shown


async def management_port(node: Any, name: str) -> None:
    """A backup's management port, from its log (it has no other port open)."""
    found = await node.wait_for(rf"node {name}: management on 127\.0\.0\.1:(\d+)", SLACK)
    node.ports["management"] = int(found.group(1))


def stamp(output: str, at: int) -> str:
    """The log timestamp (ISO, to the microsecond: they sort) of the line holding ``at``."""
    return output[output.rfind("\n", 0, at) + 1 :].split(" ", 1)[0]


PAGING = {"match": "orders", "max-size-bytes": 64 * 1024, "address-full-policy": "PAGE"}
"""``orders`` pages past 64 KiB in memory."""


async def fill_with_bodies(node: Any, large: int) -> list[bytes]:
    """Send ``large`` bodies of 1 MiB, then 2,000 small messages (paged, with ``PAGING``)
    and a last one to ``orders`` on ``node``: what its store then holds, in order
    (ARTEMIS-484 lost large messages in a copy)."""
    client = await connect(reactor, node.core_url, min_large_message_size=100 * 1024)
    bodies = [bytes([65 + n % 26]) * (1024 * 1024) for n in range(large)]
    small = [b"paged %d" % n for n in range(2000)]
    for body in bodies:
        await client.send("orders", body)
    for body in small:
        client.send_nowait("orders", body)
    await client.send("orders", b"last")
    await client.close()
    return [*bodies, *small, b"last"]


async def read_all(node: Any, expected: list[bytes]) -> None:
    """Consume ``orders`` on ``node``: exactly ``expected``, in order, each acknowledged."""
    reader = await connect(reactor, node.core_url)
    consumer = await reader.consumer("orders")
    for body in expected:
        message = await consumer.receive()
        assert message.body == body
        message.ack()
    await reader.close()
