"""A node service runs the bridges its configuration declares, in its file and in its
bridges-dir, shows them in /status, and stops them before anything else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from bridge.client.api import connect
from bridge.ctl.service import NodeService
from bridge.ctl.status import ManagementClient
from tests.ctl.test_service import config
from tests.forward.conftest import eventually


async def _node(path: Path, **extra: Any) -> NodeService:
    path.mkdir(parents=True, exist_ok=True)
    service = NodeService(config(path, **extra), reactor, exit_on_failure=False)
    service.startService()
    await service.started
    return service


async def _status(service: NodeService) -> Any:
    port = service.ports["management"].getHost().port
    client = ManagementClient(f"http://127.0.0.1:{port}")
    return await deferToThread(client.get_json, "/status")


@pytest_twisted.ensureDeferred
async def test_bridges_from_the_file_and_the_dir_forward_and_show(tmp_path: Path) -> None:
    orders = [{"name": "orders", "routing": "anycast"}, {"name": "jobs", "routing": "anycast"}]
    target = await _node(tmp_path / "b", address=orders)
    target_url = f"tcp://127.0.0.1:{target.ports['core'].getHost().port}"
    bridges_dir = tmp_path / "a" / "bridges.d"
    bridges_dir.mkdir(parents=True)
    (bridges_dir / "jobs.toml").write_text(
        f'[[bridge]]\nname = "jobs-to-b"\nqueue = "jobs"\ntarget = "{target_url}"\n'
    )
    (bridges_dir / "broken.toml").write_text(
        f'[[bridge]]\nname = "broken"\nqueue = "jobs"\ntarget = "{target_url}"\ncolour = 1\n'
    )
    source = await _node(
        tmp_path / "a",
        node={"name": "a", "data-dir": "data", "bridges-dir": "bridges.d"},
        address=orders,
        bridge=[{"name": "orders-to-b", "queue": "orders", "target": target_url}],
    )
    try:
        port = source.ports["core"].getHost().port
        producer = await connect(reactor, f"tcp://127.0.0.1:{port}")
        await producer.send("orders", b"o")
        await producer.send("jobs", b"j")
        await producer.close()
        assert target.broker is not None
        await eventually(
            lambda: (
                target.broker is not None
                and target.broker.queue("orders").depth == 1
                and target.broker.queue("jobs").depth == 1
            )
        )
        status = await _status(source)
        states = {bridge["name"]: bridge["state"] for bridge in status["bridges"]}
        assert states == {"jobs-to-b": "STARTED", "orders-to-b": "STARTED"}
    finally:
        await source.stopService()
        await target.stopService()
