"""Chaining authenticators: the first that vouches for a login decides."""

from __future__ import annotations

from collections.abc import Sequence

from zope.interface import implementer

from security.errors import ConfigError
from security.interfaces import IAuthenticator, ISecurityAuth
from security.subject import Identity


@implementer(IAuthenticator)
class ChainAuthenticator:
    """Asks each authenticator in turn; the first identity wins, None if none vouches."""

    name = "chain"

    def __init__(self, authenticators: Sequence[IAuthenticator]) -> None:
        self.authenticators = tuple(authenticators)

    def authenticate(self, auth: ISecurityAuth) -> Identity | None:
        """The identity of the first authenticator that vouches for ``auth``, else None."""
        for authenticator in self.authenticators:
            identity = authenticator.authenticate(auth)
            if identity is not None:
                return identity
        return None

    def reload(self) -> None:
        """Reload every authenticator; raise the first error after trying them all."""
        errors: list[ConfigError] = []
        for authenticator in self.authenticators:
            try:
                authenticator.reload()
            except ConfigError as error:
                errors.append(error)
        if errors:
            raise errors[0]
