"""Sizes in configuration files."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.config.units import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("64KiB", 65536),
        ("10MiB", 10 * 1024**2),
        ("1GiB", 1024**3),
        ("1GB", 10**9),
        ("500KB", 500_000),
        ("1.5KiB", 1536),
        ("100B", 100),
        ("4096", 4096),
        (65536, 65536),
        (" 2 MiB ", 2 * 1024**2),
    ],
)
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("64 kilobytes", "expected a size such as"),
        ("-5", "expected a size such as"),
        (-5, "got -5"),
        ("1.3B", "not a whole number of bytes"),
        (True, "got a boolean"),
        ("", "expected a size such as"),
    ],
)
def test_bad_sizes(value, message):
    with pytest.raises(ValueError, match=message):
        parse_size(value)


@given(st.integers(min_value=0, max_value=2**50))
def test_format_then_parse_round_trips(size):
    assert parse_size(format_size(size)) == size


@given(st.text(max_size=20))
def test_any_text_parses_or_raises_value_error(text):
    with contextlib.suppress(ValueError):
        assert parse_size(text) >= 0
