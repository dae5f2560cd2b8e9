"""The errors the transport raises, each saying what was wrong."""

from __future__ import annotations


class ProtocolError(Exception):
    """The peer broke the framing rules; the connection it came on must close."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConnectionClosed(Exception):
    """A frame was sent, or writability awaited, on a connection that is closing or closed."""


class PeerError(Exception):
    """The peer sent an error frame and closed: its message says why."""


class ConnectionTTLExpired(Exception):
    """Nothing arrived from the peer for longer than the connection TTL."""


class TLSConfigError(ValueError):
    """A TLS setting names a file that is missing or not what it should be."""


class TLSHandshakeError(Exception):
    """The TLS handshake failed; the message says which side refused what."""


class URLError(ValueError):
    """A connection URL is malformed or names an unsupported scheme or option."""


class ReconnectAttemptsExhausted(Exception):
    """Every reconnect attempt the policy allows has failed; ``cause`` is what the last
    attempt ran into (a refused connection, a dropped one), without the policy's words."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause
