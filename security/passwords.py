"""Salted scrypt password hashes in a self-describing string.

``scrypt$n=131072,r=8,p=1$<salt, base64>$<hash, base64>``: the cost parameters travel
with the hash, so raising the default later leaves existing hashes valid.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
import re
from collections.abc import Callable

import attrs

SCHEME = "scrypt"
# OWASP's recommended minimum for scrypt: N=2**17 (128 MiB), r=8, p=1.
DEFAULT_N = 2**17
DEFAULT_R = 8
DEFAULT_P = 1
SALT_BYTES = 16
HASH_BYTES = 32
# Bounds any hash may ask for, checked before hashing (when a hash is made or a users
# file is loaded): beyond these one login could exhaust the node's memory or CPU.
MAX_MEMORY = 256 * 2**20  # bytes scrypt needs, 128 * n * r: twice the default's
MAX_P = 16
MAX_WORK = 2**30  # 128 * n * r * p, proportional to the time: 8 times the default's
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


def _mib(size: int) -> str:
    return f"{size / 2**20:g} MiB"


def cost_problem(n: int, r: int, p: int) -> str | None:
    """Why scrypt parameters ``n``, ``r``, ``p`` are refused, or None if they are usable.

    Checked before any hashing: scrypt needs ``128 * n * r`` bytes of memory at once
    (at most 256 MiB here) and time in proportion to ``128 * n * r * p`` (at most 8 times
    the default's); OpenSSL also requires ``n < 2 ** (16 * r)``.
    """
    if n < 2 or n & (n - 1):
        return f"scrypt n must be a power of two of at least 2, got {n}"
    if r < 1 or p < 1:
        return f"scrypt r and p must be at least 1, got r={r}, p={p}"
    if p > MAX_P:
        return f"scrypt p must be at most {MAX_P}, got {p}"
    memory = 128 * n * r
    if memory > MAX_MEMORY:
        return (
            f"scrypt n={n}, r={r} needs {_mib(memory)} of memory per login "
            f"(128 * n * r); the limit is {_mib(MAX_MEMORY)}"
        )
    if memory * p > MAX_WORK:
        return (
            f"scrypt n={n}, r={r}, p={p} costs 128 * n * r * p = {_mib(memory * p)} of work "
            f"per login; the limit is {_mib(MAX_WORK)}"
        )
    if n.bit_length() - 1 >= 16 * r:
        return f"scrypt n must be below 2**(16 * r) = {2 ** (16 * r)} for r={r}, got {n}"
    return None


def _kdf(salt: bytes, length: int, n: int, r: int, p: int) -> Callable[[bytes], bytes]:
    """The key derivation for these parameters, a password's bytes to its key.

    The one place a key is derived: tests spy on it to see which parameters were used.
    The standard library's scrypt (OpenSSL's, not cryptography's, so that a node loads
    cryptography only for TLS) needs the memory it may use allowed: 128 * r bytes for
    each of n + 2 blocks and p lanes, exactly; ``cost_problem`` bounded it."""
    return functools.partial(
        hashlib.scrypt, salt=salt, n=n, r=r, p=p, dklen=length, maxmem=128 * r * (n + p + 2)
    )


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
        problem = cost_problem(n, r, p)
        if problem is not None:
            raise InvalidHash(problem)
        salt = _b64decode(parts[2], "salt")
        digest = _b64decode(parts[3], "hash")
        if len(salt) < MIN_SALT_BYTES or len(digest) < MIN_HASH_BYTES:
            raise InvalidHash(
                f"the salt must have at least {MIN_SALT_BYTES} bytes "
                f"and the hash at least {MIN_HASH_BYTES}"
            )
        return cls(n, r, p, salt, digest)

    def encode(self) -> str:
        """The hash as the string a users file stores (parsed back by :meth:`parse`)."""
        return (
            f"{SCHEME}$n={self.n},r={self.r},p={self.p}"
            f"${_b64encode(self.salt)}${_b64encode(self.digest)}"
        )

    def verify(self, password: str) -> bool:
        """Whether ``password`` derives this hash (compared in constant time)."""
        derived = _kdf(self.salt, len(self.digest), self.n, self.r, self.p)(
            password.encode("utf-8")
        )
        return hmac.compare_digest(derived, self.digest)


def hash_password(
    password: str, *, n: int = DEFAULT_N, r: int = DEFAULT_R, p: int = DEFAULT_P
) -> str:
    """A new salted hash of ``password``, as a string for a users file.

    ValueError, before any hashing, for an empty password or parameters
    :func:`cost_problem` refuses (a users file could not load them either).
    """
    if not password:
        raise ValueError("a password must not be empty")
    problem = cost_problem(n, r, p)
    if problem is not None:
        raise ValueError(problem)
    salt = os.urandom(SALT_BYTES)
    digest = _kdf(salt, HASH_BYTES, n, r, p)(password.encode("utf-8"))
    return PasswordHash(n, r, p, salt, digest).encode()


def verify_password(password: str, encoded: str | PasswordHash) -> bool:
    """Whether ``password`` matches ``encoded`` (False for an unusable hash)."""
    try:
        parsed = encoded if isinstance(encoded, PasswordHash) else PasswordHash.parse(encoded)
    except InvalidHash:
        return False
    return parsed.verify(password)
