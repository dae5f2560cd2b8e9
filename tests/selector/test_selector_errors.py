"""Malformed selectors: each raises SelectorError naming the column and what was expected."""

from __future__ import annotations

import pytest

from bridge.selector import SelectorError, compile_selector

MALFORMED = [
    # (text, column, the reason: what was expected there)
    ("", 1, "the selector is empty; expected a condition"),
    ("   ", 4, "the selector is empty; expected a condition"),
    ("region = ", 10, "expected a value after '='"),
    ("region =", 9, "expected a value after '='"),
    ("region = AND x = 1", 10, "expected a value after '=', found 'AND'"),
    ("region <> )", 11, "expected a value after '<>', found ')'"),
    ("region = 'eu", 10, "unterminated string: expected a closing quote (') for this one"),
    ("name = 'it''s", 8, "unterminated string: expected a closing quote (') for this one"),
    ("a = 1 b", 7, "expected AND, OR or the end of the selector, found 'b'"),
    ("a = 1 'x'", 7, "expected AND, OR or the end of the selector, found the string 'x'"),
    ("a = 1 = 2", 7, "expected AND, OR or the end of the selector, found '='"),
    ("urgent urgent", 8, "expected AND, OR or the end of the selector, found 'urgent'"),
    ("a = 1 AND", 10, "expected a condition after 'AND'"),
    ("a = 1 OR", 9, "expected a condition after 'OR'"),
    ("a = 1 AND OR b = 1", 11, "expected a condition after 'AND', found 'OR'"),
    ("AND a = 1", 1, "expected a condition, found 'AND'"),
    ("NOT", 4, "expected a condition after 'NOT'"),
    ("= 1", 1, "expected a condition, found '='"),
    ("(a = 1", 7, "expected AND, OR or ')' to close the '(' at column 1, found the end"),
    ("((a = 1) AND (b = 2)", 21, "expected AND, OR or ')' to close the '(' at column 1"),
    ("(a = 1 b)", 8, "expected AND, OR or ')' to close the '(' at column 1, found 'b'"),
    ("a = 1)", 6, "unbalanced ')': there is no '(' for it to close"),
    ("()", 2, "expected a condition after '(', found ')'"),
    ("x IN ()", 7, "expected at least one string or number in IN (...), found ')'"),
    ("x IN 'a'", 6, "expected '(' and a list of values after 'IN', found the string 'a'"),
    ("x IN ('a'", 10, "expected ',' or ')' in the IN list, found the end of the selector"),
    ("x IN ('a' 'b')", 11, "expected ',' or ')' in the IN list, found the string 'b'"),
    ("x IN ('a',)", 11, "expected a string or number in the IN list after ',', found ')'"),
    ("x IN (y)", 7, "expected a string or number in the IN list, found 'y'"),
    ("x IN (TRUE)", 7, "expected a string or number in the IN list, found 'TRUE'"),
    ("x IN ('a', 1)", 12, "the values of IN must be all strings or all numbers"),
    ("'a' IN ('a')", 1, "IN needs a header name on its left, found the string 'a'"),
    ("a == 1", 3, "unknown operator '=='; expected '=' for equality"),
    ("a != 1", 3, "unknown operator '!='; expected '<>' for 'not equal'"),
    ("a => 1", 3, "unknown operator '=>'; expected <=, >= or <>"),
    ("a = 1 && b = 2", 7, "unexpected character '&'; expected AND"),
    ("a = 1 || b = 2", 7, "unexpected character '|'; expected OR"),
    ("!a", 1, "unknown operator '!'; expected '<>' for 'not equal' or NOT for negation"),
    ('a = "eu"', 5, "unexpected character '\"'; strings are written in single quotes"),
    ("a + 1 = 2", 3, "arithmetic is not supported; expected a comparison"),
    ("a # 1", 3, "unexpected character '#'"),
    ("a = 1.2.3", 5, "malformed number '1.2.3'"),
    ("a = 12abc", 5, "malformed number '12abc'"),
    ("a = 1e", 5, "malformed number '1e'"),
    ("a = 1e999", 5, "number 1e999 is out of range"),
    ("a = -", 6, "expected a number after '-'"),
    ("a = -b", 6, "expected a number after '-', found 'b'"),
    ("a = NULL", 5, "NULL is not a value; test for a missing header with IS NULL"),
    ("a <> null", 6, "NULL is not a value; test for a missing header with IS NULL"),
    ("a < 'x'", 5, "'<' compares numbers; the string 'x' is not one"),
    ("'x' >= a", 1, "'>=' compares numbers; the string 'x' is not one"),
    ("a > TRUE", 5, "'>' compares numbers; 'TRUE' is not one"),
    ("5", 2, "expected a comparison (=, <>, <, >, <=, >=, IN, BETWEEN, LIKE) after '5'"),
    ("'eu' AND a", 6, "expected a comparison (=, <>, <, >, <=, >=, IN, BETWEEN, LIKE)"),
    ("a IS 5", 6, "expected NULL or NOT NULL after 'IS', found '5'"),
    ("a IS NOT", 9, "expected NULL or NOT NULL after 'IS'"),
    ("TRUE IS NULL", 1, "IS NULL needs a header name on its left, found 'TRUE'"),
    ("a NOT b", 7, "expected IN, BETWEEN or LIKE after 'NOT', found 'b'"),
    ("a NOT = 1", 7, "expected IN, BETWEEN or LIKE after 'NOT', found '='"),
    ("x BETWEEN 1 5", 13, "expected AND between the bounds of the BETWEEN at column 3, found '5'"),
    ("x BETWEEN 1 AND", 16, "expected a value after 'AND'"),
    ("x BETWEEN 'a' AND 'b'", 11, "BETWEEN compares numbers; the string 'a' is not one"),
    ("x BETWEEN 1 AND FALSE", 17, "BETWEEN compares numbers; 'FALSE' is not one"),
    ("'x' BETWEEN 1 AND 2", 1, "BETWEEN compares numbers; the string 'x' is not one"),
    ("x LIKE y", 8, "expected a pattern in quotes after 'LIKE', found 'y'"),
    ("x LIKE 'a' ESCAPE", 18, "expected an escape character in quotes after 'ESCAPE'"),
    ("x LIKE 'a' ESCAPE '!!'", 19, "ESCAPE takes one character, found '!!'"),
    ("x LIKE 'a' ESCAPE ''", 19, "ESCAPE takes one character, found ''"),
    ("x LIKE 'a!' ESCAPE '!'", 8, "the pattern ends with the escape character '!'"),
    ("5 LIKE 'a'", 1, "LIKE needs a header name on its left, found '5'"),
    ("and = 1", 1, "expected a condition, found 'and'"),
]


@pytest.mark.parametrize(("text", "column", "reason"), MALFORMED)
def test_malformed(text: str, column: int, reason: str):
    with pytest.raises(SelectorError) as caught:
        compile_selector(text)
    error = caught.value
    assert error.column == column
    assert error.reason.startswith(reason)
    assert str(error) == f'selector "{text}" at column {column}: {error.reason}'


def test_the_message_names_the_column_and_the_expectation():
    with pytest.raises(SelectorError) as caught:
        compile_selector("region = ")
    assert str(caught.value) == """selector "region = " at column 10: expected a value after '='"""


def test_a_selector_error_is_a_value_error():
    with pytest.raises(ValueError, match="at column 1"):
        compile_selector("")
