"""The users file: loading, refusing plain text, logging in, editing while running."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from security import (
    AuthenticationFailed,
    AuthMethod,
    ConfigError,
    SecurityAuth,
    SecurityStore,
    UsersFileAuthenticator,
    load_users_file,
    passwords,
)
from security.config import SecuritySettings
from security.passwords import DEFAULT_N, DEFAULT_P, DEFAULT_R, hash_password
from security.users_file import UserRecord, save_users_file
from tests.security.helpers import FakeClock, fast_hash, write_users


def login(user: str | None, password: str | None, remote: str = "10.0.0.1:4000") -> SecurityAuth:
    return SecurityAuth(user, password, (), remote, "core")


def test_load_round_trip(tmp_path: Path) -> None:
    path = write_users(tmp_path / "users.toml", {"alice": ("pw", ["a", "b"]), "bob": ("x", [])})
    users = load_users_file(path)
    assert sorted(users) == ["alice", "bob"]
    assert users["alice"].roles == ("a", "b")
    save_users_file(tmp_path / "copy.toml", users)
    assert load_users_file(tmp_path / "copy.toml") == users
    assert (tmp_path / "copy.toml").stat().st_mode & 0o777 == 0o600


def test_hash_login_round_trip(users_file: Path) -> None:
    authenticator = UsersFileAuthenticator(users_file)
    identity = authenticator.authenticate(login("alice", "alice-secret"))
    assert identity is not None
    assert identity.user == "alice"
    assert identity.roles == {"producers"}
    assert identity.method is AuthMethod.PASSWORD


def test_wrong_password_and_unknown_user_look_the_same(
    settings: SecuritySettings, clock: FakeClock
) -> None:
    store = SecurityStore(settings, clock)
    with pytest.raises(AuthenticationFailed) as wrong_password:
        store.authenticate(login("alice", "bob-secret"))
    with pytest.raises(AuthenticationFailed) as unknown_user:
        store.authenticate(login("mallory", "alice-secret"))
    with pytest.raises(AuthenticationFailed) as no_password:
        store.authenticate(login("alice", None))
    assert str(wrong_password.value) == str(unknown_user.value) == str(no_password.value)
    assert str(wrong_password.value) == "authentication failed"


@pytest.fixture
def kdf_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """The (n, r, p) of every key derived; costly ones are recorded, not computed."""
    calls: list[tuple[int, int, int]] = []
    original = passwords._kdf

    def spy(salt: bytes, length: int, n: int, r: int, p: int) -> Callable[[bytes], bytes]:
        calls.append((n, r, p))
        return original(salt, length, n, r, p) if n * r * p <= 1024 else lambda _: bytes(32)

    monkeypatch.setattr(passwords, "_kdf", spy)
    return calls


def test_unknown_user_costs_a_hash_too(
    users_file: Path, kdf_calls: list[tuple[int, int, int]]
) -> None:
    authenticator = UsersFileAuthenticator(users_file)
    assert authenticator.authenticate(login("mallory", "x")) is None
    assert kdf_calls == [(16, 1, 1)]  # every user has n=16, r=1, p=1: so has the decoy


def write_hashes(path: Path, hashes: dict[str, str]) -> Path:
    lines = [f'[users.{name}]\npassword = "{encoded}"\n' for name, encoded in hashes.items()]
    return write(path, "\n".join(lines))


def test_unknown_user_costs_the_most_expensive_hash(
    tmp_path: Path, kdf_calls: list[tuple[int, int, int]], caplog: pytest.LogCaptureFixture
) -> None:
    # The first user is the cheapest: the decoy must not copy it.
    path = write_hashes(
        tmp_path / "users.toml",
        {
            "cheap": hash_password("a", n=16, r=1, p=1),
            "dear": hash_password("b", n=64, r=2, p=1),
            "middle": hash_password("c", n=32, r=1, p=2),
        },
    )
    kdf_calls.clear()
    caplog.set_level(logging.WARNING, logger="txbridge.security")
    authenticator = UsersFileAuthenticator(path)
    assert authenticator.authenticate(login("mallory", "x")) is None
    assert kdf_calls == [(64, 2, 1)]
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING
    message = warning.getMessage()
    assert "users have different scrypt parameters" in message
    assert "n=16,r=1,p=1 for cheap; n=32,r=1,p=2 for middle; n=64,r=2,p=1 for dear" in message
    assert "txbridge user passwd" in message


def test_no_warning_when_every_user_has_the_same_parameters(
    users_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="txbridge.security")
    UsersFileAuthenticator(users_file)
    assert caplog.records == []


def test_unknown_user_of_an_empty_file_costs_the_default_hash(
    tmp_path: Path, kdf_calls: list[tuple[int, int, int]]
) -> None:
    authenticator = UsersFileAuthenticator(write(tmp_path / "users.toml", ""))
    assert authenticator.authenticate(login("mallory", "x")) is None
    assert kdf_calls == [(DEFAULT_N, DEFAULT_R, DEFAULT_P)]


def test_costly_hash_in_the_file_refused_at_load(tmp_path: Path) -> None:
    # Only its parameters are read: refused without hashing anything.
    costly = "scrypt$n=1048576,r=8,p=1$AAAAAAAAAAAAAAAAAAAAAA==$" + "A" * 44
    path = write_hashes(tmp_path / "users.toml", {"alice": costly})
    with pytest.raises(ConfigError) as error:
        load_users_file(path)
    assert error.value.key == "users.alice.password"
    assert "needs 1024 MiB of memory per login" in error.value.expected
    assert "the limit is 256 MiB" in error.value.expected


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_plain_text_password_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "users.toml", '[users.alice]\npassword = "hunter2"\nroles = []\n')
    with pytest.raises(ConfigError) as error:
        load_users_file(path)
    message = str(error.value)
    assert message.startswith(f"{path}: users.alice.password: a plain-text password is refused")
    assert "txbridge user passwd alice" in message
    assert "hunter2" not in message


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("[users.alice]\nroles = []\n", "users.alice.password", "missing"),
        ("[users.alice]\npassword = 5\n", "users.alice.password", "expected a string"),
        ('[users.alice]\npassword = "scrypt$nope"\n', "users.alice.password", "not a usable"),
        (
            '[users.alice]\npassword = "HASH"\nroles = "admins"\n',
            "users.alice.roles",
            "expected a list of role names",
        ),
        (
            '[users.alice]\npassword = "HASH"\nroles = ["a", 1]\n',
            "users.alice.roles[1]",
            "expected a non-empty string",
        ),
        (
            '[users.alice]\npassword = "HASH"\nrole = ["a"]\n',
            "users.alice.role",
            "unknown key (did you mean 'roles'?)",
        ),
        ('[user.alice]\npassword = "HASH"\n', "user", "unknown key (did you mean 'users'?)"),
        ("users = 3\n", "users", "expected a table"),
        ('[users." alice"]\npassword = "HASH"\n', 'users." alice"', "spaces"),
    ],
)
def test_bad_users_file(tmp_path: Path, text: str, key: str, expected: str) -> None:
    path = write(tmp_path / "users.toml", text.replace("HASH", fast_hash("pw")))
    with pytest.raises(ConfigError) as error:
        load_users_file(path)
    assert error.value.source == str(path)
    assert error.value.key == key
    assert expected in error.value.expected


def test_not_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"users\.toml: the users file is not valid TOML"):
        load_users_file(write(tmp_path / "users.toml", "[users\n"))
    with pytest.raises(ConfigError, match=r"nothing\.toml: the users file does not exist"):
        load_users_file(tmp_path / "nothing.toml")


def test_file_edited_while_running_then_reloaded(
    settings: SecuritySettings, clock: FakeClock, users_file: Path
) -> None:
    store = SecurityStore(settings, clock)
    store.authenticate(login("alice", "alice-secret"))
    users = load_users_file(users_file)
    users["alice"] = UserRecord("alice", users["alice"].password.parse(fast_hash("new")), ("x",))
    users["dave"] = UserRecord("dave", users["bob"].password.parse(fast_hash("dave-pw")), ())
    del users["bob"]
    save_users_file(users_file, users)
    store.reload()
    alice = store.authenticate(login("alice", "new"))
    assert alice.roles == {"x"}
    store.authenticate(login("dave", "dave-pw"))
    for user, password in [("alice", "alice-secret"), ("bob", "bob-secret")]:
        with pytest.raises(AuthenticationFailed):
            store.authenticate(login(user, password, remote="10.9.9.9:1"))


def test_bad_edit_keeps_the_old_users(
    settings: SecuritySettings,
    clock: FakeClock,
    users_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="txbridge.security")
    store = SecurityStore(settings, clock)
    write(users_file, '[users.alice]\npassword = "plain-text-secret"\n')
    with pytest.raises(ConfigError, match="plain-text password is refused"):
        store.reload()
    # Still serving with the previous users: the failed reload changed nothing, and the
    # login that notices the changed file logs why it cannot use it, once.
    store.authenticate(login("alice", "alice-secret"))
    store.authenticate(login("bob", "bob-secret"))
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "users file changed but cannot be used" in errors[0].getMessage()
    assert "plain-text-secret" not in caplog.text
