"""Checking values parsed from TOML, with errors naming the file, the key and what was
expected."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from security.durations import DURATION_HELP, parse_duration
from security.errors import ConfigError

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def key_path(prefix: str, key: str | int) -> str:
    """``prefix.key`` (``prefix[key]`` for an index), quoting keys TOML would quote."""
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    part = key if _BARE_KEY.fullmatch(key) else json.dumps(key)
    return f"{prefix}.{part}" if prefix else part


def describe(value: object) -> str:
    """A value's kind, in TOML's words (never the value itself: it may be a secret)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "a table"
    return type(value).__name__


def check_keys(
    table: Mapping[str, Any], allowed: Collection[str], source: str, prefix: str
) -> None:
    """Refuse the first key of ``table`` that is not in ``allowed``."""
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(key, list(allowed), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                source,
                key_path(prefix, key),
                f"unknown key{hint}; expected one of: {', '.join(sorted(allowed))}",
            )


def expect_table(value: object, source: str, key: str) -> Mapping[str, Any]:
    """``value`` if it is a table, else ConfigError naming what it is."""
    if not isinstance(value, Mapping):
        raise ConfigError(source, key, f"expected a table, got {describe(value)}")
    return value


def expect_tables(value: object, source: str, key: str) -> list[Mapping[str, Any]]:
    """An array of tables (``[[key]]`` blocks)."""
    if not isinstance(value, list):
        raise ConfigError(
            source, key, f"expected an array of tables ([[{key}]] blocks), got {describe(value)}"
        )
    for index, item in enumerate(value):
        expect_table(item, source, key_path(key, index))
    return value


def expect_str(value: object, source: str, key: str, *, empty: bool = False) -> str:
    """``value`` if it is a string (not blank, unless ``empty``), else ConfigError."""
    if not isinstance(value, str):
        raise ConfigError(source, key, f"expected a string, got {describe(value)}")
    if not empty and not value.strip():
        raise ConfigError(source, key, "expected a non-empty string")
    return value


def expect_bool(value: object, source: str, key: str) -> bool:
    """``value`` if it is true or false, else ConfigError."""
    if not isinstance(value, bool):
        raise ConfigError(source, key, f"expected true or false, got {describe(value)}")
    return value


def expect_int(value: object, source: str, key: str, *, minimum: int = 0) -> int:
    """``value`` if it is an integer (not a boolean) of at least ``minimum``, else
    ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(source, key, f"expected an integer, got {describe(value)}")
    if value < minimum:
        raise ConfigError(source, key, f"expected an integer of at least {minimum}, got {value}")
    return value


def expect_number(value: object, source: str, key: str, *, minimum: float = 0.0) -> float:
    """``value`` as a float if it is a number of at least ``minimum``, else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(source, key, f"expected a number, got {describe(value)}")
    if value < minimum:
        raise ConfigError(source, key, f"expected a number of at least {minimum}, got {value}")
    return float(value)


def expect_duration(value: object, source: str, key: str) -> float:
    """Seconds from a duration string such as ``"500ms"`` or ``"10s"``."""
    if not isinstance(value, str):
        raise ConfigError(source, key, f"expected {DURATION_HELP}, got {describe(value)}")
    try:
        return parse_duration(value)
    except ValueError:
        raise ConfigError(source, key, f"expected {DURATION_HELP}, got {value!r}") from None


def expect_names(value: object, source: str, key: str, what: str = "role names") -> tuple[str, ...]:
    """A list of non-empty strings, such as role names, in file order without repeats."""
    if not isinstance(value, list):
        example = '["producers", "admins"]' if what == "role names" else '["a", "b"]'
        raise ConfigError(
            source,
            key,
            f"expected a list of {what} (strings) like {example}, got {describe(value)}",
        )
    names: dict[str, None] = {}
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(
                source,
                key_path(key, index),
                f"expected a non-empty string (one of the {what}), got {describe(item)}",
            )
        names[item] = None
    return tuple(names)
