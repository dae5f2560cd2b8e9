"""SIGHUP reloads a running node (it used to end it): the configuration file is read again,
the users file, the security settings and the bridges are replaced, and the log says what
was reloaded and which changes wait for a restart. A file that cannot be read changes
nothing and the node runs on."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import tomli_w
from twisted.internet import reactor

from bridge.client.api import connect
from bridge.client.errors import AuthenticationFailed, PermissionDenied
from tests.security.helpers import write_users
from tests.system.bridges import bridge_table, wait_bridge, write_bridges
from tests.system.nodes import NodeProcess, node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

RELOADED = "node a reloaded bridges, users and security settings"


async def hang_up(node: NodeProcess, expected: str) -> None:
    """SIGHUP the node and wait for the log line that says ``expected``."""
    since = len(node.output)
    assert node.pid is not None
    os.kill(node.pid, signal.SIGHUP)
    await node.wait_output(expected, since=since)


async def sends(node: NodeProcess, user: str, password: str, address: str) -> None:
    client = await connect(reactor, node.core_url, user=user, password=password)
    try:
        await client.send(address, b"hello")
    finally:
        await client.close()


async def stop_cleanly(node: NodeProcess) -> None:
    await node.stop(signal.SIGTERM)
    assert node.signal == signal.SIGTERM, node.output
    assert "node a stopped" in node.output
    assert "Traceback" not in node.output, node.output


def secured(send_roles: list[str], addresses: list[str]) -> dict[str, Any]:
    return node_document(
        address=[{"name": name} for name in addresses],
        security={
            "enabled": True,
            "users-file": "users.toml",
            "setting": [{"match": "orders", "send": send_roles}],
        },
    )


def write_config(node: NodeProcess, document: dict[str, Any]) -> None:
    temporary = node.config.with_suffix(".tmp")
    temporary.write_text(tomli_w.dumps(document))
    temporary.replace(node.config)


@pytest_twisted.ensureDeferred
async def test_sighup_reloads_users_and_security_settings(nodes):
    folder: Path = nodes.tmp_path / "node"
    folder.mkdir()
    write_users(folder / "users.toml", {"alice": ("alice-secret", ["admins"])})
    node = await nodes(secured(["admins"], ["orders"])).wait_started()
    await sends(node, "alice", "alice-secret", "orders")
    with pytest.raises(AuthenticationFailed):
        await sends(node, "bob", "bob-secret", "orders")

    write_users(
        folder / "users.toml",
        {"alice": ("alice-secret", ["admins"]), "bob": ("bob-secret", ["producers"])},
    )
    await hang_up(node, RELOADED)
    with pytest.raises(PermissionDenied):  # bob exists now, but may not send yet
        await sends(node, "bob", "bob-secret", "orders")

    write_config(node, secured(["admins", "producers"], ["orders", "audit"]))
    await hang_up(node, f"{RELOADED}; changes to addresses need a restart")
    await sends(node, "bob", "bob-secret", "orders")
    await stop_cleanly(node)


@pytest.mark.parametrize("twistd", [False, True], ids=["txbridge-node", "twistd"])
@pytest_twisted.ensureDeferred
async def test_sighup_reloads_bridges_and_a_bad_file_changes_nothing(nodes, twistd):
    document = node_document(address=[{"name": "orders"}])
    document["node"]["bridges-dir"] = "bridges.d"
    node = await nodes(document, twistd=twistd).wait_started()
    good = node.config.read_text()

    node.config.write_text("[node\n")
    await hang_up(node, "node a: nothing reloaded: node.toml: ")
    write_config(node, document)
    assert node.config.read_text() == good

    write_bridges(
        node.directory / "bridges.d",
        "orders.toml",
        bridge_table("orders-out", "orders", "tcp://127.0.0.1:1"),
    )
    await hang_up(node, RELOADED)
    entry = await wait_bridge(node, "orders-out", lambda entry: True, "is there after SIGHUP")
    assert entry["name"] == "orders-out"
    await stop_cleanly(node)
