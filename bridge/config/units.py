"""Sizes as written in configuration files: ``"64KiB"``, ``"10MiB"``, ``"1GB"``, ``65536``.

Binary suffixes (KiB, MiB, GiB) count in 1024s and SI suffixes (KB, MB, GB) in 1000s, as
their names say. A plain integer is bytes. Artemis's ``-1`` ("no limit") is accepted only
where a key allows it.
"""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "B": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?")

UNLIMITED = -1
"""Artemis's "no limit", where a key allows it."""

SIZE_HELP = 'a size such as "64KiB", "10MiB", "1GB" or a number of bytes'


def parse_size(value: int | str) -> int:
    """Bytes in ``value``; ValueError if it is neither a whole number nor a number with a
    size suffix, or if it is not a whole number of bytes."""
    if isinstance(value, bool):
        raise ValueError(f"expected {SIZE_HELP}, got a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected {SIZE_HELP}, got {value}")
        return value
    found = _SIZE.fullmatch(value.strip())
    if found is None:
        raise ValueError(f"expected {SIZE_HELP}, got {value!r}")
    number, unit = found.group(1), found.group(2) or ""
    total = float(number) * _UNITS[unit] if "." in number else int(number) * _UNITS[unit]
    if total != int(total):
        raise ValueError(f"{value!r} is not a whole number of bytes")
    return int(total)


def format_size(size: int) -> str:
    """The shortest exact binary form of ``size`` (``65536`` -> ``"64KiB"``)."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if size and size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]}{unit}"
    return f"{size}B"
