"""TLS handshake failures in plain words: who refused what, from OpenSSL's reasons.

Imported only once a TLS connection has failed (OpenSSL is then loaded already)."""

from __future__ import annotations

from OpenSSL import SSL
from service_identity import VerificationError

from transport.errors import TLSHandshakeError

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
