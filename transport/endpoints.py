"""Listening and connecting by URL, over TCP or TLS, with framed connections."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

import attrs
from twisted.internet import endpoints
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import (
    IListeningPort,
    IOpenSSLClientConnectionCreator,
    IOpenSSLServerConnectionCreator,
    IProtocol,
    IProtocolFactory,
    IReactorTime,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
)
from zope.interface import implementer

from transport.connection import FrameConnection, FrameFactory
from transport.interfaces import IFrameReceiver
from transport.settings import ConnectionSettings
from transport.tls import TLSConfig
from transport.urls import URL, parse_url

if TYPE_CHECKING:
    from twisted.internet import ssl


def _url(url: str | URL) -> URL:
    return url if isinstance(url, URL) else parse_url(url)


def server_endpoint(
    reactor: Any, url: str | URL, tls: TLSConfig | None = None
) -> IStreamServerEndpoint:
    """An endpoint listening where ``url`` says (port 0 picks a free port)."""
    parsed = _url(url)
    tcp: IStreamServerEndpoint
    if isIPv6Address(parsed.host):
        tcp = endpoints.TCP6ServerEndpoint(reactor, parsed.port, interface=parsed.host)
    else:
        tcp = endpoints.TCP4ServerEndpoint(reactor, parsed.port, interface=parsed.host)
    if parsed.is_tls:
        return TLSServerEndpoint(tcp, parsed.tls_config(tls).server_options())
    return tcp


@implementer(IStreamServerEndpoint)
@attrs.frozen
class TLSServerEndpoint:
    """TLS over a TCP endpoint, done in memory by ``TLSMemoryBIOFactory``. Not Twisted's
    ``SSL4ServerEndpoint`` nor its ``wrapClientTLS``: those need the TLS support that
    ``twisted.internet.tcp`` and ``endpoints`` load, with OpenSSL, into every process
    that imports them, TLS or not, unless kept from it (as the ``txbridge`` command
    does); these two load OpenSSL only when a TLS endpoint is used."""

    tcp: IStreamServerEndpoint
    options: IOpenSSLServerConnectionCreator | ssl.CertificateOptions

    def listen(self, factory: IProtocolFactory) -> Deferred[IListeningPort]:
        from twisted.protocols.tls import TLSMemoryBIOFactory  # noqa: PLC0415 (OpenSSL)

        return self.tcp.listen(TLSMemoryBIOFactory(self.options, False, factory))


@implementer(IStreamClientEndpoint)
@attrs.frozen
class TLSClientEndpoint:
    """TLS over a TCP endpoint for a connector, as ``TLSServerEndpoint`` for an acceptor."""

    tcp: IStreamClientEndpoint
    options: IOpenSSLClientConnectionCreator

    def connect(self, factory: IProtocolFactory) -> Deferred[IProtocol]:
        from twisted.protocols.tls import TLSMemoryBIOFactory  # noqa: PLC0415 (OpenSSL)

        connecting = self.tcp.connect(TLSMemoryBIOFactory(self.options, True, factory))
        return connecting.addCallback(_wrapped)


def _wrapped(tls: IProtocol) -> IProtocol:
    """The protocol a TLS connection carries: what the factory the caller gave built."""
    return cast("IProtocol", tls.wrappedProtocol)  # type: ignore[attr-defined]


def client_endpoint(
    reactor: Any, url: str | URL, tls: TLSConfig | None = None
) -> IStreamClientEndpoint:
    """An endpoint connecting where ``url`` says, each attempt bounded by the URL's
    ``connect-timeout-millis``. An address is connected to directly: a name goes through
    HostnameEndpoint, which tries each address it resolves to, but holds a refused
    connect for its attempt delay (0.3 s) first, a delay a client failing over between
    literal addresses need not pay."""
    parsed = _url(url)
    timeout = parsed.connect_timeout
    tcp: IStreamClientEndpoint
    if isIPv6Address(parsed.host):
        tcp = endpoints.TCP6ClientEndpoint(reactor, parsed.host, parsed.port, timeout=timeout)
    elif isIPAddress(parsed.host):
        tcp = endpoints.TCP4ClientEndpoint(reactor, parsed.host, parsed.port, timeout=timeout)
    else:
        tcp = endpoints.HostnameEndpoint(reactor, parsed.host, parsed.port, timeout=timeout)
    if parsed.is_tls:
        return TLSClientEndpoint(tcp, parsed.tls_config(tls).client_options(parsed.host))
    return tcp


def listen(
    reactor: Any,
    url: str | URL,
    receiver_factory: Callable[[], IFrameReceiver],
    *,
    settings: ConnectionSettings | None = None,
    accepted_types: Iterable[int] = (),
    tls: TLSConfig | None = None,
) -> Deferred[IListeningPort]:
    """Accept framed connections at ``url``."""
    factory = FrameFactory(receiver_factory, cast(IReactorTime, reactor), settings, accepted_types)
    return server_endpoint(reactor, url, tls).listen(factory)


def connect(
    reactor: Any,
    url: str | URL,
    receiver: IFrameReceiver,
    *,
    settings: ConnectionSettings | None = None,
    accepted_types: Iterable[int] = (),
    tls: TLSConfig | None = None,
) -> Deferred[FrameConnection]:
    """Open one framed connection to ``url`` (no reconnects: see transport.reconnect)."""
    factory = FrameFactory(
        lambda: receiver, cast(IReactorTime, reactor), settings, accepted_types, is_client=True
    )
    return cast("Deferred[FrameConnection]", client_endpoint(reactor, url, tls).connect(factory))
