"""A client logs in to the real core head with its TLS client certificate (no user, no
password): the mapped certificate's user gets its roles' permissions, an unmapped one is
refused, and a password login over the same mutual-TLS acceptor (with a certificate that
maps to no user) still works."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from bridge.client.api import connect
from bridge.client.errors import AuthenticationFailed, PermissionDenied
from bridge.config.node import parse_node_config
from bridge.heads.core import listen_core
from bridge.node.broker import Broker
from bridge.store.sqlite import SQLiteMessageStore
from security import SecurityStore
from tests.security.certs import issue, make_ca
from tests.security.helpers import write_users
from transport.tls import TLSConfig


@pytest.fixture
def tls_node(tmp_path: Path) -> Any:
    ca = make_ca()
    ca_path, _ = ca.write(tmp_path, "ca")
    server = issue(ca, "localhost", dns=("localhost",), ips=("127.0.0.1",), server=True)
    server_cert, server_key = server.write(tmp_path, "server")
    clients = {}
    for name in ("bridge-a", "intruder", "ops-host"):
        cert, key = issue(ca, name, organization="Example").write(tmp_path, name)
        clients[name] = TLSConfig(cert=cert, key=key, ca=ca_path)
    (tmp_path / "certificates.toml").write_text(
        '[[certificate]]\nsubject = "CN=bridge-a,O=Example"\nuser = "bridge-a"\n'
        'roles = ["bridges"]\n'
    )
    write_users(tmp_path / "users.toml", {"ops": ("ops-secret", ["operators"])})
    document = {
        "node": {"name": "a", "data-dir": "data"},
        "address": [{"name": "bridges.in", "routing": "anycast"}],
        "security": {
            "users-file": "users.toml",
            "certificate-users-file": "certificates.toml",
            "setting": [{"match": "bridges.#", "send": ["bridges"], "consume": ["operators"]}],
        },
    }
    config = parse_node_config(document, tmp_path / "node.toml")
    broker = Broker(config, SQLiteMessageStore(config.data_dir, reactor))
    pytest_twisted.blockon(Deferred.fromCoroutine(broker.open()))
    security = SecurityStore(config.security, time.monotonic)
    url = "tls://127.0.0.1:0"
    port = pytest_twisted.blockon(
        listen_core(
            reactor,
            url,
            broker,
            security,
            node_name="a",
            node_id="id-a",
            tls=TLSConfig(cert=server_cert, key=server_key, ca=ca_path, verify_client=True),
        )
    )
    yield f"tls://127.0.0.1:{port.getHost().port}", clients, broker
    pytest_twisted.blockon(port.stopListening())
    pytest_twisted.blockon(Deferred.fromCoroutine(broker.close()))


@pytest_twisted.ensureDeferred
async def test_a_mapped_certificate_logs_in_and_gets_its_roles(tls_node):
    url, clients, broker = tls_node
    client = await connect(reactor, url, tls=clients["bridge-a"])
    assert broker.queue("bridges.in").depth == 0
    await client.send("bridges.in", b"by certificate")
    with pytest.raises(PermissionDenied, match="user 'bridge-a' lacks permission 'consume'"):
        await client.consumer("bridges.in")
    await client.close()
    operator = await connect(
        reactor, url, user="ops", password="ops-secret", tls=clients["ops-host"]
    )
    consumer = await operator.consumer("bridges.in")
    message = await consumer.receive()
    assert message.body == b"by certificate"
    await message.ack_durably()
    await operator.close()


@pytest_twisted.ensureDeferred
async def test_an_unmapped_certificate_is_refused(tls_node):
    url, clients, _ = tls_node
    with pytest.raises(AuthenticationFailed):
        await connect(reactor, url, tls=clients["intruder"])
