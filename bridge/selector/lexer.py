"""Selector text to tokens, in one linear pass.

Strings, numbers, names and keywords are recognised here, so the parser sees whole tokens
with their columns, and the mistakes that are visible in the characters alone (an
unterminated string, ``==``, a stray ``#``) are reported with the column where they start.
"""

from __future__ import annotations

import enum
import math
import re

import attrs

from bridge.selector.errors import SelectorError

MAX_LENGTH = 4096
"""The longest selector accepted, in characters."""

KEYWORDS: frozenset[str] = frozenset(
    {"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE", "BETWEEN", "LIKE", "ESCAPE"}
)
"""Reserved words, matched without regard to case; they cannot be header names."""

_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NAME_START = "_$"
_NAME_PART = "_$."

# Characters people bring from other languages, with what this one spells instead.
_MISTAKES = {
    "!": "unknown operator '!'; expected '<>' for 'not equal' or NOT for negation",
    "&": "unexpected character '&'; expected AND",
    "|": "unexpected character '|'; expected OR",
    '"': "unexpected character '\"'; strings are written in single quotes ('...')",
    "+": "arithmetic is not supported; expected a comparison",
    "*": "arithmetic is not supported; expected a comparison",
    "/": "arithmetic is not supported; expected a comparison",
}


class Kind(enum.Enum):
    """What a token is."""

    NAME = "name"
    KEYWORD = "keyword"
    STRING = "string"
    NUMBER = "number"
    OPERATOR = "operator"
    LEFT = "'('"
    RIGHT = "')'"
    COMMA = "','"
    MINUS = "'-'"
    END = "end"


@attrs.frozen
class Token:
    """One token: its kind, its text as written, its 1-based column and its value.

    ``value`` is the header name, the keyword in upper case, the string's content (quotes
    removed, ``''`` made one quote), the number, or the operator.
    """

    kind: Kind
    text: str
    column: int
    value: str | int | float

    def describe(self) -> str:
        """The token as an error message names it."""
        if self.kind is Kind.END:
            return "the end of the selector"
        return repr(self.text) if self.kind is not Kind.STRING else f"the string {self.text}"


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens, ending with one ``END`` token; raise ``SelectorError``."""
    if len(text) > MAX_LENGTH:
        raise SelectorError(
            text,
            MAX_LENGTH + 1,
            f"a selector is at most {MAX_LENGTH} characters; this one has {len(text)}",
        )
    tokens: list[Token] = []
    position = 0
    length = len(text)
    while True:
        while position < length and text[position].isspace():
            position += 1
        if position == length:
            tokens.append(Token(Kind.END, "", position + 1, ""))
            return tokens
        token = _token_at(text, position)
        tokens.append(token)
        position += len(token.text)


def _token_at(text: str, position: int) -> Token:
    char = text[position]
    column = position + 1
    if text.startswith("!=", position):
        raise SelectorError(text, column, "unknown operator '!='; expected '<>' for 'not equal'")
    if char == "'":
        return _string(text, position)
    if "0" <= char <= "9" or (char == "." and "0" <= text[position + 1 : position + 2] <= "9"):
        return _number(text, position)
    if char.isalpha() or char in _NAME_START:
        end = position + 1
        while end < len(text) and (text[end].isalnum() or text[end] in _NAME_PART):
            end += 1
        word = text[position:end]
        if word.isascii() and word.upper() in KEYWORDS:
            return Token(Kind.KEYWORD, word, column, word.upper())
        return Token(Kind.NAME, word, column, word)
    if char in "=<>":
        return _operator(text, position)
    punctuation = {"(": Kind.LEFT, ")": Kind.RIGHT, ",": Kind.COMMA, "-": Kind.MINUS}
    if char in punctuation:
        return Token(punctuation[char], char, column, char)
    raise SelectorError(text, column, _MISTAKES.get(char, f"unexpected character {char!r}"))


def _string(text: str, start: int) -> Token:
    parts: list[str] = []
    position = start + 1
    while True:
        end = text.find("'", position)
        if end < 0:
            raise SelectorError(
                text, start + 1, "unterminated string: expected a closing quote (') for this one"
            )
        parts.append(text[position:end])
        if text.startswith("'", end + 1):
            parts.append("'")
            position = end + 2
        else:
            return Token(Kind.STRING, text[start : end + 1], start + 1, "".join(parts))


def _number(text: str, start: int) -> Token:
    match = _NUMBER.match(text, start)
    assert match is not None  # the caller saw a digit, or a '.' before a digit
    end = match.end()
    written = match.group()
    if end < len(text) and (text[end].isalnum() or text[end] in _NAME_PART):
        while end < len(text) and (text[end].isalnum() or text[end] in _NAME_PART):
            end += 1
        raise SelectorError(text, start + 1, f"malformed number {text[start:end]!r}")
    value: int | float
    try:
        value = float(written) if any(c in written for c in ".eE") else int(written)
    except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
        raise SelectorError(text, start + 1, "number has too many digits") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise SelectorError(text, start + 1, f"number {written} is out of range")
    return Token(Kind.NUMBER, written, start + 1, value)


def _operator(text: str, start: int) -> Token:
    pair = text[start : start + 2]
    if pair in ("<>", "<=", ">="):
        return Token(Kind.OPERATOR, pair, start + 1, pair)
    if pair == "==":
        raise SelectorError(text, start + 1, "unknown operator '=='; expected '=' for equality")
    if pair in ("=<", "=>", "><"):
        raise SelectorError(text, start + 1, f"unknown operator {pair!r}; expected <=, >= or <>")
    char = text[start]
    return Token(Kind.OPERATOR, char, start + 1, char)
