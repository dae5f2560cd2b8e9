"""Certificates for the TLS tests: one development CA, and a second CA nobody trusts; a
root CA with an intermediate CA under it; an expired client certificate."""

from __future__ import annotations

import datetime
from pathlib import Path

import attrs
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from transport.certs import DevelopmentCA, Issued, make_ca_certificate, make_leaf_certificate
from transport.tls import TLSConfig


@attrs.frozen
class Certs:
    ca: Path
    server: Issued
    client: Issued
    stranger: Issued
    # A root CA (``chain_root``) issued an intermediate CA, which issued ``chained_client``;
    # its file holds the leaf, then the intermediate.
    chain_root: Path
    chained_client: Issued
    # Issued by ``ca``, valid for one day a month ago.
    expired_client: Issued

    def server_tls(self, verify_client: bool = False, ca: Path | None = None) -> TLSConfig:
        return TLSConfig(
            cert=self.server.cert,
            key=self.server.key,
            ca=ca or self.ca,
            verify_client=verify_client,
        )

    def client_tls(self, issued: Issued | None = None) -> TLSConfig:
        if issued is None:
            return TLSConfig(ca=self.ca)
        return TLSConfig(cert=issued.cert, key=issued.key, ca=self.ca)


def _write(
    directory: Path, name: str, key: ec.EllipticCurvePrivateKey, *chain: x509.Certificate
) -> Issued:
    issued = Issued(directory / f"{name}.pem", directory / f"{name}.key")
    issued.cert.write_bytes(
        b"".join(certificate.public_bytes(serialization.Encoding.PEM) for certificate in chain)
    )
    issued.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return issued


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    ours = DevelopmentCA.open_or_create(tmp_path_factory.mktemp("ca"))
    other = DevelopmentCA.open_or_create(tmp_path_factory.mktemp("other-ca"), name="other CA")

    chain_dir = tmp_path_factory.mktemp("chain")
    root, root_key = make_ca_certificate("chain root CA", path_length=1)
    intermediate, intermediate_key = make_ca_certificate(
        "chain intermediate CA", issuer=(root, root_key)
    )
    leaf, leaf_key = make_leaf_certificate(
        intermediate, intermediate_key, "chained-client", server=False
    )
    chain_root = _write(chain_dir, "root", root_key, root).cert

    month_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    expired, expired_key = make_leaf_certificate(
        ours.certificate, ours.key, "expired-client", server=False, not_before=month_ago, days=1
    )
    return Certs(
        ca=ours.cert_path,
        server=ours.issue("server", server=True),
        client=ours.issue("client", server=False),
        stranger=other.issue("stranger", server=False),
        chain_root=chain_root,
        chained_client=_write(chain_dir, "chained-client", leaf_key, leaf, intermediate),
        expired_client=_write(ours.directory, "expired-client", expired_key, expired),
    )
