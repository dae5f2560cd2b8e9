"""Fixtures of the security tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from security.config import SecuritySettings, load_security
from tests.security.helpers import FakeClock, write_users


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    return write_users(
        tmp_path / "users.toml",
        {
            "alice": ("alice-secret", ["producers"]),
            "bob": ("bob-secret", ["consumers"]),
            "root": ("root-secret", ["admins"]),
        },
    )


@pytest.fixture
def settings(tmp_path: Path, users_file: Path) -> SecuritySettings:
    return load_security(
        {
            "users-file": users_file.name,
            "security-invalidation-interval": "10s",
            "setting": [
                {"match": "orders.#", "send": ["producers"], "consume": ["consumers"]},
                {"match": "#", "manage": ["admins"]},
            ],
        },
        str(tmp_path / "node.toml"),
    )
