"""A throw-away certificate authority for the tests: CA, server and client certificates."""

from __future__ import annotations

from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from transport.certs import make_ca_certificate, make_leaf_certificate

ORGANIZATION = "txbridge tests"


@attrs.frozen
class Issued:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write ``stem.pem`` and ``stem.key``; return their paths."""
        cert_path = directory / f"{stem}.pem"
        key_path = directory / f"{stem}.key"
        cert_path.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            self.key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_path, key_path


def make_ca(common_name: str = "txbridge test CA") -> Issued:
    return Issued(*make_ca_certificate(common_name, organization=ORGANIZATION, days=1))


def issue(
    ca: Issued,
    common_name: str,
    *,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    emails: tuple[str, ...] = (),
    server: bool = False,
    organization: str = ORGANIZATION,
) -> Issued:
    """A leaf certificate signed by ``ca`` (for a server or a client)."""
    certificate, key = make_leaf_certificate(
        ca.certificate,
        ca.key,
        common_name,
        server=server,
        sans=(*dns, *ips, *emails),
        organization=organization,
        days=1,
    )
    return Issued(certificate, key)
