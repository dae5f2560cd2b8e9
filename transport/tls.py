"""TLS settings for acceptors and connectors, and handshake failures in plain words."""

from __future__ import annotations

from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from OpenSSL import SSL, crypto
from service_identity import VerificationError
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
        options = ssl.CertificateOptions(
            privateKey=_load_key(self.key),
            certificate=_x509(leaf),
            extraCertChain=[_x509(c) for c in chain],
            verify=self.verify_client,
            caCerts=ca_certs if self.verify_client else None,
            requireCertificate=self.verify_client,
            raiseMinimumTo=MINIMUM_VERSION,
        )
        if self.verify_client:
            # The context is made once and shared by every connection of this acceptor;
            # only a callback set on the context (not a connection) has its error raised.
            context = options.getContext()
            context.set_verify(context.get_verify_mode(), _refuse_with_reason)
        return options

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
        options: dict[str, object] = {"raiseMinimumTo": MINIMUM_VERSION}
        if self.cert is not None and self.key is not None:
            leaf, *chain = load_certificates(self.cert)
            client_certificate = ssl.PrivateCertificate.fromCertificateAndKeyPair(
                ssl.Certificate(_x509(leaf)), ssl.KeyPair(_load_key(self.key))
            )
            # The intermediates after the leaf go too, so a server trusting only the root
            # can build the path to it.
            options["extraCertChain"] = [_x509(c) for c in chain]
        return ssl.optionsForClientTLS(
            self.server_name or host,
            trustRoot=trust,
            clientCertificate=client_certificate,
            extraCertificateOptions=options,
        )


# (needles, sentence), most specific first: the first whose needle is in OpenSSL's reasons
# describes the failure. "alert ..." reasons are what the peer told us; the rest are
# this side's own findings.
_CLIENT_SIDE = (
    (
        ("certificate required",),
        "the server at {peer} requires a client certificate and none was presented",
    ),
    (
        ("alert certificate expired",),
        "the server at {peer} refused this client's certificate: it has expired",
    ),
    (
        ("alert certificate revoked",),
        "the server at {peer} refused this client's certificate: it has been revoked",
    ),
    (
        (
            "unknown ca",
            "bad certificate",
            "certificate unknown",
            "unsupported certificate",
            "decrypt error",
        ),
        "the server at {peer} does not trust this client's certificate",
    ),
    (
        ("alert protocol version", "unsupported protocol", "no protocols available"),
        "the server at {peer} shares no TLS version with this client",
    ),
    (
        ("handshake failure",),
        "the server at {peer} refused the TLS handshake: it may require a client "
        "certificate, or share no TLS version or cipher with this client",
    ),
    (
        ("certificate verify failed",),
        "the certificate of the server at {peer} could not be verified against the "
        "configured ca: unknown issuer, expired or not yet valid",
    ),
    (
        ("wrong version number", "packet length too long", "record layer failure"),
        "the server at {peer} did not answer in TLS",
    ),
)
_SERVER_SIDE = (
    (
        ("did not return a certificate", "certificate required"),
        "the TLS client at {peer} presented no certificate; this acceptor requires one",
    ),
    (
        ("certificate has expired",),
        "the TLS client at {peer} presented a certificate that has expired",
    ),
    (
        ("certificate is not yet valid",),
        "the TLS client at {peer} presented a certificate that is not valid yet",
    ),
    (
        (
            "unable to get local issuer",
            "unable to get issuer",
            "unable to verify the first certificate",
            "self-signed certificate",
        ),
        "the TLS client at {peer} presented a certificate not issued by the trusted ca",
    ),
    (
        ("certificate verify failed",),
        "the TLS client at {peer} presented a certificate that could not be verified "
        "against the trusted ca: unknown issuer, expired or not yet valid",
    ),
    (
        (
            "alert unknown ca",
            "alert bad certificate",
            "alert certificate unknown",
            "alert certificate expired",
            "alert certificate revoked",
            "alert decrypt error",
        ),
        "the TLS client at {peer} does not trust this acceptor's certificate",
    ),
    (
        ("no shared cipher", "unsupported protocol", "alert protocol version", "version too low"),
        "the TLS client at {peer} shares no TLS version or cipher with this acceptor",
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


def _mismatched_names(error: VerificationError) -> list[str]:
    """The names a server's certificate failed to match, from service_identity's
    mismatch objects (``DNS_ID.hostname``, ``IPAddress_ID.ip``, or a URI/SRV ID's
    ``dns_id``)."""
    names: list[str] = []
    for mismatch in error.errors:
        identity = getattr(mismatch, "mismatched_id", None)
        identity = getattr(identity, "dns_id", identity)
        hostname = getattr(identity, "hostname", None)
        ip = getattr(identity, "ip", None)
        if isinstance(hostname, bytes):
            name = hostname.decode("ascii", errors="replace")
        elif ip is not None:
            name = str(ip)
        else:
            name = str(identity)
        if name not in names:
            names.append(name)
    return names


def describe_tls_failure(error: BaseException, peer: str, is_client: bool) -> TLSHandshakeError:
    """Turn an OpenSSL (or hostname verification) error into a sentence naming who refused
    what."""
    if isinstance(error, VerificationError):
        names = " or ".join(_mismatched_names(error)) or "requested"
        return TLSHandshakeError(
            f"the certificate of the server at {peer} is not valid for the name {names}"
        )
    reasons = _reasons(error) if isinstance(error, SSL.Error) else [str(error)]
    text = "; ".join(reasons) or type(error).__name__
    lowered = text.casefold()
    for needles, template in _CLIENT_SIDE if is_client else _SERVER_SIDE:
        if any(needle in lowered for needle in needles):
            return TLSHandshakeError(f"{template.format(peer=peer)} (TLS: {text})")
    return TLSHandshakeError(f"TLS with {peer} failed: {text}")
