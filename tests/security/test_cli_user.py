"""`txbridge user add|passwd|remove|list --file users.toml`, driven through the dispatcher."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bridge.ctl.main import main
from security import AuthenticationFailed, SecurityAuth, SecurityStore, load_security, passwords
from security.passwords import DEFAULT_N
from security.users_file import load_users_file
from tests.security.helpers import FakeClock

FAST = ["--scrypt-n", "16", "--scrypt-r", "1"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], stdin: str = "", tty: bool = False
) -> int:
    monkeypatch.setattr("sys.stdin", Terminal(stdin) if tty else io.StringIO(stdin))
    return main(["user", *argv])


def can_log_in(path: Path, user: str, password: str) -> bool:
    settings = load_security({"users-file": str(path)}, str(path.parent / "node.toml"))
    try:
        SecurityStore(settings, FakeClock()).authenticate(
            SecurityAuth(user, password, (), "127.0.0.1:1", "core")
        )
    except AuthenticationFailed:
        return False
    return True


def test_add_passwd_remove_list_round_trip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "users.toml"
    file = ["--file", str(path)]
    assert (
        run(
            monkeypatch,
            [
                "add",
                "alice",
                *file,
                "--role",
                "producers",
                "--role",
                "consumers",
                "--password-stdin",
                *FAST,
            ],
            "first secret\n",
        )
        == 0
    )
    assert run(monkeypatch, ["add", "bob", *file, "--password-stdin", *FAST], "bob pw\n") == 0
    assert load_users_file(path)["alice"].roles == ("producers", "consumers")
    assert can_log_in(path, "alice", "first secret")
    assert "first secret" not in path.read_text()

    capsys.readouterr()
    assert run(monkeypatch, ["list", *file]) == 0
    listing = capsys.readouterr().out
    assert listing.splitlines() == ["alice  producers, consumers", "bob    -"]
    assert "scrypt" not in listing

    assert run(monkeypatch, ["passwd", "alice", *file, "--password-stdin", *FAST], "second\n") == 0
    assert not can_log_in(path, "alice", "first secret")
    assert can_log_in(path, "alice", "second")
    assert load_users_file(path)["alice"].roles == ("producers", "consumers")  # kept
    assert (
        run(
            monkeypatch,
            ["passwd", "bob", *file, "--role", "ops", "--password-stdin", *FAST],
            "bob pw\n",
        )
        == 0
    )
    assert load_users_file(path)["bob"].roles == ("ops",)

    assert run(monkeypatch, ["remove", "bob", *file]) == 0
    assert sorted(load_users_file(path)) == ["alice"]
    assert path.stat().st_mode & 0o777 == 0o600


def test_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "users.toml"
    file = ["--file", str(path)]
    assert run(monkeypatch, ["list", *file]) == 1
    assert "the users file does not exist" in capsys.readouterr().err
    assert run(monkeypatch, ["add", "alice", *file, "--password-stdin", *FAST], "pw\n") == 0
    assert run(monkeypatch, ["add", "alice", *file, "--password-stdin", *FAST], "pw\n") == 1
    assert "already exists" in capsys.readouterr().err
    assert run(monkeypatch, ["passwd", "nobody", *file, "--password-stdin", *FAST], "pw\n") == 1
    assert "no user 'nobody'" in capsys.readouterr().err
    assert run(monkeypatch, ["remove", "nobody", *file]) == 1
    assert run(monkeypatch, ["add", "bob", *file, "--password-stdin", *FAST], "\n") == 1
    assert "must not be empty" in capsys.readouterr().err
    assert run(monkeypatch, ["add", " bob", *file, "--password-stdin", *FAST], "pw\n") == 1
    assert "spaces" in capsys.readouterr().err
    # Without --password-stdin and without a terminal there is nowhere to ask.
    assert run(monkeypatch, ["add", "bob", *file, *FAST], "pw\n") == 1
    assert "--password-stdin" in capsys.readouterr().err
    assert sorted(load_users_file(path)) == ["alice"]


def test_password_is_never_an_argument(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        run(monkeypatch, ["add", "alice", "--file", str(tmp_path / "u.toml"), "--password", "x"])


def test_terminal_asks_twice_with_getpass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "users.toml"
    answers = iter(["typed secret", "typed secret", "one", "two"])
    prompts: list[str] = []

    def fake_getpass(prompt: str = "") -> str:
        prompts.append(prompt)
        return next(answers)

    monkeypatch.setattr("getpass.getpass", fake_getpass)
    assert run(monkeypatch, ["add", "carol", "--file", str(path), *FAST], tty=True) == 0
    assert prompts == ["Password for carol: ", "Again: "]
    assert can_log_in(path, "carol", "typed secret")
    assert run(monkeypatch, ["passwd", "carol", "--file", str(path), *FAST], tty=True) == 1
    assert "the two passwords differ" in capsys.readouterr().err
    assert can_log_in(path, "carol", "typed secret")


def test_default_cost_and_bad_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "users.toml"
    assert run(monkeypatch, ["add", "dan", "--file", str(path), "--password-stdin"], "pw\n") == 0
    assert load_users_file(path)["dan"].password.n == DEFAULT_N
    with pytest.raises(SystemExit):
        run(monkeypatch, ["add", "eve", "--file", str(path), "--scrypt-n", "1000"])
    assert "power of two" in capsys.readouterr().err


def test_refuses_a_users_file_with_plain_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "users.toml"
    path.write_text('[users.alice]\npassword = "plain"\n')
    assert (
        run(monkeypatch, ["add", "bob", "--file", str(path), "--password-stdin", *FAST], "pw\n")
        == 1
    )
    assert "plain-text password is refused" in capsys.readouterr().err
    assert path.read_text() == '[users.alice]\npassword = "plain"\n'


def test_passwd_repairs_a_plain_text_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The load error tells the operator to run `txbridge user passwd NAME`: that works.
    path = tmp_path / "users.toml"
    path.write_text('[users.alice]\npassword = "plain"\nroles = ["ops"]\n')
    args = ["passwd", "alice", "--file", str(path), "--password-stdin", *FAST]
    assert run(monkeypatch, args, "now hashed\n") == 0
    assert load_users_file(path)["alice"].roles == ("ops",)
    assert can_log_in(path, "alice", "now hashed")
    assert '"plain"' not in path.read_text()


class Untouchable(io.StringIO):
    """A stdin that must not be read: the command should have stopped before asking."""

    def readline(self, size: int | None = -1) -> str:
        raise AssertionError("the password was read")

    def isatty(self) -> bool:
        raise AssertionError("the terminal was consulted")


@pytest.mark.parametrize("action", ["add", "passwd"])
def test_costly_scrypt_parameters_refused_at_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    action: str,
) -> None:
    path = tmp_path / "users.toml"
    assert (
        run(monkeypatch, ["add", "alice", "--file", str(path), "--password-stdin", *FAST], "pw\n")
        == 0
    )
    before = path.read_text()

    def no_hashing(*args: object) -> object:
        raise AssertionError("scrypt was called")

    monkeypatch.setattr(passwords, "_kdf", no_hashing)
    monkeypatch.setattr("sys.stdin", Untouchable())
    argv = ["user", action, "alice", "--file", str(path), "--password-stdin", "--scrypt-r", "1000"]
    assert main(argv) == 1
    error = capsys.readouterr().err
    assert f"txbridge user {action}: scrypt n=131072, r=1000 needs 16000 MiB of memory" in error
    assert "the limit is 256 MiB" in error
    assert path.read_text() == before


def test_scrypt_r_must_be_positive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        run(monkeypatch, ["add", "eve", "--file", str(tmp_path / "u.toml"), "--scrypt-r", "0"])
    assert "at least 1" in capsys.readouterr().err
