"""scrypt hashes: format, round trip, sound defaults, and errors that never quote them."""

from __future__ import annotations

import pytest

from security.passwords import (
    DEFAULT_N,
    DEFAULT_P,
    DEFAULT_R,
    InvalidHash,
    PasswordHash,
    hash_password,
    verify_password,
)
from tests.security.helpers import fast_hash


def test_round_trip() -> None:
    encoded = fast_hash("correct horse")
    assert encoded.startswith("scrypt$n=16,r=1,p=1$")
    assert verify_password("correct horse", encoded)
    assert not verify_password("correct horsE", encoded)
    assert not verify_password("", encoded)


def test_salted() -> None:
    assert fast_hash("same") != fast_hash("same")


def test_parse_encode_round_trip() -> None:
    encoded = fast_hash("pw")
    parsed = PasswordHash.parse(encoded)
    assert (parsed.n, parsed.r, parsed.p) == (16, 1, 1)
    assert len(parsed.salt) == 16 and len(parsed.digest) == 32
    assert parsed.encode() == encoded
    assert "pw" not in repr(parsed)


def test_default_cost_is_sound() -> None:
    # OWASP's minimum for scrypt; tests elsewhere use cheaper parameters for speed.
    assert DEFAULT_N >= 2**17 and DEFAULT_R >= 8 and DEFAULT_P >= 1
    encoded = hash_password("slow but sound")
    assert encoded.startswith(f"scrypt$n={DEFAULT_N},r={DEFAULT_R},p={DEFAULT_P}$")
    assert verify_password("slow but sound", encoded)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("hunter2", "expected a password hash"),
        ("pbkdf2$x$y$z", "expected a password hash"),
        ("scrypt$n=16,r=1$AAAAAAAAAAA=$AAAA", "parameters"),
        ("scrypt$n=15,r=1,p=1$AAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAA", "power of two"),
        ("scrypt$n=4194304,r=1,p=1$AAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAA", "power of two"),
        ("scrypt$n=16,r=99,p=1$AAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAA", "r must be"),
        ("scrypt$n=16,r=1,p=1$not base64!$AAAAAAAAAAAAAAAAAAAAAAAA", "salt is not base64"),
        ("scrypt$n=16,r=1,p=1$AAAA$AAAAAAAAAAAAAAAAAAAAAAAA", "at least"),
    ],
)
def test_unusable_hashes_refused_without_quoting_them(text: str, problem: str) -> None:
    with pytest.raises(InvalidHash, match=problem) as error:
        PasswordHash.parse(text)
    assert text not in str(error.value)
    assert not verify_password("hunter2", text)


def test_empty_password_cannot_be_hashed() -> None:
    with pytest.raises(ValueError, match="empty"):
        hash_password("")
