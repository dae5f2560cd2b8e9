"""TLS settings for acceptors and connectors, and handshake failures in plain words."""

from __future__ import annotations

from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from OpenSSL import SSL, crypto
from twisted.internet import ssl
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator

from transport.errors import TLSConfigError, TLSHandshakeError

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


@attrs.frozen
class TLSConfig:
    """The files and choices of one TLS endpoint.

    ``cert``/``key``: this side's certificate (with its chain after it) and private key;
    required to accept, optional to connect (then a client certificate).
    ``ca``: the CA bundle to trust: the server's issuers when connecting (default: the
    platform's), the client certificates' issuers when accepting with ``verify_client``.
    ``verify_client``: accept only clients presenting a certificate issued by ``ca``.
    ``server_name``: the name to verify the server's certificate against (default: the
    URL's host).
    """

    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None
    verify_client: bool = False
    server_name: str | None = None

    def server_options(self) -> ssl.CertificateOptions:
        if self.cert is None or self.key is None:
            raise TLSConfigError("a TLS acceptor needs both cert and key")
        if self.verify_client and self.ca is None:
            raise TLSConfigError("verify-client needs a ca file to verify client certificates")
        leaf, *chain = load_certificates(self.cert)
        ca_certs = [_x509(c) for c in load_certificates(self.ca, "ca")] if self.ca else None
        return ssl.CertificateOptions(
            privateKey=_load_key(self.key),
            certificate=_x509(leaf),
            extraCertChain=[_x509(c) for c in chain],
            verify=self.verify_client,
            caCerts=ca_certs if self.verify_client else None,
            requireCertificate=self.verify_client,
            raiseMinimumTo=MINIMUM_VERSION,
        )

    def client_options(self, host: str) -> IOpenSSLClientConnectionCreator:
        if (self.cert is None) != (self.key is None):
            raise TLSConfigError("a TLS client certificate needs both cert and key")
        trust = (
            ssl.trustRootFromCertificates(
                [ssl.Certificate(_x509(c)) for c in load_certificates(self.ca, "ca")]
            )
            if self.ca
            else ssl.platformTrust()
        )
        client_certificate = None
        if self.cert is not None and self.key is not None:
            leaf = load_certificates(self.cert)[0]
            client_certificate = ssl.PrivateCertificate.fromCertificateAndKeyPair(
                ssl.Certificate(_x509(leaf)), ssl.KeyPair(_load_key(self.key))
            )
        return ssl.optionsForClientTLS(
            self.server_name or host,
            trustRoot=trust,
            clientCertificate=client_certificate,
            extraCertificateOptions={"raiseMinimumTo": MINIMUM_VERSION},
        )


_CLIENT_SIDE = (
    (
        ("certificate required", "handshake failure"),
        "the server at {peer} requires a client certificate and none was presented",
    ),
    (
        ("unknown ca", "bad certificate", "certificate unknown", "decrypt error"),
        "the server at {peer} does not trust this client's certificate",
    ),
    (
        ("certificate verify failed",),
        "the certificate of the server at {peer} is not trusted by the configured ca",
    ),
)
_SERVER_SIDE = (
    (
        ("did not return a certificate", "certificate required"),
        "the TLS client at {peer} presented no certificate; this acceptor requires one",
    ),
    (
        ("certificate verify failed", "unknown ca"),
        "the TLS client at {peer} presented a certificate not issued by the trusted ca",
    ),
    (
        ("wrong version number", "http request", "unexpected message", "record layer failure"),
        "the client at {peer} did not speak TLS",
    ),
)


def _reasons(error: BaseException) -> list[str]:
    queue = error.args[0] if error.args else []
    if isinstance(queue, list):
        return [str(entry[-1]) for entry in queue if isinstance(entry, tuple) and entry]
    return [str(queue)]


def describe_tls_failure(error: BaseException, peer: str, is_client: bool) -> TLSHandshakeError:
    """Turn an OpenSSL error into a sentence naming who refused what."""
    reasons = _reasons(error) if isinstance(error, SSL.Error) else [str(error)]
    text = "; ".join(reasons) or type(error).__name__
    lowered = text.casefold()
    for needles, template in _CLIENT_SIDE if is_client else _SERVER_SIDE:
        if any(needle in lowered for needle in needles):
            return TLSHandshakeError(f"{template.format(peer=peer)} (TLS: {text})")
    return TLSHandshakeError(f"TLS with {peer} failed: {text}")
