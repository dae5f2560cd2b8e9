"""Logging in with a TLS client certificate: subject DN or SAN -> user, via a mapping file.

```toml
[[certificate]]
subject = "CN=bridge-a,OU=links,O=Example"   # RFC 4514, as `openssl x509 -nameopt RFC2253`
user = "bridge-a"
roles = ["bridges"]

[[certificate]]
san = "dns:bridge-b.example.com"             # dns:, email:, uri: or ip:
user = "bridge-b"
```

The chain must already be verified by TLS (the acceptor's ``verify-client``): this module
maps, it does not verify.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from zope.interface import implementer

from security.errors import ConfigError
from security.interfaces import IAuthenticator, ISecurityAuth
from security.subject import AuthMethod, Identity
from security.tomlfile import read_toml
from security.users_file import check_user_name
from security.validate import (
    check_keys,
    expect_names,
    expect_str,
    expect_tables,
    key_path,
)
from security.watched import WatchedFile

if TYPE_CHECKING:
    from cryptography import x509

# cryptography is imported where a DN or a certificate is read, not here: a node that
# uses no TLS certificates then never loads it (bridge.ctl.lean).

ENTRY_KEYS = frozenset({"subject", "san", "user", "roles"})
SAN_KINDS = ("dns", "email", "uri", "ip")


# Spaces around the separators, as in OpenSSL's "CN = app, O = Example", are dropped.
_SEPARATOR_SPACES = re.compile(r"\s*(?<!\\)([,+=])\s*")
# Attribute type names are case-insensitive: "cn=app" is "CN=app".
_ATTRIBUTE_TYPE = re.compile(r"(^|(?<!\\)[,+])([A-Za-z][A-Za-z0-9-]*)=")


_EMAIL_TYPES = ("EMAILADDRESS", "E")
_KNOWN_TYPES = frozenset({"CN", "L", "ST", "O", "OU", "C", "STREET", "DC", "UID", *_EMAIL_TYPES})


def _upper_type(found: re.Match[str]) -> str:
    name = found.group(2)
    return found.group(1) + (name.upper() if name.upper() in _KNOWN_TYPES else name) + "="


def normalize_dn(text: str) -> str:
    """``text`` as an RFC 4514 string in cryptography's canonical spelling.

    ValueError if it is not a distinguished name.
    """
    compact = _SEPARATOR_SPACES.sub(r"\1", text.strip())
    compact = _ATTRIBUTE_TYPE.sub(_upper_type, compact)
    from cryptography import x509  # noqa: PLC0415 (see above)

    extra_types = dict.fromkeys(_EMAIL_TYPES, x509.NameOID.EMAIL_ADDRESS)
    return x509.Name.from_rfc4514_string(compact, extra_types).rfc4514_string()


def certificate_dn(certificate: x509.Certificate) -> str:
    """The subject DN of ``certificate``, spelled as :func:`normalize_dn` spells DNs."""
    return certificate.subject.rfc4514_string()


def normalize_san(text: str) -> str:
    """``kind:value`` with the kind lower-case, and DNS names and IPs canonical."""
    kind, sep, value = text.strip().partition(":")
    kind = kind.strip().lower()
    value = value.strip()
    if not sep or kind not in SAN_KINDS or not value:
        raise ValueError(f"expected {' '.join(k + ':...' for k in SAN_KINDS)}")
    if kind == "dns":
        value = value.lower().rstrip(".")
    elif kind == "ip":
        value = str(ipaddress.ip_address(value))
    elif kind == "email":
        local, _, domain = value.rpartition("@")
        value = f"{local}@{domain.lower()}"
    return f"{kind}:{value}"


def certificate_sans(certificate: x509.Certificate) -> list[str]:
    """The subject alternative names of ``certificate`` as normalized ``kind:value``."""
    from cryptography import x509  # noqa: PLC0415 (see above)

    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    names = extension.value
    found = [f"dns:{v.lower().rstrip('.')}" for v in names.get_values_for_type(x509.DNSName)]
    found += [normalize_san(f"email:{v}") for v in names.get_values_for_type(x509.RFC822Name)]
    found += [f"uri:{v}" for v in names.get_values_for_type(x509.UniformResourceIdentifier)]
    found += [f"ip:{v}" for v in names.get_values_for_type(x509.IPAddress)]
    return found


@attrs.frozen
class CertificateUser:
    """One mapping: a subject DN or a SAN to a user, with roles."""

    user: str
    roles: tuple[str, ...]
    subject: str | None = None
    san: str | None = None


@attrs.frozen
class CertificateMap:
    """A parsed mapping file: users by normalized subject DN and by normalized SAN."""

    by_subject: Mapping[str, CertificateUser]
    by_san: Mapping[str, CertificateUser]

    def find(self, leaf: x509.Certificate) -> CertificateUser | None:
        """The user the leaf's subject DN maps to, else its first mapped SAN's."""
        found = self.by_subject.get(certificate_dn(leaf))
        if found is not None:
            return found
        for san in certificate_sans(leaf):
            found = self.by_san.get(san)
            if found is not None:
                return found
        return None

    def knows(self, user: str) -> bool:
        """Whether some certificate maps to ``user``."""
        mapped = (*self.by_subject.values(), *self.by_san.values())
        return any(entry.user == user for entry in mapped)


def parse_certificate_map(data: Mapping[str, Any], source: str) -> CertificateMap:
    """The mapping in a parsed mapping file; ConfigError names ``source`` and the key
    (an entry with both or neither of subject and san, a bad DN or SAN, a DN or SAN
    mapped twice, a missing or bad user)."""
    check_keys(data, {"certificate"}, source, "")
    by_subject: dict[str, CertificateUser] = {}
    by_san: dict[str, CertificateUser] = {}
    for index, entry in enumerate(
        expect_tables(data.get("certificate", []), source, "certificate")
    ):
        key = key_path("certificate", index)
        check_keys(entry, ENTRY_KEYS, source, key)
        if ("subject" in entry) == ("san" in entry):
            raise ConfigError(source, key, "expected exactly one of subject (a DN) or san")
        if "user" not in entry:
            raise ConfigError(source, key_path(key, "user"), "missing: the user to log in as")
        user = expect_str(entry["user"], source, key_path(key, "user"))
        problem = check_user_name(user)
        if problem is not None:
            raise ConfigError(source, key_path(key, "user"), problem)
        roles = expect_names(entry.get("roles", []), source, key_path(key, "roles"))
        if "subject" in entry:
            field = key_path(key, "subject")
            text = expect_str(entry["subject"], source, field)
            try:
                dn = normalize_dn(text)
            except ValueError:
                raise ConfigError(
                    source, field, f'expected an RFC 4514 DN like "CN=app,O=Example", got {text!r}'
                ) from None
            table, name, mapped = by_subject, dn, CertificateUser(user, roles, subject=dn)
        else:
            field = key_path(key, "san")
            text = expect_str(entry["san"], source, field)
            try:
                san = normalize_san(text)
            except ValueError as error:
                raise ConfigError(source, field, f"{error}, got {text!r}") from None
            table, name, mapped = by_san, san, CertificateUser(user, roles, san=san)
        if name in table:
            raise ConfigError(source, field, f"{name!r} is mapped twice")
        table[name] = mapped
    return CertificateMap(by_subject, by_san)


def load_certificate_map(path: Path) -> CertificateMap:
    """Read and check the certificate mapping file at ``path``."""
    return parse_certificate_map(read_toml(path, "certificate mapping file"), str(path))


def _leaf(chain: Sequence[x509.Certificate]) -> x509.Certificate | None:
    return chain[0] if chain else None


@implementer(IAuthenticator)
class CertificateAuthenticator:
    """A verified client certificate logs in, without a password, as the user its
    subject DN or a SAN maps to. An unmapped certificate is not vouched for.

    If the client also names a user and it is not the mapped one, this authenticator
    declines, leaving the login to the password authenticators.
    """

    name = "certificate"

    def __init__(self, path: Path) -> None:
        self._file = WatchedFile(path, load_certificate_map, "certificate mapping file")

    def knows(self, user: str) -> bool:
        """Whether some certificate maps to ``user`` (for checking the configuration)."""
        return self._file.value.knows(user)

    def authenticate(self, auth: ISecurityAuth) -> Identity | None:
        """The mapped user of the leaf certificate, or None (no chain, unmapped, or the
        client named another user)."""
        leaf = _leaf(auth.peer_certificates)
        if leaf is None:
            return None
        mapped = self._file.value.find(leaf)
        if mapped is None or (auth.user is not None and auth.user != mapped.user):
            return None
        return Identity(
            mapped.user,
            frozenset(mapped.roles),
            AuthMethod.CERTIFICATE,
            principals=frozenset({certificate_dn(leaf)}),
        )

    def reload(self) -> None:
        """Read the mapping file now; ConfigError (and the old mapping kept) if wrong."""
        self._file.reload()
