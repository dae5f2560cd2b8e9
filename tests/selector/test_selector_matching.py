"""What selectors match: a table of (selector, headers, expected) for every construct.

Covers each operator, precedence and parentheses, SQL's three-valued logic with missing
headers, comparisons across kinds of value, quote escaping, keyword case and IN lists.
"""

from __future__ import annotations

import pytest

from bridge.selector import compile_selector, parse_selector
from bridge.selector.evaluate import compile_condition
from bridge.selector.syntax import Header, Truth

EU = {"region": "eu", "priority": 5, "price": 9.5, "urgent": True, "blob": b"eu"}

EXAMPLES = [
    # Equality and inequality, each kind of value.
    ("region = 'eu'", EU, True),
    ("region = 'us'", EU, False),
    ("region <> 'us'", EU, True),
    ("region <> 'eu'", EU, False),
    ("'eu' = region", EU, True),
    ("priority = 5", EU, True),
    ("priority = 5.0", EU, True),
    ("priority <> 5", EU, False),
    ("price = 9.5", EU, True),
    ("price = 95e-1", EU, True),
    ("urgent = TRUE", EU, True),
    ("urgent = FALSE", EU, False),
    ("urgent <> FALSE", EU, True),
    ("TRUE = urgent", EU, True),
    # Ordering, numbers only, int and float mixed.
    ("priority > 4", EU, True),
    ("priority > 5", EU, False),
    ("priority >= 5", EU, True),
    ("priority < 5.5", EU, True),
    ("priority <= 4.99", EU, False),
    ("price < 10", EU, True),
    ("price > 9", EU, True),
    ("4 < priority", EU, True),
    ("priority > -1", EU, True),
    ("priority > - 1", EU, True),
    ("n < -2", {"n": -3}, True),
    ("1.5e1 > price", EU, True),
    ("price < .5", {"price": 0.25}, True),
    # Two headers compared with each other.
    ("priority < price", EU, True),
    ("region = zone", {"region": "eu", "zone": "eu"}, True),
    ("region = zone", {"region": "eu"}, False),
    ("a < b", {"a": "x", "b": "y"}, False),  # strings do not order: UNKNOWN
    # Two constants.
    ("1 = 1", {}, True),
    ("'a' <> 'b'", {}, True),
    ("1 = '1'", {}, False),
    # IN and NOT IN, one value and many.
    ("region IN ('eu')", EU, True),
    ("region IN ('us')", EU, False),
    ("region IN ('us', 'eu', 'ap')", EU, True),
    ("region NOT IN ('us', 'ap')", EU, True),
    ("region NOT IN ('eu')", EU, False),
    ("priority IN (1, 5, 9)", EU, True),
    ("priority IN (5.0)", EU, True),
    ("priority NOT IN (1, 2)", EU, True),
    ("price IN (9.5)", EU, True),
    ("region IN (1, 2)", EU, False),  # a string against numbers: UNKNOWN
    ("region NOT IN (1, 2)", EU, False),  # and NOT UNKNOWN is UNKNOWN
    ("urgent IN (1)", EU, False),  # TRUE is not the number 1
    ("missing IN ('eu')", EU, False),
    ("missing NOT IN ('eu')", EU, False),
    # IS NULL and IS NOT NULL: never UNKNOWN.
    ("missing IS NULL", EU, True),
    ("region IS NULL", EU, False),
    ("region IS NOT NULL", EU, True),
    ("missing IS NOT NULL", EU, False),
    ("blob IS NOT NULL", EU, True),
    ("NOT missing IS NULL", EU, False),
    # BETWEEN, bounds included.
    ("priority BETWEEN 1 AND 5", EU, True),
    ("priority BETWEEN 5 AND 10", EU, True),
    ("priority BETWEEN 6 AND 10", EU, False),
    ("price BETWEEN 9 AND 9.5", EU, True),
    ("priority NOT BETWEEN 6 AND 10", EU, True),
    ("priority NOT BETWEEN 1 AND 10", EU, False),
    ("priority BETWEEN low AND high", {"priority": 5, "low": 1, "high": 7}, True),
    ("priority BETWEEN low AND high", {"priority": 5, "low": 6, "high": 7}, False),
    ("priority BETWEEN low AND high", {"priority": 5, "low": 1}, False),  # UNKNOWN
    ("priority NOT BETWEEN low AND high", {"priority": 5, "low": 1}, False),
    ("priority NOT BETWEEN low AND high", {"priority": 5, "low": 6}, True),  # FALSE AND ?
    ("5 BETWEEN 1 AND 5", {}, True),
    ("region BETWEEN 1 AND 5", EU, False),
    ("region NOT BETWEEN 1 AND 5", EU, False),
    ("missing BETWEEN 1 AND 5", EU, False),
    ("missing NOT BETWEEN 1 AND 5", EU, False),
    # LIKE: % any run, _ one character, ESCAPE.
    ("region LIKE 'e%'", EU, True),
    ("region LIKE 'e_'", EU, True),
    ("region LIKE '_'", EU, False),
    ("region LIKE '%'", EU, True),
    ("region LIKE 'eu'", EU, True),
    ("region LIKE 'EU'", EU, False),
    ("region NOT LIKE 'u%'", EU, True),
    ("name LIKE '%one%two%'", {"name": "zonetwotwo"}, True),
    ("name LIKE '%one%two%'", {"name": "twoone"}, False),
    ("name LIKE 'a%b%c'", {"name": "abc"}, True),
    ("name LIKE 'a%b%c'", {"name": "ac"}, False),
    ("name LIKE 'ab%ba'", {"name": "aba"}, False),  # prefix and suffix may not overlap
    ("name LIKE 'a%%a'", {"name": "aa"}, True),
    ("name LIKE 'a_%_c'", {"name": "axyc"}, True),
    ("name LIKE 'a_%_c'", {"name": "axc"}, False),
    ("name LIKE '100!%' ESCAPE '!'", {"name": "100%"}, True),
    ("name LIKE '100!%' ESCAPE '!'", {"name": "1000"}, False),
    ("name LIKE 'a!_b' ESCAPE '!'", {"name": "a_b"}, True),
    ("name LIKE 'a!_b' ESCAPE '!'", {"name": "axb"}, False),
    ("name LIKE 'a!!b' ESCAPE '!'", {"name": "a!b"}, True),
    ("name LIKE 'a\\%' ESCAPE '\\'", {"name": "a%"}, True),
    ("name LIKE 'a.c'", {"name": "abc"}, False),  # no regular-expression meaning
    ("name LIKE 'a[b]*'", {"name": "a[b]*"}, True),
    ("name LIKE 'line%'", {"name": "line one\nline two"}, True),
    ("name LIKE 'it''s%'", {"name": "it's here"}, True),
    ("priority LIKE '5'", EU, False),  # not a string: UNKNOWN
    ("priority NOT LIKE '5'", EU, False),
    ("missing NOT LIKE 'x'", EU, False),
    # Bare boolean headers and constants.
    ("urgent", EU, True),
    ("NOT urgent", EU, False),
    ("urgent", {"urgent": False}, False),
    ("NOT urgent", {"urgent": False}, True),
    ("region", EU, False),  # not a boolean: UNKNOWN
    ("NOT region", EU, False),
    ("NOT missing", EU, False),
    ("priority", {"priority": 1}, False),  # 1 is not TRUE
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NOT FALSE", {}, True),
    # Escaped quotes in strings.
    ("name = 'O''Brien'", {"name": "O'Brien"}, True),
    ("name = ''''", {"name": "'"}, True),
    ("name = ''", {"name": ""}, True),
    ("name = 'a''''b'", {"name": "a''b"}, True),
    ("name = 'and or not'", {"name": "and or not"}, True),
    ("name = '日本'", {"name": "日本"}, True),
    # Keywords in any case; header names are case-sensitive.
    ("region = 'eu' and priority = 5", EU, True),
    ("region = 'eu' AnD NoT priority = 6", EU, True),
    ("region in ('eu') or false", EU, True),
    ("missing is null", EU, True),
    ("region is not null", EU, True),
    ("priority not between 6 and 7", EU, True),
    ("region like 'e%'", EU, True),
    ("urgent = true", EU, True),
    ("Region = 'eu'", EU, False),
    ("REGION = 'eu'", {"REGION": "eu"}, True),
    # Header names with the allowed characters.
    ("a.b = 1", {"a.b": 1}, True),
    ("$x_1 = 1", {"$x_1": 1}, True),
    ("_private = 'y'", {"_private": "y"}, True),
    ("région = 'eu'", {"région": "eu"}, True),
    ("JMSType = 'car'", {"JMSType": "car"}, True),
    # Whitespace of any kind, or none.
    ("region='eu'AND(priority>4)", EU, True),
    ("\tregion\n=\r\n'eu'  ", EU, True),
    # Precedence: NOT binds tighter than AND, AND tighter than OR.
    ("region = 'us' AND priority = 5 OR urgent", EU, True),  # (us AND 5) OR urgent
    ("region = 'us' AND (priority = 5 OR urgent)", EU, False),
    ("urgent OR region = 'us' AND priority = 1", EU, True),  # urgent OR (us AND 1)
    ("(urgent OR region = 'us') AND priority = 1", EU, False),
    ("NOT region = 'us' AND priority = 5", EU, True),  # (NOT us) AND 5
    ("NOT (region = 'eu' AND priority = 6)", EU, True),
    ("NOT region = 'eu' OR priority = 5", EU, True),
    ("NOT (region = 'eu' OR priority = 6)", EU, False),
    ("NOT NOT urgent", EU, True),
    ("((((region = 'eu'))))", EU, True),
    ("a = 1 AND b = 2 AND c = 3", {"a": 1, "b": 2, "c": 3}, True),
    ("a = 1 AND b = 2 AND c = 3", {"a": 1, "b": 2, "c": 4}, False),
    ("a = 1 OR b = 2 OR c = 3", {"c": 3}, True),
    ("a = 1 OR b = 2 OR c = 3", {"a": 0, "b": 0, "c": 0}, False),
    # Three-valued logic: a missing header makes a comparison UNKNOWN.
    ("missing = 'eu'", EU, False),
    ("missing <> 'eu'", EU, False),
    ("NOT missing = 'eu'", EU, False),  # NOT UNKNOWN = UNKNOWN
    ("NOT (missing = 'eu')", EU, False),
    ("missing = 1 AND priority = 6", EU, False),  # UNKNOWN AND FALSE = FALSE
    ("NOT (missing = 1 AND priority = 6)", EU, True),  # ... so NOT of it is TRUE
    ("missing = 1 AND priority = 5", EU, False),  # UNKNOWN AND TRUE = UNKNOWN
    ("NOT (missing = 1 AND priority = 5)", EU, False),
    ("missing = 1 OR priority = 5", EU, True),  # UNKNOWN OR TRUE = TRUE
    ("missing = 1 OR priority = 6", EU, False),  # UNKNOWN OR FALSE = UNKNOWN
    ("NOT (missing = 1 OR priority = 6)", EU, False),
    ("missing = 1 OR missing IS NULL", EU, True),
    # Kinds that do not compare: UNKNOWN, never an error.
    ("region = 1", EU, False),
    ("NOT region = 1", EU, False),
    ("region <> 1", EU, False),
    ("priority = '5'", EU, False),
    ("NOT priority = '5'", EU, False),
    ("priority > region", EU, False),
    ("urgent = 1", EU, False),
    ("NOT urgent = 1", EU, False),
    ("flag = 1", {"flag": True}, False),
    ("flag = 0", {"flag": False}, False),
    ("urgent > 0", EU, False),
    ("urgent < other", {"urgent": True, "other": False}, False),
    ("urgent = other", {"urgent": True, "other": True}, True),
    ("blob = 'eu'", EU, False),
    ("NOT blob = 'eu'", EU, False),
    ("blob <> 'eu'", EU, False),
    ("blob IN ('eu')", EU, False),
    ("blob LIKE 'eu'", EU, False),
    ("blob", EU, False),
]


@pytest.mark.parametrize(("text", "headers", "expected"), EXAMPLES)
def test_example(text: str, headers: dict[str, object], expected: bool):
    assert compile_selector(text).matches(headers) is expected


def test_the_selector_keeps_its_text_and_tree():
    selector = compile_selector("region = 'eu'")
    assert selector.text == "region = 'eu'"
    assert selector.condition == parse_selector("region = 'eu'")
    assert selector == compile_selector("region = 'eu'")


def test_a_selector_is_used_many_times():
    selector = compile_selector("n > 2 AND n IN (3, 4, 7)")
    assert [n for n in range(10) if selector.matches({"n": n})] == [3, 4, 7]


def test_subclasses_of_the_header_types_compare_as_their_base_kind():
    class Name(str):
        pass

    class Count(int):
        pass

    assert compile_selector("a = 'x' AND b = 3 AND b > 2").matches({"a": Name("x"), "b": Count(3)})
    assert compile_selector("a IN ('x') AND b BETWEEN 1 AND 3").matches(
        {"a": Name("x"), "b": Count(3)}
    )


def test_a_value_of_another_type_is_unknown():
    assert not compile_selector("a = 1 OR a <> 1").matches({"a": [1]})
    assert not compile_selector("a = 1 OR a <> 1").matches({"a": None})


def test_compiling_something_that_is_not_a_condition_is_a_type_error():
    with pytest.raises(TypeError, match="not a selector condition"):
        compile_condition(Header("a"))
    assert compile_condition(Truth(Header("a")))({"a": True}) is True
