"""STOMP over mutual TLS with stomp.py: a client certificate mapped to a user logs in
without login or passcode and gets that user's permissions; an unmapped one is refused;
a password login works beside it."""

from __future__ import annotations

import ssl

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.endpoints import connectProtocol

from tests.heads.stomp.conftest import RawClient
from tests.security.certs import issue, make_ca
from tests.security.helpers import write_users
from transport.endpoints import client_endpoint
from transport.tls import TLSConfig

SECURITY = {
    "users-file": "users.toml",
    "certificate-users-file": "certificates.toml",
    "setting": [
        {
            "match": "bridges.#",
            "send": ["bridges"],
            "create-address": ["bridges"],
            "consume": ["operators"],
        },
    ],
}


@pytest_twisted.ensureDeferred
async def test_a_client_certificate_logs_in_over_mutual_tls(tmp_path, make_node):
    directory = tmp_path / "node-0"
    directory.mkdir()
    ca = make_ca()
    ca_path, _ = ca.write(directory, "ca")
    server = issue(ca, "localhost", dns=("localhost",), ips=("127.0.0.1",), server=True)
    server_cert, server_key = server.write(directory, "server")
    clients = {
        name: issue(ca, name, organization="Example").write(directory, name)
        for name in ("bridge-a", "intruder", "ops-host")
    }
    (directory / "certificates.toml").write_text(
        '[[certificate]]\nsubject = "CN=bridge-a,O=Example"\nuser = "bridge-a"\n'
        'roles = ["bridges"]\n'
    )
    write_users(directory / "users.toml", {"ops": ("ops-secret", ["operators"])})
    tls = TLSConfig(cert=server_cert, key=server_key, ca=ca_path, verify_client=True)
    node = await make_node(security_table=SECURITY, tls=tls)

    def over_tls(name):
        client = node.stomp("1.2")
        cert, key = clients[name]
        client.conn.set_ssl(
            for_hosts=[("127.0.0.1", node.port_number)],
            cert_file=str(cert),
            key_file=str(key),
            ca_certs=str(ca_path),
            ssl_version=ssl.PROTOCOL_TLS_CLIENT,
        )
        return client

    bridge = over_tls("bridge-a")
    await bridge.connect()
    await bridge.confirmed_send("/queue/bridges.in", b"by certificate", persistent="true")
    operator = over_tls("ops-host")
    await operator.connect("ops", "ops-secret")
    await operator.call("subscribe", "/queue/bridges.in", id="s", ack="client-individual")
    [message] = await operator.messages(1)
    assert message.body == b"by certificate"
    # stomp.py spins on a TLS connection the server closes, so the refusal is read raw.
    cert, key = clients["intruder"]
    endpoint = client_endpoint(
        reactor,
        f"tls://127.0.0.1:{node.port_number}",
        TLSConfig(cert=cert, key=key, ca=ca_path),
    )
    intruder = RawClient()
    await connectProtocol(endpoint, intruder)
    node.raw_clients.append(intruder)
    await intruder.connect()
    error = await intruder.error()
    assert error.header("message") == "authentication failed"
    assert error.body == b"authentication failed"
