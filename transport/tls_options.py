"""The OpenSSL side of ``TLSConfig``: an acceptor's and a connector's TLS options, from
its certificate, key and CA files.

Kept apart from ``transport.tls`` so that a process whose configuration uses no TLS never
loads OpenSSL and cryptography (about 14 MiB of a node's resident memory)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from OpenSSL import SSL, crypto
from twisted.internet import ssl
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator

from transport.errors import TLSConfigError

if TYPE_CHECKING:
    from transport.tls import TLSConfig

MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2
_KEY_TYPES = (
    ec.EllipticCurvePrivateKey,
    rsa.RSAPrivateKey,
    ed25519.Ed25519PrivateKey,
    ed448.Ed448PrivateKey,
)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise TLSConfigError(f"TLS {what} file {path}: {error.strerror or error}") from None


def load_certificates(path: Path, what: str = "certificate") -> list[x509.Certificate]:
    """Every certificate in a PEM file (a chain or a CA bundle), in file order."""
    data = _read(path, what)
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise TLSConfigError(f"TLS {what} file {path}: no PEM certificate in it") from None
    return certificates


def _load_key(path: Path) -> crypto.PKey:
    data = _read(path, "key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as error:
        raise TLSConfigError(
            f"TLS key file {path}: not an unencrypted PEM private key ({error})"
        ) from None
    if not isinstance(key, _KEY_TYPES):
        raise TLSConfigError(f"TLS key file {path}: {type(key).__name__} keys are not supported")
    return crypto.PKey.from_cryptography_key(key)


def _x509(certificate: x509.Certificate) -> crypto.X509:
    return crypto.X509.from_cryptography(certificate)


# OpenSSL's X509_V_ERR_* codes (stable across versions) a peer's certificate most often
# fails with, in OpenSSL's own words.
_VERIFY_ERRORS = {
    2: "unable to get issuer certificate",
    7: "certificate signature failure",
    9: "certificate is not yet valid",
    10: "certificate has expired",
    18: "self-signed certificate",
    19: "self-signed certificate in certificate chain",
    20: "unable to get local issuer certificate",
    21: "unable to verify the first certificate",
    23: "certificate revoked",
    24: "invalid CA certificate",
    25: "path length constraint exceeded",
    26: "unsupported certificate purpose",
    27: "certificate not trusted",
    28: "certificate rejected",
}


class PeerCertificateRefused(SSL.Error):
    """A peer's certificate failed verification, with OpenSSL's reason (which the error
    OpenSSL raises from the handshake, "certificate verify failed", leaves out)."""

    def __init__(self, code: int, subject: str) -> None:
        reason = _VERIFY_ERRORS.get(code, f"verify error {code}")
        super().__init__(
            [("x509 certificate routines", "", f"certificate verify failed: {reason} ({subject})")]
        )


def _refuse_with_reason(
    connection: SSL.Connection, certificate: crypto.X509, code: int, depth: int, ok: int
) -> bool:
    """The verify callback of an acceptor: raising here makes pyOpenSSL fail the handshake
    (OpenSSL still sends the peer the matching alert) and re-raise this from it."""
    if ok:
        return True
    raise PeerCertificateRefused(code, certificate.to_cryptography().subject.rfc4514_string())


def server_options(config: TLSConfig) -> ssl.CertificateOptions:
    """An acceptor's options: its certificate and key, and the CA its clients' certificates
    must be issued by when it verifies them."""
    if config.cert is None or config.key is None:
        raise TLSConfigError("a TLS acceptor needs both cert and key")
    if config.verify_client and config.ca is None:
        raise TLSConfigError("verify-client needs a ca file to verify client certificates")
    leaf, *chain = load_certificates(config.cert)
    ca_certs = [_x509(c) for c in load_certificates(config.ca, "ca")] if config.ca else None
    options = ssl.CertificateOptions(
        privateKey=_load_key(config.key),
        certificate=_x509(leaf),
        extraCertChain=[_x509(c) for c in chain],
        verify=config.verify_client,
        caCerts=ca_certs if config.verify_client else None,
        requireCertificate=config.verify_client,
        raiseMinimumTo=MINIMUM_VERSION,
    )
    if config.verify_client:
        # The context is made once and shared by every connection of this acceptor;
        # only a callback set on the context (not a connection) has its error raised.
        context = options.getContext()
        context.set_verify(context.get_verify_mode(), _refuse_with_reason)
    return options


def client_options(config: TLSConfig, host: str) -> IOpenSSLClientConnectionCreator:
    """A connector's options: the CA to trust (default: the platform's), the name to
    verify, and its client certificate if it has one."""
    if (config.cert is None) != (config.key is None):
        raise TLSConfigError("a TLS client certificate needs both cert and key")
    trust = (
        ssl.trustRootFromCertificates(
            [ssl.Certificate(_x509(c)) for c in load_certificates(config.ca, "ca")]
        )
        if config.ca
        else ssl.platformTrust()
    )
    client_certificate = None
    options: dict[str, object] = {"raiseMinimumTo": MINIMUM_VERSION}
    if config.cert is not None and config.key is not None:
        leaf, *chain = load_certificates(config.cert)
        client_certificate = ssl.PrivateCertificate.fromCertificateAndKeyPair(
            ssl.Certificate(_x509(leaf)), ssl.KeyPair(_load_key(config.key))
        )
        # The intermediates after the leaf go too, so a server trusting only the root
        # can build the path to it.
        options["extraCertChain"] = [_x509(c) for c in chain]
    return ssl.optionsForClientTLS(
        config.server_name or host,
        trustRoot=trust,
        clientCertificate=client_certificate,
        extraCertificateOptions=options,
    )
