"""Small tools the security tests share: a driven clock, cheap hashes, file writers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import tomli_w

from security.passwords import hash_password

# Tests hash with a tiny scrypt cost to stay fast; the default (n=2**17) is tested apart.
FAST = {"n": 16, "r": 1, "p": 1}


class FakeClock:
    """Seconds that move only when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def fast_hash(password: str) -> str:
    return hash_password(password, **FAST)


def write_users(path: Path, users: Mapping[str, tuple[str, Iterable[str]]]) -> Path:
    """Write a users file: name -> (password, roles), hashing each password."""
    data = {
        "users": {
            name: {"password": fast_hash(password), "roles": list(roles)}
            for name, (password, roles) in users.items()
        }
    }
    # Write then rename, as `txbridge user` does, so the change is seen at once.
    temporary = path.with_suffix(".tmp")
    temporary.write_text(tomli_w.dumps(data))
    temporary.replace(path)
    return path
