"""scrypt hashes: format, round trip, sound defaults, and errors that never quote them."""

from __future__ import annotations

import pytest

from security import passwords
from security.passwords import (
    DEFAULT_N,
    DEFAULT_P,
    DEFAULT_R,
    MAX_MEMORY,
    InvalidHash,
    PasswordHash,
    cost_problem,
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
        ("scrypt$n=4194304,r=1,p=1$AAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAA", "512 MiB"),
        ("scrypt$n=262144,r=16,p=1$AAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAA", "limit is 256"),
        ("scrypt$n=16,r=1000000,p=1$AAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAA", "memory"),
        ("scrypt$n=16,r=0,p=1$AAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAA", "at least 1"),
        ("scrypt$n=16,r=1,p=17$AAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAA", "p must be at most"),
        ("scrypt$n=131072,r=8,p=9$AAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAA", "of work"),
        ("scrypt$n=65536,r=1,p=1$AAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAA", "must be below"),
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


@pytest.fixture
def kdf_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """Every (n, r, p) a key is derived with, recorded before deriving; parameters beyond
    the limits are never passed on to scrypt (were they, this test machine would suffer)."""
    calls: list[tuple[int, int, int]] = []
    original = passwords._kdf

    def spy(salt: bytes, length: int, n: int, r: int, p: int) -> object:
        calls.append((n, r, p))
        if 128 * n * r > MAX_MEMORY or p > 16:
            raise AssertionError(f"hashing with n={n}, r={r}, p={p} was attempted")
        return original(salt, length, n, r, p)

    monkeypatch.setattr(passwords, "_kdf", spy)
    return calls


@pytest.mark.parametrize(
    ("n", "r", "p", "problem"),
    [
        (DEFAULT_N, 1000, 1, "16000 MiB of memory"),
        (2**21, 8, 1, "2048 MiB of memory"),
        (16, 1, 100, "p must be at most 16"),
        (2**17, 8, 9, "of work"),
        (1000, 8, 1, "power of two"),
    ],
)
def test_costly_parameters_refused_before_hashing(
    kdf_calls: list[tuple[int, int, int]], n: int, r: int, p: int, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        hash_password("pw", n=n, r=r, p=p)
    assert kdf_calls == []  # refused before any memory was asked for


def test_limits() -> None:
    assert MAX_MEMORY == 256 * 2**20
    assert cost_problem(DEFAULT_N, DEFAULT_R, DEFAULT_P) is None
    assert cost_problem(2**17, 16, 1) is None  # exactly 256 MiB
    assert cost_problem(2**13, 8, 10) is None  # one of OWASP's alternatives
    assert cost_problem(2**18, 8, 1) is None
    assert "256 MiB" in (cost_problem(2**19, 8, 1) or "")
