"""Checks the node's file and the bridge files share: names, sizes, URLs, required keys, and
reading a TOML file, each failing with a ConfigError naming the file and the key."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.config.units import SIZE_HELP, UNLIMITED, parse_size
from security.errors import ConfigError
from security.validate import describe, expect_str, key_path
from transport.errors import URLError
from transport.urls import URL, parse_url

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def expect_name(value: object, source: str, key: str) -> str:
    """A name of letters, digits, ``.``, ``_`` or ``-``, starting with a letter or digit."""
    text = expect_str(value, source, key)
    if not NAME.fullmatch(text):
        raise ConfigError(
            source, key, f"expected a name of letters, digits, '.', '_' or '-', got {text!r}"
        )
    return text


def required(table: Mapping[str, Any], name: str, source: str, prefix: str) -> object:
    """``table[name]``, or ConfigError saying the key is required."""
    if name not in table:
        raise ConfigError(source, key_path(prefix, name), "is required")
    return table[name]


def expect_size(value: object, source: str, key: str, *, unlimited: bool = False) -> int:
    """Bytes from a size (``"64KiB"`` or an integer); -1 too if ``unlimited``."""
    if unlimited and value == UNLIMITED:
        return UNLIMITED
    if not isinstance(value, int | str) or isinstance(value, bool):
        raise ConfigError(source, key, f"expected {SIZE_HELP}, got {describe(value)}")
    try:
        return parse_size(value)
    except ValueError as error:
        extra = " (or -1 for no limit)" if unlimited else ""
        raise ConfigError(source, key, f"{error}{extra}") from None


def expect_producer_window(value: object, source: str, key: str, *, unlimited: str) -> int:
    """Producer credit: 1 byte to below 2GiB (it travels as a signed 32-bit integer), or -1,
    which means what ``unlimited`` says."""
    size = expect_size(value, source, key, unlimited=True)
    if size == 0 or size >= 2**31:
        raise ConfigError(source, key, f"expected -1 ({unlimited}) or 1 byte to below 2GiB")
    return size


def expect_url(value: object, source: str, key: str, base_dir: Path | None = None) -> URL:
    """A ``tcp://`` or ``tls://`` connection URL; with ``base_dir`` (the configuration
    file's folder) its relative certificate and key paths are taken from there."""
    try:
        url = parse_url(expect_str(value, source, key))
    except URLError as error:
        raise ConfigError(source, key, str(error)) from None
    return url if base_dir is None else url.relative_to(base_dir)


def read_document(path: Path) -> dict[str, Any]:
    """The parsed TOML of ``path``, or ConfigError naming the file and the problem."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(str(path), "", f"cannot be read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), "", "is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(str(path), "", f"is not valid TOML: {error}") from None
