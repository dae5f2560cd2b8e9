"""Role mapping: a DN, user or group (role) gives further roles, additively."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from security.certificates import normalize_dn
from security.subject import Identity


def normalize_principal(name: str) -> str:
    """A DN in canonical RFC 4514 spelling; any other name unchanged."""
    if "=" in name:
        try:
            return normalize_dn(name)
        except ValueError:
            return name
    return name


@attrs.frozen
class RoleRule:
    """``from`` (a DN, a user name or a role/group) adds the role ``to``."""

    source: str = attrs.field(converter=normalize_principal)
    role: str


class RoleMapper:
    """Adds the ``to`` role of every rule whose ``from`` is one of the identity's names:
    its user name, its principals (a certificate's subject DN) or a role it already has.

    Rules apply once, to the names the authenticator gave (not to roles other rules
    added), and only ever add roles.
    """

    def __init__(self, rules: Iterable[RoleRule] = ()) -> None:
        self._rules: dict[str, set[str]] = {}
        for rule in rules:
            self._rules.setdefault(rule.source, set()).add(rule.role)

    def apply(self, identity: Identity) -> Identity:
        if not self._rules:
            return identity
        names = {identity.user, *identity.principals, *identity.roles}
        added = set().union(*(self._rules.get(name, ()) for name in names))
        if added <= identity.roles:
            return identity
        return attrs.evolve(identity, roles=identity.roles | added)
