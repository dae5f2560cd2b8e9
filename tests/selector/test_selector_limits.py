"""Bounds: the longest and deepest selectors, and inputs that would be slow if done naively.

There are no timings here; the inputs are sized so that a quadratic (or worse) algorithm
would not finish in any reasonable test run, and a recursive one would overflow the stack.
"""

from __future__ import annotations

import pytest

from bridge.selector import MAX_DEPTH, MAX_LENGTH, SelectorError, compile_selector


def test_too_long():
    text = "a = 1 AND " * (MAX_LENGTH // 10) + "b = 2" * 10
    assert len(text) > MAX_LENGTH
    with pytest.raises(SelectorError) as caught:
        compile_selector(text)
    assert caught.value.column == MAX_LENGTH + 1
    assert str(caught.value) == (
        f"selector of {len(text)} characters at column {MAX_LENGTH + 1}:"
        f" a selector is at most {MAX_LENGTH} characters; this one has {len(text)}"
    )


def test_a_long_selector_is_named_by_its_length_not_repeated():
    text = "a = 1 AND " * 20 + "b ="
    with pytest.raises(SelectorError) as caught:
        compile_selector(text)
    assert str(caught.value) == (
        f"selector of {len(text)} characters at column {len(text) + 1}: expected a value after '='"
    )


@pytest.mark.parametrize(
    ("opening", "closing", "column"),
    [
        ("(", ")", 65),  # the 65th '('
        ("NOT ", "", 4 * 64 + 1),  # the 65th NOT
        ("NOT (", ")", 5 * 32 + 1),  # two levels each: the 33rd NOT is the 65th level
        ("not(", ")", 4 * 32 + 1),
    ],
    ids=["parentheses", "NOT", "NOT and parentheses", "lower case"],
)
def test_too_deep(opening: str, closing: str, column: int):
    assert MAX_DEPTH == 64
    text = opening * 65 + "a = 1" + closing * 65
    with pytest.raises(SelectorError) as caught:
        compile_selector(text)
    assert caught.value.column == column
    assert caught.value.reason == "nested too deeply: at most 64 levels of parentheses and NOT"


@pytest.mark.parametrize(
    ("opening", "closing", "levels", "expected"),
    [
        ("(", ")", 64, True),
        ("NOT ", "", 64, True),
        ("NOT (", ")", 32, True),
        ("NOT ", "", 63, False),
    ],
)
def test_as_deep_as_allowed(opening: str, closing: str, levels: int, expected: bool):
    text = opening * levels + "a = 1" + closing * levels
    assert compile_selector(text).matches({"a": 1}) is expected


def test_thousands_of_nots_are_refused_without_recursing():
    text = "NOT " * 1000 + "a = 1"
    with pytest.raises(SelectorError, match="nested too deeply"):
        compile_selector(text)
    with pytest.raises(SelectorError, match="nested too deeply"):
        compile_selector("(" * 4000)


def test_the_longest_selector_is_accepted():
    values = ", ".join(f"'{n:04}'" for n in range(450))
    text = f"id IN ({values})"
    text += " " * (MAX_LENGTH - len(text))
    assert len(text) == MAX_LENGTH
    selector = compile_selector(text)
    assert selector.matches({"id": "0449"})
    assert not selector.matches({"id": "0450"})


def test_a_long_chain_of_and_is_wide_not_deep():
    text = " AND ".join(f"h{n} IS NULL" for n in range(240))
    assert len(text) <= MAX_LENGTH
    assert compile_selector(text).matches({})
    assert not compile_selector(text).matches({"h239": 1})


def test_like_with_many_wildcards_on_a_long_value_does_not_backtrack():
    # A regular expression translation (.*?a.*?a...) takes time polynomial in the value's
    # length with the number of wildcards as exponent; the piece-by-piece matcher is linear.
    selector = compile_selector("v LIKE '" + "%a" * 20 + "%b'")
    assert not selector.matches({"v": "a" * 200_000})
    assert selector.matches({"v": "a" * 200_000 + "b"})
    underscores = compile_selector("v LIKE '" + "%_a_" * 20 + "%c'")
    assert not underscores.matches({"v": "a" * 200_000})


def test_a_long_string_literal_and_header_value():
    text = "v = '" + "x''" * 1300 + "'"
    assert len(text) <= MAX_LENGTH
    assert compile_selector(text).matches({"v": "x'" * 1300})


def test_the_deepest_selector_matches_without_recursion_trouble():
    text = "NOT (" * (MAX_DEPTH // 2) + "a = 1" + ")" * (MAX_DEPTH // 2)
    assert compile_selector(text).matches({"a": 1})
