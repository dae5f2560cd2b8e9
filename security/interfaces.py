"""The seams: what a protocol head hands the store, and what an authenticator does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from zope.interface import Attribute, Interface

if TYPE_CHECKING:
    from cryptography import x509

    from security.subject import Identity


class ISecurityAuth(Interface):
    """One login attempt, as any protocol head (core, STOMP, bridge, replication,
    management) describes it. No session object is needed."""

    user: str | None = Attribute("The user name the client gave, or None.")
    password: str | None = Attribute("The password the client gave, or None.")
    peer_certificates: Sequence[x509.Certificate] = Attribute(
        "The peer's certificate chain as verified by TLS, leaf first; empty without TLS."
    )
    remote_address: str = Attribute("Where the client connects from, as host:port.")
    protocol: str = Attribute("The protocol head's name: core, stomp, bridge, management...")


class IAuthenticator(Interface):
    """Turns a login attempt into an identity, or declines it.

    Authenticators chain (see :class:`security.authenticators.ChainAuthenticator`): the
    first one returning an identity decides; if all return None the login fails.
    """

    name: str = Attribute("A short name for the audit log, such as users-file.")

    def authenticate(auth: ISecurityAuth) -> Identity | None:
        """The identity ``auth`` proves, or None if this authenticator cannot vouch for it."""

    def reload() -> None:
        """Read its sources again; on a bad source raise ConfigError and keep the old state."""
