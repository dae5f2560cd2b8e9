"""Salted scrypt password hashes in a self-describing string.

``scrypt$n=131072,r=8,p=1$<salt, base64>$<hash, base64>``: the cost parameters travel
with the hash, so raising the default later leaves existing hashes valid.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import re

import attrs
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

SCHEME = "scrypt"
# OWASP's recommended minimum for scrypt: N=2**17 (128 MiB), r=8, p=1.
DEFAULT_N = 2**17
DEFAULT_R = 8
DEFAULT_P = 1
SALT_BYTES = 16
HASH_BYTES = 32
# Bounds a hash from a file may ask for: beyond these one login could exhaust the node.
MAX_N = 2**20
MAX_R = 32
MAX_P = 16
MIN_SALT_BYTES = 8
MIN_HASH_BYTES = 16

_PARAMETERS = re.compile(r"n=(\d+),r=(\d+),p=(\d+)")

HASH_HELP = f'a password hash "{SCHEME}$n=...,r=...,p=...$<salt>$<hash>"'


class InvalidHash(ValueError):
    """A string that is not a usable password hash (the message never repeats it)."""


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise InvalidHash(f"the {what} is not base64") from None


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _kdf(salt: bytes, length: int, n: int, r: int, p: int) -> Scrypt:
    return Scrypt(salt=salt, length=length, n=n, r=r, p=p)


@attrs.frozen
class PasswordHash:
    """A parsed hash: cost parameters, salt and derived key."""

    n: int
    r: int
    p: int
    salt: bytes = attrs.field(repr=False)
    digest: bytes = attrs.field(repr=False)

    @classmethod
    def parse(cls, text: str) -> PasswordHash:
        """Parse ``text`` or raise :class:`InvalidHash` (never quoting ``text``)."""
        parts = text.split("$")
        if len(parts) != 4 or parts[0] != SCHEME:
            raise InvalidHash(f"expected {HASH_HELP}")
        found = _PARAMETERS.fullmatch(parts[1])
        if found is None:
            raise InvalidHash(f'the parameters must read "n=<N>,r=<R>,p=<P>" in {HASH_HELP}')
        n, r, p = (int(value) for value in found.groups())
        if n < 2 or n & (n - 1) or n > MAX_N:
            raise InvalidHash(f"n must be a power of two from 2 to {MAX_N}")
        if not 1 <= r <= MAX_R or not 1 <= p <= MAX_P:
            raise InvalidHash(f"r must be 1 to {MAX_R} and p 1 to {MAX_P}")
        salt = _b64decode(parts[2], "salt")
        digest = _b64decode(parts[3], "hash")
        if len(salt) < MIN_SALT_BYTES or len(digest) < MIN_HASH_BYTES:
            raise InvalidHash(
                f"the salt must have at least {MIN_SALT_BYTES} bytes "
                f"and the hash at least {MIN_HASH_BYTES}"
            )
        return cls(n, r, p, salt, digest)

    def encode(self) -> str:
        return (
            f"{SCHEME}$n={self.n},r={self.r},p={self.p}"
            f"${_b64encode(self.salt)}${_b64encode(self.digest)}"
        )

    def verify(self, password: str) -> bool:
        """Whether ``password`` derives this hash (compared in constant time)."""
        derived = _kdf(self.salt, len(self.digest), self.n, self.r, self.p).derive(
            password.encode("utf-8")
        )
        return hmac.compare_digest(derived, self.digest)


def hash_password(
    password: str, *, n: int = DEFAULT_N, r: int = DEFAULT_R, p: int = DEFAULT_P
) -> str:
    """A new salted hash of ``password``, as a string for a users file."""
    if not password:
        raise ValueError("a password must not be empty")
    salt = os.urandom(SALT_BYTES)
    digest = _kdf(salt, HASH_BYTES, n, r, p).derive(password.encode("utf-8"))
    encoded = PasswordHash(n, r, p, salt, digest).encode()
    PasswordHash.parse(encoded)  # refuse parameters a users file could not load
    return encoded


def verify_password(password: str, encoded: str | PasswordHash) -> bool:
    """Whether ``password`` matches ``encoded`` (False for an unusable hash)."""
    try:
        parsed = encoded if isinstance(encoded, PasswordHash) else PasswordHash.parse(encoded)
    except InvalidHash:
        return False
    return parsed.verify(password)
