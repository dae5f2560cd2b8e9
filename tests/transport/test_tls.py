"""TLS on real loopback sockets: certificates, mutual TLS, and refusals in plain words."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from OpenSSL import SSL
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from tests.transport.memory import APP, Recorder
from transport.endpoints import connect, listen
from transport.errors import TLSConfigError, TLSHandshakeError
from transport.tls import TLSConfig
from transport.tls_failures import describe_tls_failure


class Server:
    def __init__(self) -> None:
        self.receivers: list[Recorder] = []
        self.first_frame: Deferred[Recorder] = Deferred()

    def make(self) -> Recorder:
        receiver = Recorder()
        server = self

        def frame_received(frame):  # type: ignore[no-untyped-def]
            receiver.frames.append(frame)
            if not server.first_frame.called:
                server.first_frame.callback(receiver)

        receiver.frame_received = frame_received  # type: ignore[method-assign]
        self.receivers.append(receiver)
        return receiver

    async def all_lost(self) -> None:
        for receiver in self.receivers:
            assert receiver.connection is not None
            await receiver.connection.when_lost()


async def _serve(tls: TLSConfig):
    server = Server()
    port = await listen(reactor, "tls://127.0.0.1:0", server.make, accepted_types=[APP], tls=tls)
    return server, port, f"tls://127.0.0.1:{port.getHost().port}"


@pytest_twisted.ensureDeferred
async def test_frames_cross_tls_and_the_server_sees_the_client_certificate(certs):
    server, port, url = await _serve(certs.server_tls(verify_client=True))
    try:
        client = await connect(
            reactor, url, Recorder(), accepted_types=[APP], tls=certs.client_tls(certs.client)
        )
        client.send(APP, b"over tls")
        receiver = await server.first_frame
        assert receiver.frames[0].payload == b"over tls"
        assert receiver.connection is not None
        chain = receiver.connection.peer_certificates()
        assert chain[0].subject.rfc4514_string().startswith("CN=client")
        server_chain = client.peer_certificates()
        assert server_chain[0].subject.rfc4514_string().startswith("CN=server")
        client.close()
        await client.when_lost()
        await server.all_lost()
    finally:
        await port.stopListening()


def _first_of(*waiters: Deferred[Any]) -> Deferred[Any]:
    """The result of whichever of ``waiters`` fires first (the others are left alone)."""
    first: Deferred[Any] = Deferred()

    def fired(result: object) -> object:
        if not first.called:
            first.callback(result)
        return result

    for waiter in waiters:
        waiter.addCallback(fired)
    return first


@pytest_twisted.ensureDeferred
async def test_a_client_certificate_from_an_intermediate_ca_is_sent_with_its_chain(certs):
    # The server trusts only the root; the client's file holds its leaf, then the
    # intermediate CA that issued it, and both must go over the wire.
    server, port, url = await _serve(certs.server_tls(verify_client=True, ca=certs.chain_root))
    try:
        client = await connect(
            reactor,
            url,
            Recorder(),
            accepted_types=[APP],
            tls=certs.client_tls(certs.chained_client),
        )
        client.send(APP, b"through the intermediate")
        receiver = await _first_of(server.first_frame, client.when_lost())
        assert isinstance(receiver, Recorder), f"the chain was refused: {receiver}"
        assert receiver.frames[0].payload == b"through the intermediate"
        assert receiver.connection is not None
        chain = receiver.connection.peer_certificates()
        subjects = [c.subject.rfc4514_string() for c in chain]
        assert subjects[0].startswith("CN=chained-client")
        assert subjects[1:] == [
            "CN=chain intermediate CA,O=txbridge development",
            "CN=chain root CA,O=txbridge development",
        ]
        client.close()
        await client.when_lost()
        await server.all_lost()
    finally:
        await port.stopListening()


async def _refused(certs, client_tls: TLSConfig) -> tuple[BaseException, BaseException]:
    server, port, url = await _serve(certs.server_tls(verify_client=True))
    try:
        client = await connect(reactor, url, Recorder(), accepted_types=[APP], tls=client_tls)
        client.send(APP, b"let me in")
        client_reason = await client.when_lost()
        await server.all_lost()
        assert server.receivers[0].frames == []
        return client_reason, server.receivers[0].lost[0]
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_mutual_tls_refuses_a_client_without_a_certificate(certs):
    client_reason, server_reason = await _refused(certs, certs.client_tls())
    assert isinstance(client_reason, TLSHandshakeError)
    assert "requires a client certificate and none was presented" in str(client_reason)
    assert isinstance(server_reason, TLSHandshakeError)
    assert "presented no certificate; this acceptor requires one" in str(server_reason)


@pytest_twisted.ensureDeferred
async def test_mutual_tls_refuses_a_certificate_from_another_ca(certs):
    client_reason, server_reason = await _refused(certs, certs.client_tls(certs.stranger))
    assert isinstance(client_reason, TLSHandshakeError)
    assert "does not trust this client's certificate" in str(client_reason)
    assert isinstance(server_reason, TLSHandshakeError)
    assert "presented a certificate not issued by the trusted ca" in str(server_reason)
    assert "unable to get local issuer certificate" in str(server_reason)


@pytest_twisted.ensureDeferred
async def test_mutual_tls_refuses_an_expired_client_certificate_and_says_so(certs):
    client_reason, server_reason = await _refused(certs, certs.client_tls(certs.expired_client))
    assert isinstance(client_reason, TLSHandshakeError)
    assert "refused this client's certificate: it has expired" in str(client_reason)
    assert isinstance(server_reason, TLSHandshakeError)
    assert "presented a certificate that has expired" in str(server_reason)
    assert "not issued by" not in str(server_reason)


@pytest_twisted.ensureDeferred
async def test_a_client_refuses_a_server_it_does_not_trust(certs, tmp_path):
    server, port, url = await _serve(certs.server_tls())
    try:
        stranger_ca = TLSConfig(ca=certs.stranger.cert)
        client = await connect(reactor, url, Recorder(), accepted_types=[APP], tls=stranger_ca)
        reason = await client.when_lost()
        await server.all_lost()
        assert isinstance(reason, TLSHandshakeError)
        assert "could not be verified against the configured ca" in str(reason)
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_a_client_refuses_a_certificate_for_another_host(certs):
    server, port, url = await _serve(certs.server_tls())
    try:
        wrong_name = TLSConfig(ca=certs.ca, server_name="somewhere.else")
        client = await connect(reactor, url, Recorder(), accepted_types=[APP], tls=wrong_name)
        reason = await client.when_lost()
        await server.all_lost()
        assert isinstance(reason, TLSHandshakeError)
        assert str(reason) == (
            f"the certificate of the server at 127.0.0.1:{port.getHost().port} "
            "is not valid for the name somewhere.else"
        )
    finally:
        await port.stopListening()


def _openssl_error(reason: str) -> SSL.Error:
    return SSL.Error([("SSL routines", "", reason)])


def test_a_handshake_failure_alert_is_not_blamed_on_a_missing_certificate():
    # OpenSSL's server sends "handshake failure" for a missing client certificate in
    # TLS 1.2, and as well when client and server share no version or cipher.
    reason = describe_tls_failure(
        _openssl_error("sslv3 alert handshake failure"), "10.0.0.1:61617", is_client=True
    )
    assert str(reason) == (
        "the server at 10.0.0.1:61617 refused the TLS handshake: it may require a client "
        "certificate, or share no TLS version or cipher with this client "
        "(TLS: sslv3 alert handshake failure)"
    )


def test_a_verify_failure_without_a_reason_names_every_cause():
    reason = describe_tls_failure(
        _openssl_error("certificate verify failed"), "10.0.0.2:50432", is_client=False
    )
    assert str(reason) == (
        "the TLS client at 10.0.0.2:50432 presented a certificate that could not be verified "
        "against the trusted ca: unknown issuer, expired or not yet valid "
        "(TLS: certificate verify failed)"
    )
    client_side = describe_tls_failure(
        _openssl_error("certificate verify failed"), "10.0.0.1:61617", is_client=True
    )
    assert "the certificate of the server at 10.0.0.1:61617 could not be verified" in str(
        client_side
    )


def test_missing_and_malformed_files_are_named(certs, tmp_path):
    with pytest.raises(TLSConfigError, match=r"TLS certificate file .*nowhere.pem: No such file"):
        TLSConfig(cert=tmp_path / "nowhere.pem", key=certs.server.key).server_options()
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(TLSConfigError, match=r"junk\.pem: no PEM certificate in it"):
        TLSConfig(cert=junk, key=certs.server.key).server_options()
    with pytest.raises(TLSConfigError, match=r"junk\.pem: not an unencrypted PEM private key"):
        TLSConfig(cert=certs.server.cert, key=junk).server_options()
    with pytest.raises(TLSConfigError, match="needs both cert and key"):
        TLSConfig(cert=certs.server.cert).server_options()
    with pytest.raises(TLSConfigError, match="verify-client needs a ca file"):
        TLSConfig(cert=certs.server.cert, key=certs.server.key, verify_client=True).server_options()
