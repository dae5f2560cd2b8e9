"""Real TLS on loopback: a mapped client certificate logs in, an unmapped one is refused.

The server reads the verified chain from the framed connection when the first frame
arrives (the handshake is complete by then) and hands it to the SecurityStore exactly as
a protocol head would: no user name, no password.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import pytest_twisted
from cryptography import x509
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from zope.interface import implementer

from security import (
    AuthenticationFailed,
    AuthMethod,
    Permission,
    SecurityAuth,
    SecurityStore,
    Subject,
    load_security,
)
from tests.security.certs import issue, make_ca
from transport.endpoints import connect, listen
from transport.interfaces import IFrameConnection, IFrameReceiver
from transport.tls import TLSConfig

HELLO = 16


@attrs.frozen
class Pki:
    ca: Path
    server: TLSConfig
    mapped: TLSConfig
    unmapped: TLSConfig
    mapping: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = make_ca()
    ca_path, _ = ca.write(directory, "ca")
    server_cert, server_key = issue(
        ca, "localhost", dns=("localhost",), ips=("127.0.0.1",), server=True
    ).write(directory, "server")
    mapped_cert, mapped_key = issue(ca, "bridge-a", organization="Example").write(
        directory, "mapped"
    )
    unmapped_cert, unmapped_key = issue(ca, "intruder", organization="Example").write(
        directory, "unmapped"
    )
    mapping = directory / "certificates.toml"
    mapping.write_text(
        '[[certificate]]\nsubject = "CN=bridge-a,O=Example"\nuser = "bridge-a"\n'
        'roles = ["bridges"]\n'
    )
    return Pki(
        ca=ca_path,
        server=TLSConfig(cert=server_cert, key=server_key, ca=ca_path, verify_client=True),
        mapped=TLSConfig(cert=mapped_cert, key=mapped_key, ca=ca_path),
        unmapped=TLSConfig(cert=unmapped_cert, key=unmapped_key, ca=ca_path),
        mapping=mapping,
    )


@pytest.fixture
def store(pki: Pki, tmp_path: Path) -> SecurityStore:
    table = {
        "certificate-users-file": str(pki.mapping),
        "setting": [{"match": "bridges.#", "send": ["bridges"]}],
    }
    return SecurityStore(load_security(table, str(tmp_path / "node.toml")), reactor.seconds)


@implementer(IFrameReceiver)
class LoginReceiver:
    """The server side: logs the peer in with its certificate on the first frame."""

    def __init__(
        self,
        store: SecurityStore,
        outcome: Deferred[tuple[Subject | AuthenticationFailed, LoginReceiver]],
    ) -> None:
        self.store = store
        self.outcome = outcome
        self.connection: IFrameConnection | None = None
        self.chain: list[x509.Certificate] = []

    def connection_made(self, connection: IFrameConnection) -> None:
        self.connection = connection

    def frame_received(self, frame: object) -> None:
        if self.outcome.called or self.connection is None:
            return
        self.chain = list(self.connection.peer_certificates())
        auth = SecurityAuth(None, None, self.chain, self.connection.peer, "core")
        try:
            result: Subject | AuthenticationFailed = self.store.authenticate(auth)
        except AuthenticationFailed as error:
            result = error
        self.outcome.callback((result, self))

    def connection_lost(self, reason: Failure) -> None:
        pass


@implementer(IFrameReceiver)
class Quiet:
    """The client side: expects nothing."""

    def connection_made(self, connection: IFrameConnection) -> None:
        pass

    def frame_received(self, frame: object) -> None:
        pass

    def connection_lost(self, reason: Failure) -> None:
        pass


async def log_in(
    pki: Pki, store: SecurityStore, client_tls: TLSConfig
) -> tuple[Subject | AuthenticationFailed, LoginReceiver]:
    receivers: list[LoginReceiver] = []
    first: Deferred[tuple[Subject | AuthenticationFailed, LoginReceiver]] = Deferred()

    def make() -> LoginReceiver:
        receiver = LoginReceiver(store, first)
        receivers.append(receiver)
        return receiver

    port = await listen(reactor, "tls://127.0.0.1:0", make, accepted_types=[HELLO], tls=pki.server)
    try:
        url = f"tls://127.0.0.1:{port.getHost().port}"
        client = await connect(reactor, url, Quiet(), accepted_types=[HELLO], tls=client_tls)
        try:
            client.send(HELLO, b"hello")
            outcome, receiver = await first
        finally:
            client.close()
            await client.when_lost()
            for receiver in receivers:
                assert receiver.connection is not None
                await receiver.connection.when_lost()
    finally:
        await port.stopListening()
    return outcome, receiver


@pytest_twisted.ensureDeferred
async def test_mapped_client_certificate_logs_in(pki: Pki, store: SecurityStore) -> None:
    outcome, receiver = await log_in(pki, store, pki.mapped)
    assert isinstance(outcome, Subject)
    assert (outcome.user, outcome.roles, outcome.method) == (
        "bridge-a",
        frozenset({"bridges"}),
        AuthMethod.CERTIFICATE,
    )
    assert outcome.remote_address.startswith("127.0.0.1:")
    assert receiver.chain[0].subject.rfc4514_string() == "CN=bridge-a,O=Example"
    store.check(outcome, "bridges.eu", Permission.SEND)


@pytest_twisted.ensureDeferred
async def test_unmapped_client_certificate_is_refused(pki: Pki, store: SecurityStore) -> None:
    outcome, receiver = await log_in(pki, store, pki.unmapped)
    assert isinstance(outcome, AuthenticationFailed)
    # TLS verified it (the CA issued it); only the mapping is missing.
    assert receiver.chain[0].subject.rfc4514_string() == "CN=intruder,O=Example"
