"""A development certificate authority: a CA, node certificates and client certificates.

For trying TLS and mutual TLS without an external PKI. Keys are EC P-256; files are PEM,
keys written with mode 0600. Production deployments bring their own certificates.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from transport.tls import DEFAULT_SANS

CA_DAYS = 3650
LEAF_DAYS = 825


@attrs.frozen
class Issued:
    """Where one certificate and its key were written."""

    cert: Path
    key: Path


ORGANIZATION = "txbridge development"
_KEY_USAGE_CA = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def _name(common_name: str, organization: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def general_names(entries: Iterable[str]) -> list[x509.GeneralName]:
    """Subject alternative names: IP addresses, e-mail addresses (with ``@``), else DNS."""
    names: list[x509.GeneralName] = []
    for entry in entries:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(entry)))
        except ValueError:
            names.append(x509.RFC822Name(entry) if "@" in entry else x509.DNSName(entry))
    return names


def make_ca_certificate(
    common_name: str,
    *,
    organization: str = ORGANIZATION,
    days: int = CA_DAYS,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
    path_length: int | None = 0,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A CA certificate and its new EC P-256 key: self-signed (a root), or, with ``issuer``
    (that CA's certificate and key), an intermediate CA signed by it.

    ``path_length``: how many intermediate CAs may follow this one below it; the default 0
    lets it issue leaf certificates only, so a root that issues an intermediate needs 1.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = _name(common_name, organization)
    issuer_name, signing_key = (issuer[0].subject, issuer[1]) if issuer is not None else (name, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(_KEY_USAGE_CA, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    )
    if issuer is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signing_key.public_key()), False
        )
    return builder.sign(signing_key, hashes.SHA256()), key


def make_leaf_certificate(
    ca_certificate: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    *,
    server: bool,
    sans: Iterable[str] = (),
    organization: str = ORGANIZATION,
    days: int = LEAF_DAYS,
    not_before: datetime.datetime | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate issued by the CA: for clients, or (``server``) for servers and clients.

    It is valid for ``days`` from now (from five minutes ago, to allow for clocks a little
    apart), or from ``not_before`` when given: one far enough in the past makes an expired
    certificate.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    start = not_before if not_before is not None else now - datetime.timedelta(minutes=5)
    end = (not_before if not_before is not None else now) + datetime.timedelta(days=days)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if server:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization))
        .issuer_name(ca_certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
    )
    names = general_names(sans)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _write_cert(path: Path, certificate: x509.Certificate) -> None:
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))


@attrs.frozen
class DevelopmentCA:
    """A CA kept as ``ca.pem`` and ``ca.key`` in a folder, issuing into the same folder."""

    directory: Path
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_path(self) -> Path:
        return self.directory / "ca.pem"

    @classmethod
    def open_or_create(
        cls, directory: Path, name: str = "txbridge development CA"
    ) -> DevelopmentCA:
        """Load the CA in ``directory``, creating it (and the folder) if absent."""
        directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = directory / "ca.pem", directory / "ca.key"
        if cert_path.exists() and key_path.exists():
            certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{key_path}: not an EC private key made by txbridge certs")
            return cls(directory, certificate, key)
        certificate, key = make_ca_certificate(name)
        _write_key(key_path, key)
        _write_cert(cert_path, certificate)
        return cls(directory, certificate, key)

    def issue(self, name: str, *, server: bool, sans: Iterable[str] = ()) -> Issued:
        """Issue ``NAME.pem``/``NAME.key``: a node certificate (server and client use,
        with ``sans``, default localhost and loopback) or a client certificate (CN=name)."""
        certificate, key = make_leaf_certificate(
            self.certificate,
            self.key,
            name,
            server=server,
            sans=list(sans) or (list(DEFAULT_SANS) if server else []),
        )
        issued = Issued(self.directory / f"{name}.pem", self.directory / f"{name}.key")
        _write_key(issued.key, key)
        _write_cert(issued.cert, certificate)
        return issued
