"""Role mapping: a user, a role (group) or a certificate DN gives further roles, additively.

Each rule names what it maps from with a kind, so the three namespaces never mix: a user
called ``ops`` does not get what ``role:ops`` maps to.

```toml
[[security.role-mapping]]
from = "role:ops"                  # a role the authenticator gave (a group)
to = "admins"

[[security.role-mapping]]
from = "user:alice"                # a user name
to = "auditors"

[[security.role-mapping]]
from = "dn:CN=bridge-a,O=Example"  # the subject DN of the certificate logged in with
to = "bridges"
```
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from security.certificates import normalize_dn
from security.subject import Identity


class SourceKind(enum.StrEnum):
    """What a rule's ``from`` names, written before a colon: ``role:ops``."""

    USER = "user"
    ROLE = "role"
    DN = "dn"


_KINDS = frozenset(kind.value for kind in SourceKind)

FROM_HELP = 'expected "role:NAME", "user:NAME" or "dn:DN" (such as "dn:CN=app,O=Example")'


def parse_source(text: str) -> tuple[SourceKind, str]:
    """``(kind, name)`` of a rule's ``from``; a DN comes back in canonical RFC 4514 form.

    ValueError saying what was expected if the kind is missing or unknown, the name is
    empty or the DN is not one.
    """
    kind, colon, name = text.partition(":")
    kind, name = kind.strip().lower(), name.strip()
    if not colon or kind not in _KINDS or not name:
        raise ValueError(FROM_HELP)
    source_kind = SourceKind(kind)
    if source_kind is SourceKind.DN:
        try:
            name = normalize_dn(name)
        except ValueError:
            raise ValueError(f"{FROM_HELP}; {name!r} is not an RFC 4514 DN") from None
    return source_kind, name


@attrs.frozen
class RoleRule:
    """Anyone whose ``kind`` name is ``name`` gets the role ``role``."""

    kind: SourceKind
    name: str
    role: str

    @classmethod
    def parse(cls, source: str, role: str) -> RoleRule:
        """The rule ``from = source``, ``to = role`` (ValueError as :func:`parse_source`)."""
        kind, name = parse_source(source)
        return cls(kind, name, role)


class RoleMapper:
    """Adds the role of every rule that names the identity: its user name (``user:``),
    a role its authenticator gave (``role:``) or the subject DN of its certificate
    (``dn:``).

    Rules apply once, to the names the authenticator gave (not to roles other rules
    added), and only ever add roles.
    """

    def __init__(self, rules: Iterable[RoleRule] = ()) -> None:
        self._rules: dict[tuple[SourceKind, str], set[str]] = {}
        for rule in rules:
            self._rules.setdefault((rule.kind, rule.name), set()).add(rule.role)

    def apply(self, identity: Identity) -> Identity:
        """``identity`` with the roles the rules add (the same object if none)."""
        if not self._rules:
            return identity
        names = {
            (SourceKind.USER, identity.user),
            *((SourceKind.DN, dn) for dn in identity.principals),
            *((SourceKind.ROLE, role) for role in identity.roles),
        }
        added = set().union(*(self._rules.get(name, ()) for name in names))
        if added <= identity.roles:
            return identity
        return attrs.evolve(identity, roles=identity.roles | added)
