"""Three members of one cluster on two hosts (by host id), for the system tests of clients
that follow the failover map: a (host h1) live on a shared SQLite store directory, c
(host h2) its backup on that directory (``[cluster] store = "a"``), b (host h2) a node of
its own store. With a and b serving, a's first failover node is b (ring: the other host);
when a dies, c takes a's store over, so a's clients reach b first and b redirects them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.system.bridges import free_port
from tests.system.ha import SLACK, ha_node
from tests.system.nodes import NodeProcess, node_document

HOSTS = {"a": "h1", "b": "h2", "c": "h2"}


def member(name: str, ports: dict[str, int], shared: Path, **cluster: Any) -> dict[str, Any]:
    """Node ``name``'s document: on its own fixed port, every member listed."""
    if name == "b":
        document = node_document("b", address=[{"name": "orders", "routing": "anycast"}])
    else:
        policy = "shared-store-primary" if name == "a" else "shared-store-backup"
        document = ha_node(name, shared, policy)
    document["acceptor"][0]["url"] = f"tcp://127.0.0.1:{ports[name]}"
    document["cluster"] = {
        "name": "test",
        "user": "cluster",
        "members": [f"tcp://127.0.0.1:{ports[each]}" for each in sorted(ports)],
        "host-id": HOSTS[name],
        "store": "a" if name == "c" else name,
        "retry-interval": "100ms",
        **cluster,
    }
    return document


async def three_members(
    nodes: Any, tmp_path: Path
) -> tuple[dict[str, NodeProcess], dict[str, int]]:
    """a live and linked with b, c waiting as a's backup."""
    ports = {name: free_port() for name in "abc"}
    shared = tmp_path / "store-a"
    started: dict[str, NodeProcess] = {}
    started["a"] = nodes(member("a", ports, shared), name="a")
    await started["a"].wait_for(r"node a: LIVE, epoch 1", SLACK)
    started["c"] = nodes(member("c", ports, shared), name="c")
    await started["c"].wait_for(r"node c: live is a, epoch 1", SLACK)
    started["b"] = nodes(member("b", ports, shared), name="b")
    await started["b"].wait_started(SLACK)
    for name in "ab":
        await started[name].wait_for(
            rf"node {name}: cluster view a \(serves a; fails over to b\), "
            r"b \(serves b; fails over to a\)",
            SLACK,
            since=0,
        )
    return started, ports
