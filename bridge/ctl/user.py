"""``txbridge user add|passwd|remove|list --file users.toml``: manage the users file.

Passwords are never taken from the command line: they are asked with ``getpass`` when
stdin is a terminal, otherwise read as one line from stdin with ``--password-stdin``.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import attrs

from security.errors import ConfigError
from security.passwords import (
    DEFAULT_N,
    DEFAULT_P,
    DEFAULT_R,
    PasswordHash,
    cost_problem,
    hash_password,
)
from security.tomlfile import read_toml
from security.users_file import (
    UserRecord,
    check_user_name,
    load_users_file,
    parse_users,
    save_users_file,
)

Handler = Callable[[argparse.Namespace], int]

# Stands in for a password about to be replaced; never written.
_PLACEHOLDER = PasswordHash(2, 1, 1, bytes(16), bytes(32))


class UserCommandError(Exception):
    """A problem to report in one line and exit with status 1."""


def _stdin() -> TextIO:
    return sys.stdin


def _read_password(args: argparse.Namespace) -> str:
    stdin = _stdin()
    if args.password_stdin:
        line = stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        password = password.removesuffix("\r")
    elif stdin.isatty():
        password = getpass.getpass(f"Password for {args.name}: ")
        if getpass.getpass("Again: ") != password:
            raise UserCommandError("the two passwords differ")
    else:
        raise UserCommandError(
            "stdin is not a terminal: pipe the password in and pass --password-stdin"
        )
    if not password:
        raise UserCommandError("the password must not be empty")
    return password


def _check_cost(args: argparse.Namespace) -> None:
    """Refuse scrypt parameters before anything is asked, read or hashed."""
    problem = cost_problem(args.scrypt_n, args.scrypt_r, DEFAULT_P)
    if problem is not None:
        raise UserCommandError(problem)


def _new_hash(args: argparse.Namespace) -> PasswordHash:
    password = _read_password(args)
    encoded = hash_password(password, n=args.scrypt_n, r=args.scrypt_r, p=DEFAULT_P)
    return PasswordHash.parse(encoded)


def _load(path: Path, *, missing_ok: bool = False) -> dict[str, UserRecord]:
    if missing_ok and not path.exists():
        return {}
    return load_users_file(path)


def _require(users: dict[str, UserRecord], name: str, path: Path) -> UserRecord:
    record = users.get(name)
    if record is None:
        raise UserCommandError(f"no user {name!r} in {path}")
    return record


def _roles(values: list[str] | None) -> tuple[str, ...]:
    roles = tuple(dict.fromkeys(values or ()))
    for role in roles:
        if not role.strip():
            raise UserCommandError("a role name must not be empty")
    return roles


def _check_name(name: str) -> None:
    problem = check_user_name(name)
    if problem is not None:
        raise UserCommandError(problem)


def _add(args: argparse.Namespace) -> str:
    _check_name(args.name)
    _check_cost(args)
    users = _load(args.file, missing_ok=True)
    if args.name in users:
        raise UserCommandError(
            f"user {args.name!r} already exists in {args.file} (use `txbridge user passwd`)"
        )
    roles = _roles(args.role)
    users[args.name] = UserRecord(args.name, _new_hash(args), roles)
    save_users_file(args.file, users)
    return f"added user {args.name!r} with roles {', '.join(roles) or '(none)'} to {args.file}"


def _load_replacing(path: Path, name: str) -> dict[str, UserRecord]:
    """The users, tolerating an unusable (say plain-text) password of ``name`` only, since
    it is about to be replaced: the refusal at load points here to fix it."""
    data = read_toml(path, "users file")
    users = data.get("users")
    entry = users.get(name) if isinstance(users, dict) else None
    if isinstance(entry, dict) and "password" in entry:
        entry["password"] = _PLACEHOLDER.encode()
    return parse_users(data, str(path))


def _passwd(args: argparse.Namespace) -> str:
    _check_cost(args)
    users = _load_replacing(args.file, args.name)
    record = _require(users, args.name, args.file)
    changes: dict[str, Any] = {"password": _new_hash(args)}
    if args.role is not None:
        changes["roles"] = _roles(args.role)
    users[args.name] = attrs.evolve(record, **changes)
    save_users_file(args.file, users)
    return f"changed the password of {args.name!r} in {args.file}"


def _remove(args: argparse.Namespace) -> str:
    users = _load(args.file)
    _require(users, args.name, args.file)
    del users[args.name]
    save_users_file(args.file, users)
    return f"removed user {args.name!r} from {args.file}"


def _list(args: argparse.Namespace) -> str:
    users = _load(args.file)
    if not users:
        return f"no users in {args.file}"
    width = max(len(name) for name in users)
    return "\n".join(
        f"{name:<{width}}  {', '.join(record.roles) or '-'}"
        for name, record in sorted(users.items())
    )


def _run(action: Callable[[argparse.Namespace], str]) -> Handler:
    def handler(args: argparse.Namespace) -> int:
        try:
            message = action(args)
        except (UserCommandError, ConfigError, OSError, ValueError) as error:
            print(f"txbridge user {args.user_command}: {error}", file=sys.stderr)
            return 1
        print(message)
        return 0

    return handler


def _dispatch(args: argparse.Namespace) -> int:
    handler: Handler = args.user_handler
    return handler(args)


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _power_of_two(text: str) -> int:
    value = _integer(text)
    if value < 2 or value & (value - 1):
        raise argparse.ArgumentTypeError(f"expected a power of two of at least 2, got {value}")
    return value


def _positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer of at least 1, got {value}")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--file", type=Path, required=True, help="the users file (TOML)")


def _password_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password as one line from stdin (otherwise it is asked on the terminal)",
    )
    parser.add_argument(
        "--scrypt-n",
        type=_power_of_two,
        default=DEFAULT_N,
        help=f"scrypt CPU/memory cost, a power of two (default {DEFAULT_N})",
    )
    parser.add_argument(
        "--scrypt-r",
        type=_positive,
        default=DEFAULT_R,
        help=f"scrypt block size (default {DEFAULT_R}); memory per login is 128 * n * r bytes, "
        "at most 256 MiB",
    )


def _command(commands: Any, name: str, text: str, example: str) -> argparse.ArgumentParser:
    """One command's parser: ``text`` in the list of commands and, capitalised, as its
    description, with ``example`` below its help."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=text,
        description=text[0].upper() + text[1:] + ".",
        epilog=f"example:\n  {example}",
    )
    return parser


def register(subparsers: Any) -> None:
    """Add ``txbridge user`` to the dispatcher's sub-commands."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "user",
        help="manage a users file (names, password hashes, roles)",
        description="Manage a users file: names, scrypt password hashes and roles.",
        epilog="example:\n  txbridge user add alice --file users.toml --role producers",
    )
    commands = parser.add_subparsers(dest="user_command", required=True, metavar="ACTION")

    add = _command(
        commands,
        "add",
        "add a user",
        "txbridge user add alice --file users.toml --role producers --role consumers",
    )
    add.add_argument("name")
    _common(add)
    add.add_argument(
        "--role", action="append", metavar="ROLE", help="a role of the user (repeatable)"
    )
    _password_options(add)
    add.set_defaults(user_handler=_run(_add))

    passwd = _command(
        commands,
        "passwd",
        "set a user's password (and roles with --role)",
        "txbridge user passwd alice --file users.toml",
    )
    passwd.add_argument("name")
    _common(passwd)
    passwd.add_argument(
        "--role", action="append", metavar="ROLE", help="replace the user's roles (repeatable)"
    )
    _password_options(passwd)
    passwd.set_defaults(user_handler=_run(_passwd))

    remove = _command(
        commands, "remove", "remove a user", "txbridge user remove alice --file users.toml"
    )
    remove.add_argument("name")
    _common(remove)
    remove.set_defaults(user_handler=_run(_remove))

    listing = _command(
        commands,
        "list",
        "list users and their roles (never hashes)",
        "txbridge user list --file users.toml",
    )
    _common(listing)
    listing.set_defaults(user_handler=_run(_list))

    parser.set_defaults(handler=_dispatch)
