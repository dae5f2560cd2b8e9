"""The users file (TOML): user names, scrypt password hashes and roles.

```toml
[users.alice]
password = "scrypt$n=131072,r=8,p=1$...$..."
roles = ["producers", "consumers"]
```

Plain-text passwords are refused at load; ``txbridge user`` writes the hashes.
"""

from __future__ import annotations

import logging
import os
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
from zope.interface import implementer

from security.errors import ConfigError
from security.interfaces import IAuthenticator, ISecurityAuth
from security.passwords import (
    DEFAULT_N,
    DEFAULT_P,
    DEFAULT_R,
    HASH_BYTES,
    SALT_BYTES,
    SCHEME,
    InvalidHash,
    PasswordHash,
)
from security.subject import AuthMethod, Identity
from security.tomlfile import read_toml, write_toml_atomically
from security.validate import (
    check_keys,
    expect_names,
    expect_str,
    expect_table,
    key_path,
)
from security.watched import WatchedFile

log = logging.getLogger("txbridge.security")

USER_KEYS = frozenset({"password", "roles"})
HEADER = (
    "# txbridge users file: edit with `txbridge user add|passwd|remove|list --file FILE`.\n"
    "# Passwords are scrypt hashes; plain-text passwords are refused.\n\n"
)


@attrs.frozen
class UserRecord:
    """One user of the users file."""

    name: str
    password: PasswordHash = attrs.field(repr=False)
    roles: tuple[str, ...] = ()


def check_user_name(name: str) -> str | None:
    """Why ``name`` cannot be a user name, or None if it can."""
    if not name or not name.strip():
        return "a user name must not be empty"
    if name != name.strip():
        return "a user name must not start or end with spaces"
    if any(unicodedata.category(char).startswith("C") for char in name):
        return "a user name must not contain control characters"
    return None


def parse_users(data: Mapping[str, Any], source: str) -> dict[str, UserRecord]:
    """Users from a parsed users file; ConfigError names the file and the key."""
    check_keys(data, {"users"}, source, "")
    users_table = expect_table(data.get("users", {}), source, "users")
    users: dict[str, UserRecord] = {}
    for name, value in users_table.items():
        key = key_path("users", name)
        problem = check_user_name(name)
        if problem is not None:
            raise ConfigError(source, key, problem)
        entry = expect_table(value, source, key)
        check_keys(entry, USER_KEYS, source, key)
        if "password" not in entry:
            raise ConfigError(
                source, key_path(key, "password"), "missing: every user needs a password hash"
            )
        password_key = key_path(key, "password")
        text = expect_str(entry["password"], source, password_key)
        if not text.startswith(SCHEME + "$"):
            raise ConfigError(
                source,
                password_key,
                "a plain-text password is refused; store a scrypt hash instead, for example "
                f"with `txbridge user passwd {name} --file {source}`",
            )
        try:
            password = PasswordHash.parse(text)
        except InvalidHash as error:
            raise ConfigError(
                source, password_key, f"not a usable password hash: {error}"
            ) from None
        roles = expect_names(entry.get("roles", []), source, key_path(key, "roles"))
        users[name] = UserRecord(name, password, roles)
    return users


def load_users_file(path: Path) -> dict[str, UserRecord]:
    """Read and check the users file at ``path``."""
    return parse_users(read_toml(path, "users file"), str(path))


def dump_users(users: Mapping[str, UserRecord]) -> dict[str, Any]:
    """``users`` as the table a users file holds, sorted by name."""
    return {
        "users": {
            name: {"password": record.password.encode(), "roles": list(record.roles)}
            for name, record in sorted(users.items())
        }
    }


def save_users_file(path: Path, users: Mapping[str, UserRecord]) -> None:
    """Write ``users`` to ``path`` atomically (a reader sees the old or the new file)."""
    write_toml_atomically(path, dump_users(users), HEADER)


def _cost(password: PasswordHash) -> tuple[int, int]:
    # scrypt's time grows with n * r * p, its memory with n * r.
    return (password.n * password.r * password.p, password.n * password.r)


def _parameters(password: PasswordHash) -> str:
    return f"n={password.n},r={password.r},p={password.p}"


def decoy_for(users: Mapping[str, UserRecord]) -> PasswordHash:
    """A random hash an unknown user's password is checked against, so that an unknown
    name costs as much hashing as a known one and timing does not tell which names exist.

    It has the parameters of the most expensive hash in ``users`` (the defaults if there
    are none): never cheaper than any real user. With mixed parameters a cheaper user is
    still answered faster than an unknown name; :func:`warn_mixed_parameters` says so.
    """
    if users:
        costliest = max((record.password for record in users.values()), key=_cost)
        n, r, p = costliest.n, costliest.r, costliest.p
    else:
        n, r, p = DEFAULT_N, DEFAULT_R, DEFAULT_P
    return PasswordHash(n, r, p, os.urandom(SALT_BYTES), os.urandom(HASH_BYTES))


def warn_mixed_parameters(users: Mapping[str, UserRecord], source: str) -> None:
    """Log a warning if the users' hashes do not all have the same scrypt parameters."""
    groups: dict[str, list[str]] = {}
    for name, record in sorted(users.items()):
        groups.setdefault(_parameters(record.password), []).append(name)
    if len(groups) < 2:
        return
    listing = "; ".join(
        f"{parameters} for {', '.join(names)}" for parameters, names in sorted(groups.items())
    )
    log.warning(
        "%s: users have different scrypt parameters (%s). Unknown users are checked with "
        "the most expensive ones, so a wrong password of a user with cheaper ones is "
        "answered faster, and the timing tells that the name exists; give every user the "
        "same parameters with `txbridge user passwd NAME --file %s`",
        source,
        listing,
        source,
    )


@attrs.frozen
class _Users:
    users: Mapping[str, UserRecord]
    decoy: PasswordHash


def _load(path: Path) -> _Users:
    users = load_users_file(path)
    warn_mixed_parameters(users, str(path))
    return _Users(users, decoy_for(users))


@implementer(IAuthenticator)
class UsersFileAuthenticator:
    """User name and password checked against the users file.

    The file is read again when it changes on disk (checked on logins the cache does not
    answer); :meth:`reload` re-reads it at once. Safe to call from several threads: the
    hash is checked without holding any lock.
    """

    name = "users-file"

    def __init__(self, path: Path) -> None:
        self._file = WatchedFile(path, _load, "users file")

    def knows(self, user: str) -> bool:
        """Whether ``user`` is in the users file (for checking the configuration)."""
        return user in self._file.value.users

    def authenticate(self, auth: ISecurityAuth) -> Identity | None:
        """The user's identity if the password matches its hash; None otherwise (an
        unknown user's password is checked against a decoy hash first)."""
        user, password = auth.user, auth.password
        if user is None or password is None:
            return None
        loaded = self._file.value
        record = loaded.users.get(user)
        if record is None:
            loaded.decoy.verify(password)
            return None
        if not record.password.verify(password):
            return None
        return Identity(user, frozenset(record.roles), AuthMethod.PASSWORD)

    def reload(self) -> None:
        """Read the users file now; ConfigError (and the old users kept) if it is wrong."""
        self._file.reload()
