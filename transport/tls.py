"""TLS settings for acceptors and connectors.

Only the settings: the OpenSSL side (``transport.tls_options``) is imported when an
endpoint uses TLS, so a node without TLS never loads OpenSSL and cryptography."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from twisted.internet import ssl
    from twisted.internet.interfaces import IOpenSSLClientConnectionCreator

DEFAULT_SANS = ("localhost", "127.0.0.1", "::1")
"""The names a development node certificate is valid for unless others are given."""


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
        from transport.tls_options import server_options  # noqa: PLC0415 (OpenSSL)

        return server_options(self)

    def client_options(self, host: str) -> IOpenSSLClientConnectionCreator:
        from transport.tls_options import client_options  # noqa: PLC0415 (OpenSSL)

        return client_options(self, host)
