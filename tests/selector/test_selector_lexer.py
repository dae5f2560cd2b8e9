"""Tokens: strings and their quotes, numbers, names, keywords, operators and columns."""

from __future__ import annotations

import pytest

from bridge.selector.lexer import KEYWORDS, Kind, Token, tokenize


def kinds_and_values(text: str) -> list[tuple[Kind, object]]:
    return [(token.kind, token.value) for token in tokenize(text)[:-1]]


def test_columns_are_one_based_and_the_end_is_after_the_last_character():
    tokens = tokenize("a <= 'x y'")
    assert [(token.text, token.column) for token in tokens] == [
        ("a", 1),
        ("<=", 3),
        ("'x y'", 6),
        ("", 11),
    ]
    assert tokens[-1] == Token(Kind.END, "", 11, "")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("''", ""),
        ("'a'", "a"),
        ("''''", "'"),
        ("'it''s'", "it's"),
        ("'a''''b'", "a''b"),
        ("'%_\\'", "%_\\"),
        ("'two\nlines'", "two\nlines"),
        ("'AND'", "AND"),
        ("'日本'", "日本"),
    ],
)
def test_strings(text: str, value: str):
    assert kinds_and_values(text) == [(Kind.STRING, value)]


def test_two_strings_side_by_side_are_two_tokens():
    assert kinds_and_values("'a' 'b'") == [(Kind.STRING, "a"), (Kind.STRING, "b")]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("42", 42),
        ("007", 7),
        ("1.5", 1.5),
        (".5", 0.5),
        ("1.", 1.0),
        ("1e3", 1000.0),
        ("1E+3", 1000.0),
        ("25e-1", 2.5),
        ("9" * 30, int("9" * 30)),
    ],
)
def test_numbers(text: str, value: float):
    [(kind, number)] = kinds_and_values(text)
    assert kind is Kind.NUMBER
    assert number == value
    assert type(number) is type(value)


def test_a_minus_sign_is_its_own_token():
    assert kinds_and_values("-1") == [(Kind.MINUS, "-"), (Kind.NUMBER, 1)]


@pytest.mark.parametrize("word", sorted(KEYWORDS))
def test_keywords_in_any_case(word: str):
    for written in (word, word.lower(), word.capitalize()):
        assert kinds_and_values(written) == [(Kind.KEYWORD, word)]


@pytest.mark.parametrize(
    "name",
    ["a", "A", "region", "a.b.c", "$x", "_y", "x1", "JMSType", "région", "AND_OR", "\u0131n"],
)
def test_names(name: str):
    # "\u0131n" (dotless i) upper-cases to "IN", but keywords are ASCII only.
    assert kinds_and_values(name) == [(Kind.NAME, name)]


def test_operators_and_punctuation():
    assert [token.text for token in tokenize("= <> < <= > >= ( ) , -")[:-1]] == [
        "=",
        "<>",
        "<",
        "<=",
        ">",
        ">=",
        "(",
        ")",
        ",",
        "-",
    ]
