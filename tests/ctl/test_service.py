"""The node service in this process: it starts store, broker, acceptors and management in
order, stops them in reverse, and a start that fails undoes itself and names the cause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

from bridge.config.node import parse_node_config
from bridge.ctl.service import (
    NodeService,
    StartupError,
    connection_settings,
    node_id,
    replica_link_settings,
    stomp_settings,
)
from bridge.heads.stomp import StompSettings
from bridge.protocol import PACKET_TYPES
from bridge.protocol import packets as p
from tests.heads.conftest import Peer, message
from tests.heads.stomp.conftest import RawClient
from transport.endpoints import connect


def config(tmp_path: Path, **extra: Any):  # type: ignore[no-untyped-def]
    document: dict[str, Any] = {
        "node": {"name": "a", "data-dir": "data"},
        "acceptor": [{"name": "core", "url": "tcp://127.0.0.1:0", "protocols": ["core"]}],
        "management": {"url": "http://127.0.0.1:0"},
        **extra,
    }
    return parse_node_config(document, tmp_path / "node.toml")


def test_the_node_id_is_made_once_and_kept(tmp_path: Path) -> None:
    first = node_id(tmp_path / "data")
    assert node_id(tmp_path / "data") == first
    assert (tmp_path / "data" / "node-id").read_text().strip() == first


@pytest_twisted.ensureDeferred
async def test_a_node_serves_and_gives_back_in_flight_messages_when_stopped(tmp_path):
    service = NodeService(config(tmp_path), reactor, exit_on_failure=False)
    service.startService()
    await service.started
    assert set(service.ports) == {"core", "management"}
    port = service.ports["core"].getHost().port
    peer = Peer()
    await connect(reactor, f"tcp://127.0.0.1:{port}", peer, accepted_types=PACKET_TYPES)
    peer.send(p.Connect(p.PROTOCOL_VERSION, "t", None, None, 1 << 20))
    peer.send(p.Send(1, None, message("jobs", b"work")))
    peer.send(p.CreateConsumer(1, 1, "jobs", None, False, -1))
    await peer.next(p.Deliver)
    await service.stopService()
    await peer.lost
    assert "the node is shutting down" in str(peer.lost.result)
    again = NodeService(config(tmp_path), reactor, exit_on_failure=False)
    again.startService()
    await again.started
    assert again.broker is not None
    [entry] = again.broker.queue("jobs").browse()
    assert (entry.message.body, entry.delivery_count) == (b"work", 1)
    await again.stopService()


@pytest_twisted.ensureDeferred
async def test_a_busy_port_stops_the_start_and_names_the_acceptor(tmp_path):
    first = NodeService(config(tmp_path / "one"), reactor, exit_on_failure=False)
    first.startService()
    await first.started
    busy = first.ports["core"].getHost().port
    second = NodeService(
        config(
            tmp_path / "two",
            acceptor=[{"name": "main", "url": f"tcp://127.0.0.1:{busy}", "protocols": ["core"]}],
        ),
        reactor,
        exit_on_failure=False,
    )
    second.startService()
    with pytest.raises(StartupError, match=rf"acceptor 'main' at tcp://127.0.0.1:{busy}: "):
        await second.started
    await second.stopService()
    assert second.ports == {} and second.broker is None  # nothing half-started
    await first.stopService()


@pytest_twisted.ensureDeferred
async def test_a_stomp_acceptor_serves_stomp_beside_the_core_one(tmp_path):
    service = NodeService(
        config(
            tmp_path,
            acceptor=[
                {"name": "core", "url": "tcp://127.0.0.1:0", "protocols": ["core"]},
                {
                    "name": "st",
                    "url": "tcp://127.0.0.1:0",
                    "protocols": ["stomp"],
                    "read-size": "32KiB",
                    "tcp-no-delay": False,
                },
            ],
        ),
        reactor,
        exit_on_failure=False,
    )
    service.startService()
    await service.started
    client = RawClient()
    port = service.ports["st"].getHost().port
    await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), client)
    connected = await client.connect()
    assert connected.command == "CONNECTED"
    assert service.stomp is not None
    (protocol,) = service.stomp._live  # the acceptor's socket settings reached its connection
    assert (protocol.transport.bufferSize, protocol.transport.SEND_LIMIT) == (
        32 * 1024,
        StompSettings().io_size,
    )
    assert not protocol.transport.getTcpNoDelay()
    await service.stopService()
    error = await client.error()
    assert error.header("message") == "connection closed by the node"
    assert error.body == b"the node is shutting down"


@pytest_twisted.ensureDeferred
async def test_an_acceptor_of_two_protocols_is_refused(tmp_path):
    service = NodeService(
        config(
            tmp_path,
            acceptor=[{"name": "both", "url": "tcp://127.0.0.1:0", "protocols": ["core", "stomp"]}],
        ),
        reactor,
        exit_on_failure=False,
    )
    service.startService()
    with pytest.raises(StartupError, match="acceptor 'both': one acceptor serves one protocol"):
        await service.started
    await service.stopService()


def test_an_acceptors_read_size_reaches_its_core_and_stomp_connections(tmp_path):
    (acceptor,) = config(
        tmp_path,
        acceptor=[{"name": "c", "url": "tcp://127.0.0.1:0", "read-size": "32KiB"}],
    ).acceptors
    assert connection_settings(acceptor).read_size == 32 * 1024
    assert stomp_settings(acceptor).read_size == 32 * 1024


def test_an_acceptors_tcp_no_delay_reaches_its_core_and_stomp_connections(tmp_path):
    (default,) = config(tmp_path).acceptors
    assert connection_settings(default).tcp_no_delay and stomp_settings(default).tcp_no_delay
    (off,) = config(
        tmp_path,
        acceptor=[{"name": "c", "url": "tcp://127.0.0.1:0", "tcp-no-delay": False}],
    ).acceptors
    assert not connection_settings(off).tcp_no_delay
    assert not stomp_settings(off).tcp_no_delay


def test_a_backups_link_pings_at_a_third_of_its_core_acceptors_ttl(tmp_path):
    """The live node drops a backup silent for its connection-ttl: the backup's link pings
    as the node's own core acceptor asks its clients to (the pair configured alike)."""
    acceptors = [
        {"name": "s", "url": "tcp://127.0.0.1:0", "protocols": ["stomp"], "connection-ttl": "9s"},
        {"name": "c", "url": "tcp://127.0.0.1:0", "connection-ttl": "3s"},
    ]
    link = replica_link_settings(config(tmp_path, acceptor=acceptors))
    assert link is not None
    assert (link.ttl, link.heartbeat_interval) == (3.0, 1.0)
    assert replica_link_settings(config(tmp_path, acceptor=acceptors[:1])) is None
