"""Properties over random selectors: render and parse back, agree with a reference evaluator,
and never raise anything but SelectorError on any text.

The renderer and the reference evaluator here are written independently of the library:
the renderer from the grammar in docs/selectors.md, the evaluator as a direct reading of the
three-valued rules (a regular expression for LIKE), so a shared mistake is unlikely.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from bridge.selector import (
    MAX_DEPTH,
    MAX_LENGTH,
    SelectorError,
    compile_selector,
    parse_selector,
)
from bridge.selector.evaluate import HeaderValue
from bridge.selector.syntax import (
    And,
    Between,
    BooleanLiteral,
    Comparison,
    Condition,
    Header,
    In,
    IsNull,
    Like,
    Not,
    NumberLiteral,
    Operand,
    Or,
    StringLiteral,
    Truth,
)

# A few names, so that generated headers and generated selectors often meet.
NAMES = ["a", "b", "Region", "x.y", "$p", "_q", "é1"]

headers_names = st.sampled_from(NAMES).map(Header)
strings = st.text(alphabet="ab'%_! é\n", max_size=6)
numbers = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 1, 1.0, 0.5, -0.0]),
)
string_literals = strings.map(StringLiteral)
number_literals = numbers.map(NumberLiteral)
boolean_literals = st.booleans().map(BooleanLiteral)
constants = st.one_of(string_literals, number_literals, boolean_literals)
numeric_operands = st.one_of(headers_names, number_literals)


@st.composite
def likes(draw: st.DrawFn) -> Like:
    escape = draw(st.sampled_from([None, "!", "\\", "'"]))
    plain = st.sampled_from([c for c in "abé%_'\n!\\" if c != escape])
    pieces = [plain] if escape is None else [plain, plain.map(lambda c: escape + c)]
    pattern = "".join(draw(st.lists(st.one_of(*pieces), max_size=6)))
    return Like(draw(headers_names), pattern, escape, draw(st.booleans()))


predicates = st.one_of(
    st.builds(
        Comparison,
        st.sampled_from(["=", "<>"]),
        st.one_of(headers_names, constants),
        st.one_of(headers_names, constants),
    ),
    st.builds(
        Comparison, st.sampled_from(["<", ">", "<=", ">="]), numeric_operands, numeric_operands
    ),
    st.builds(
        In,
        headers_names,
        st.one_of(
            st.lists(string_literals, min_size=1, max_size=4).map(tuple),
            st.lists(number_literals, min_size=1, max_size=4).map(tuple),
        ),
        st.booleans(),
    ),
    st.builds(Between, numeric_operands, numeric_operands, numeric_operands, st.booleans()),
    likes(),
    st.builds(IsNull, headers_names, st.booleans()),
    st.builds(Truth, st.one_of(headers_names, boolean_literals)),
)

conditions: st.SearchStrategy[Condition] = st.recursive(
    predicates,
    lambda inner: st.one_of(
        inner.map(Not),
        st.lists(inner, min_size=2, max_size=4).map(lambda each: And(tuple(each))),
        st.lists(inner, min_size=2, max_size=4).map(lambda each: Or(tuple(each))),
    ),
    max_leaves=12,
)

header_values = st.one_of(
    strings,
    numbers,
    st.floats(),  # NaN and infinities too
    st.booleans(),
    st.binary(max_size=3),
)
headers = st.dictionaries(st.sampled_from(NAMES), header_values, max_size=len(NAMES))

# Rendering ---------------------------------------------------------------------------------


def render(condition: Condition, keyword_case: str = "upper") -> str:
    def kw(word: str) -> str:
        return word.lower() if keyword_case == "lower" else word

    def value(operand: object) -> str:
        match operand:
            case Header(name=name):
                return name
            case StringLiteral(value=text):
                return "'" + text.replace("'", "''") + "'"
            case BooleanLiteral(value=truth):
                return kw("TRUE" if truth else "FALSE")
            case NumberLiteral(value=number):
                return repr(number)
        raise AssertionError(operand)

    def group(child: Condition, parent: type) -> str:
        text = render(child, keyword_case)
        needs = isinstance(child, And | Or) if parent in (And, Not) else isinstance(child, Or)
        return f"({text})" if needs else text

    not_ = kw("NOT") + " "
    match condition:
        case Comparison(operator=op, left=left, right=right):
            return f"{value(left)} {op} {value(right)}"
        case In(header=header, values=values, negated=negated):
            listed = ", ".join(value(each) for each in values)
            return f"{value(header)} {not_ if negated else ''}{kw('IN')} ({listed})"
        case Between(operand=operand, low=low, high=high, negated=negated):
            return (
                f"{value(operand)} {not_ if negated else ''}{kw('BETWEEN')} {value(low)}"
                f" {kw('AND')} {value(high)}"
            )
        case Like(header=header, pattern=pattern, escape=escape, negated=negated):
            text = f"{value(header)} {not_ if negated else ''}{kw('LIKE')} "
            text += value(StringLiteral(pattern))
            if escape is not None:
                text += f" {kw('ESCAPE')} {value(StringLiteral(escape))}"
            return text
        case IsNull(header=header, negated=negated):
            return f"{value(header)} {kw('IS')} {not_ if negated else ''}{kw('NULL')}"
        case Truth(operand=operand):
            return value(operand)
        case Not(operand=operand):
            return not_ + group(operand, Not)
        case And(operands=operands):
            return f" {kw('AND')} ".join(group(each, And) for each in operands)
        case Or(operands=operands):
            return f" {kw('OR')} ".join(group(each, Or) for each in operands)
    raise AssertionError(condition)


def nesting(condition: Condition) -> int:
    """Levels of parentheses and NOT that ``render`` writes, as the parser counts them."""
    match condition:
        case Not(operand=operand):
            return 1 + nesting(operand) + isinstance(operand, And | Or)
        case And(operands=operands):
            return max(nesting(each) + isinstance(each, And | Or) for each in operands)
        case Or(operands=operands):
            return max(nesting(each) + isinstance(each, Or) for each in operands)
    return 0


# The reference evaluator ------------------------------------------------------------------


def kind(value: object) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def resolve(operand: Operand, message: Mapping[str, object]) -> object:
    if isinstance(operand, Header):
        return message.get(operand.name)
    return operand.value


def compare(op: str, left: object, right: object) -> bool | None:
    if kind(left) is None or kind(left) != kind(right):
        return None
    if op in ("<", ">", "<=", ">=") and kind(left) != "number":
        return None
    return bool(OPERATORS[op](left, right))


OPERATORS: dict[str, Callable[[Any, Any], object]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
    "<=": operator.le,
    ">=": operator.ge,
}


def not3(result: bool | None) -> bool | None:
    return None if result is None else not result


def and3(results: list[bool | None]) -> bool | None:
    if False in results:
        return False
    return None if None in results else True


def or3(results: list[bool | None]) -> bool | None:
    if True in results:
        return True
    return None if None in results else False


def like_regex(pattern: str, escape: str | None) -> str:
    out, chars = [], iter(pattern)
    for char in chars:
        if char == escape:
            out.append(re.escape(next(chars)))
        elif char == "%":
            out.append(".*")
        elif char == "_":
            out.append(".")
        else:
            out.append(re.escape(char))
    return "".join(out)


def reference(condition: Condition, message: Mapping[str, object]) -> bool | None:
    match condition:
        case Comparison(operator=op, left=left, right=right):
            return compare(op, resolve(left, message), resolve(right, message))
        case In(header=header, values=values, negated=negated):
            value = resolve(header, message)
            results = [compare("=", value, each.value) for each in values]
            result = or3(results)
            return not3(result) if negated else result
        case Between(operand=operand, low=low, high=high, negated=negated):
            value = resolve(operand, message)
            result = and3(
                [
                    compare(">=", value, resolve(low, message)),
                    compare("<=", value, resolve(high, message)),
                ]
            )
            return not3(result) if negated else result
        case Like(header=header, pattern=pattern, escape=escape, negated=negated):
            value = resolve(header, message)
            if not isinstance(value, str):
                return None
            result = re.fullmatch(like_regex(pattern, escape), value, re.DOTALL) is not None
            return not result if negated else result
        case IsNull(header=header, negated=negated):
            return (resolve(header, message) is None) != negated
        case Truth(operand=operand):
            value = resolve(operand, message)
            return value if isinstance(value, bool) else None
        case Not(operand=operand):
            return not3(reference(operand, message))
        case And(operands=operands):
            return and3([reference(each, message) for each in operands])
        case Or(operands=operands):
            return or3([reference(each, message) for each in operands])
    raise AssertionError(condition)


# Properties ------------------------------------------------------------------------------


def renderable(condition: Condition, text: str) -> None:
    assume(len(text) <= MAX_LENGTH and nesting(condition) <= MAX_DEPTH)


@given(conditions, st.sampled_from(["upper", "lower"]))
def test_render_then_parse_gives_the_same_tree(condition: Condition, keyword_case: str):
    text = render(condition, keyword_case)
    renderable(condition, text)
    parsed = parse_selector(text)
    assert parsed == condition
    # Equal trees may still differ in 1 and 1.0, or TRUE and 1: the rendering tells them apart.
    assert render(parsed) == render(condition)


@given(conditions, headers)
def test_the_compiled_selector_agrees_with_the_reference(
    condition: Condition, message: dict[str, HeaderValue]
):
    text = render(condition)
    renderable(condition, text)
    expected = reference(condition, message)
    assert compile_selector(text).matches(message) is (expected is True)


@given(conditions, headers)
def test_not_of_a_selector_matches_when_the_selector_is_false(
    condition: Condition, message: dict[str, HeaderValue]
):
    text = f"NOT ({render(condition)})"
    renderable(Not(And((condition, condition))), text)
    expected = reference(condition, message)
    assert compile_selector(text).matches(message) is (expected is False)


FRAGMENTS = [
    "a", "b.c", "$d", "'x'", "'it''s'", "'", "''", "1", "-", "2.5", "1e3", ".5", "1.2.3",
    "=", "<>", "<", ">", "<=", ">=", "==", "!=", "(", ")", ",", "AND", "or", "NOT", "IN",
    "IS", "NULL", "TRUE", "false", "BETWEEN", "LIKE", "ESCAPE", "%", "_", "!", "#", " ",
]  # fmt: skip


@given(st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS)).map(" ".join)), headers)
def test_any_text_compiles_or_raises_selector_error(text: str, message: dict[str, HeaderValue]):
    try:
        selector = compile_selector(text)
    except SelectorError as error:
        assert 1 <= error.column <= len(text) + 1
        assert error.reason
        assert f"at column {error.column}: {error.reason}" in str(error)
    else:
        assert selector.matches(message) in (True, False)
