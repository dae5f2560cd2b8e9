"""The seams between the transport and the layers that use it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from zope.interface import Attribute, Interface

if TYPE_CHECKING:
    from cryptography import x509
    from twisted.internet.defer import Deferred

    from transport.frames import Frame

WritabilityListener = Callable[[bool], object]


class IFrameConnection(Interface):
    """A framed connection as the layers above see it.

    Writers send while ``is_writable`` is true and otherwise wait for a writability
    listener or ``when_writable()``; nothing is lost if they send anyway, but memory then
    grows with what they send.
    """

    is_writable: bool = Attribute("True while pending bytes are below the high water mark.")
    pending_bytes: int = Attribute("Bytes counted against the water marks now.")
    peer: str = Attribute("The peer's address, as host:port ([v6]:port).")
    lost_reason: BaseException | None = Attribute("Why the connection is gone, or None.")
    max_frame_size: int = Attribute("The largest frame payload this side sends and reads.")

    def send(frame_type: int, payload: bytes) -> None:
        """Queue one frame; it leaves at the end of this reactor turn at the latest."""

    def logged_in() -> None:
        """The peer logged in: accept its frames up to ``max_frame_size`` from now on
        (before, an acceptor with partial-frame limits accepts only small ones)."""

    def call_before_flush(call: Callable[[], None]) -> None:
        """Call ``call()`` once at the end of this reactor turn, just before the turn's
        frames are handed to the transport, so that it can still ``send`` what it gathered
        during the turn (several messages in one frame). Not called if the connection
        closes first."""

    def add_writability_listener(listener: WritabilityListener) -> None:
        """Call ``listener(is_writable)`` after every change, in registration order.

        Listeners are not called when the connection closes or is lost: the receiver's
        ``connection_lost`` says so, and ``when_writable()`` waiters fail."""

    def remove_writability_listener(listener: WritabilityListener) -> None:
        """Stop calling ``listener``."""

    def when_writable() -> Deferred[None]:
        """Fire once the connection is writable (at once if it is now)."""

    def pause_reading() -> None:
        """Stop delivering frames and stop reading from the socket."""

    def resume_reading() -> None:
        """Deliver held frames and read again."""

    def close(error: str | None = None) -> None:
        """Send what is queued (and an error frame if ``error``), then disconnect."""

    def when_lost() -> Deferred[BaseException]:
        """Fire with the reason once the connection is gone."""

    def peer_certificates() -> list[x509.Certificate]:
        """The peer's verified certificate chain, leaf first; empty without TLS."""


class IFrameReceiver(Interface):
    """What a framed connection delivers to the layer above."""

    def connection_made(connection: IFrameConnection) -> None:
        """The connection is up (for TLS: the handshake may still be under way)."""

    def frame_received(frame: Frame) -> None:
        """One application frame arrived (control frames are handled below)."""

    def connection_lost(reason: BaseException) -> None:
        """The connection is gone; ``reason`` says why in words a person can act on."""
