"""Certificates for the TLS tests: one development CA, and a second CA nobody trusts."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from transport.certs import DevelopmentCA, Issued
from transport.tls import TLSConfig


@attrs.frozen
class Certs:
    ca: Path
    server: Issued
    client: Issued
    stranger: Issued

    def server_tls(self, verify_client: bool = False) -> TLSConfig:
        return TLSConfig(
            cert=self.server.cert, key=self.server.key, ca=self.ca, verify_client=verify_client
        )

    def client_tls(self, issued: Issued | None = None) -> TLSConfig:
        if issued is None:
            return TLSConfig(ca=self.ca)
        return TLSConfig(cert=issued.cert, key=issued.key, ca=self.ca)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    ours = DevelopmentCA.open_or_create(tmp_path_factory.mktemp("ca"))
    other = DevelopmentCA.open_or_create(tmp_path_factory.mktemp("other-ca"), name="other CA")
    return Certs(
        ca=ours.cert_path,
        server=ours.issue("server", server=True),
        client=ours.issue("client", server=False),
        stranger=other.issue("stranger", server=False),
    )
