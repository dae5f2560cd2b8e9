"""Durations as written in configuration files: ``"500ms"``, ``"10s"``, ``"5m"``, ``"1h"``."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)")

DURATION_HELP = 'a duration such as "500ms", "10s", "5m" or "1h"'


def parse_duration(text: str) -> float:
    """Seconds in ``text``; ValueError if it is not a number followed by ms, s, m or h."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"expected {DURATION_HELP}, got {text!r}")
    return float(found.group(1)) * _UNITS[found.group(2)]
