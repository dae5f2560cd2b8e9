"""Loading Twisted's TCP, reactor base and endpoints without their own TLS support, so
that a node that uses no TLS never loads OpenSSL and cryptography: about 14 MiB of its
resident memory (measured: ``import twisted.internet.reactor`` takes 45 MiB with them,
31 MiB without; an idle node 60 MiB, then 48).

``twisted.internet.tcp`` (so that any TCP connection can start TLS),
``twisted.internet.posixbase`` (for the reactor's ``listenSSL`` and ``connectSSL``) and
``twisted.internet.endpoints`` (for its TLS endpoints) import pyOpenSSL as they are
imported, and each does without it when that import fails. txbridge uses none of those:
its TLS acceptors and connectors wrap TCP in ``TLSMemoryBIOFactory`` themselves
(``transport.endpoints``), which loads OpenSSL when the first is made. Run before
anything imports the three; where one is already loaded, this changes nothing."""

from __future__ import annotations

import importlib
import sys

_TWISTED = ("twisted.internet.tcp", "twisted.internet.posixbase", "twisted.internet.endpoints")
_OPENSSL = "OpenSSL"


def import_twisted_without_tls() -> None:
    """Import those three with pyOpenSSL unavailable to them (once, first)."""
    if any(name in sys.modules for name in (*_TWISTED, _OPENSSL)):
        return
    sys.modules[_OPENSSL] = None  # type: ignore[assignment]
    try:
        for name in _TWISTED:
            importlib.import_module(name)
    finally:
        del sys.modules[_OPENSSL]
