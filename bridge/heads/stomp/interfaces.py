"""The seam between the STOMP session (sans-IO) and the connection that carries it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zope.interface import Attribute, Interface

if TYPE_CHECKING:
    from cryptography import x509

    from bridge.heads.stomp.frames import Frame
    from bridge.message import LargeBody


class IStompTransport(Interface):
    """What a STOMP session needs of its connection."""

    peer: str = Attribute("The peer's address, as host:port.")
    is_writable: bool = Attribute("False once queued bytes reached the high water mark.")

    def send(frame: Frame) -> None:
        """Queue a frame; it leaves at the end of this reactor turn at the latest. When the
        connection stops being writable because of it, the session hears so at once."""

    def send_serialized(head: bytes, body: bytes) -> None:
        """``send`` for a frame already serialized: its head (command, headers and the
        blank line) and its body; the closing NUL is the transport's to add."""

    def send_large(frame: Frame, body: LargeBody) -> None:
        """Queue ``frame`` (its body empty) with ``body``, read from its file a chunk at a
        time as the connection drains; frames sent meanwhile follow it. The connection is
        not writable while it is being sent."""

    def close() -> None:
        """Send what is queued, then disconnect; nothing more is read."""

    def pause_reading(reason: str) -> None:
        """Stop reading (and parsing) until every reason given is resumed; the silence
        of a peer that is not read does not count against it."""

    def resume_reading(reason: str) -> None:
        """Drop one reason to pause; reading goes on once none is left."""

    def set_heart_beats(send_every: float | None, silence_limit: float | None) -> None:
        """Send a heart-beat every ``send_every`` seconds, and drop the peer after
        ``silence_limit`` seconds without a byte from it (None: never)."""

    def peer_certificates() -> list[x509.Certificate]:
        """The peer's verified TLS certificate chain, leaf first; empty without TLS."""
