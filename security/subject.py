"""Who logged in: what an authenticator proved, and the subject."""

from __future__ import annotations

import enum

import attrs


class AuthMethod(enum.StrEnum):
    """How a subject proved who it is."""

    PASSWORD = "password"
    CERTIFICATE = "certificate"
    NONE = "none"  # security is disabled


@attrs.frozen
class Identity:
    """What an authenticator proved: a user, its roles and its other names.

    ``principals`` are the subject DNs (canonical RFC 4514) of the certificate the user
    logged in with, which ``dn:`` role-mapping rules match.
    """

    user: str
    roles: frozenset[str]
    method: AuthMethod
    principals: frozenset[str] = frozenset()


@attrs.frozen
class Subject:
    """An authenticated user on one connection, as ``SecurityStore.check`` takes it."""

    user: str
    roles: frozenset[str]
    method: AuthMethod
    protocol: str = ""
    remote_address: str = ""
    internal: bool = False  # the configured cluster user: node-to-node links
