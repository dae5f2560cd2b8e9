"""Syntax tree to a matching function, built once per selector.

Each node becomes a closure that takes a message's headers and returns ``True``, ``False``
or ``None`` for UNKNOWN (SQL's three-valued logic, as JMS selectors use it). Compiling
front-loads every decision that does not depend on the message (operator, constant's kind,
IN's set, LIKE's pattern split), so matching a message is a few dictionary lookups and
comparisons, with no parsing and no allocation beyond the call frames.
"""

from __future__ import annotations

import operator
import re
import typing
from collections.abc import Callable, Mapping

from bridge.selector.syntax import (
    ORDERING_OPERATORS,
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

HeaderValue: typing.TypeAlias = str | int | float | bool | bytes
Headers: typing.TypeAlias = Mapping[str, HeaderValue]
Test: typing.TypeAlias = Callable[[Headers], bool | None]
"""A compiled condition: TRUE, FALSE or None for UNKNOWN."""

_Getter: typing.TypeAlias = Callable[[Headers], object]

# The kinds of value a selector compares. Values of one kind compare with each other only;
# anything else (bytes, a missing header) makes a comparison UNKNOWN.
_STRING, _NUMBER, _BOOLEAN = "string", "number", "boolean"
_KIND_OF_CLASS: dict[type, str] = {str: _STRING, int: _NUMBER, float: _NUMBER, bool: _BOOLEAN}
_CLASSES_OF_KIND: dict[str, frozenset[type]] = {
    _STRING: frozenset({str}),
    _NUMBER: frozenset({int, float}),
    _BOOLEAN: frozenset({bool}),
}

_FUNCTIONS: dict[str, Callable[[typing.Any, typing.Any], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
    "<=": operator.le,
    ">=": operator.ge,
}


def compile_condition(condition: Condition) -> Test:
    """The matching function of ``condition``: headers in, TRUE, FALSE or None (UNKNOWN) out."""
    match condition:
        case Comparison(operator=op, left=left, right=right):
            return _comparison(op, left, right)
        case In():
            return _in(condition)
        case Between():
            return _between(condition)
        case Like():
            return _like(condition)
        case IsNull(header=Header(name=name), negated=negated):
            return lambda headers: (headers.get(name) is not None) is negated
        case Truth(operand=BooleanLiteral(value=value)):
            return lambda headers: value
        case Truth(operand=Header(name=name)):
            return lambda headers: _truth(headers.get(name))
        case Not(operand=operand):
            return _not(compile_condition(operand))
        case And(operands=operands):
            return _and(tuple(compile_condition(each) for each in operands))
        case Or(operands=operands):
            return _or(tuple(compile_condition(each) for each in operands))
    raise TypeError(f"not a selector condition: {condition!r}")


def _kind_of(value: object) -> str | None:
    """The kind a value compares as ("string", "number", "boolean"), or None: incomparable.

    ``bool`` is checked before ``int`` (it is a subclass), so ``TRUE`` never equals ``1``.
    """
    kind = _KIND_OF_CLASS.get(value.__class__)
    if kind is not None or value is None:
        return kind
    if isinstance(value, bool):
        return _BOOLEAN
    if isinstance(value, int | float):
        return _NUMBER
    if isinstance(value, str):
        return _STRING
    return None


def _compare(op: str, left: object, right: object) -> bool | None:
    """``left op right`` in three-valued logic: None unless both are of one kind, and for
    the ordering operators, unless both are numbers."""
    kind = _kind_of(left)
    if kind is None or kind != _kind_of(right):
        return None
    if kind != _NUMBER and op in ORDERING_OPERATORS:
        return None
    return _FUNCTIONS[op](left, right)


def _truth(value: object) -> bool | None:
    if value is True or value is False:
        return value
    return None


def _getter(operand: Operand) -> _Getter:
    if isinstance(operand, Header):
        name = operand.name
        return lambda headers: headers.get(name)
    value = operand.value
    return lambda headers: value


def _comparison(op: str, left: Operand, right: Operand) -> Test:
    if isinstance(left, Header) and not isinstance(right, Header):
        return _header_against_constant(op, left.name, right.value, swapped=False)
    if isinstance(right, Header) and not isinstance(left, Header):
        return _header_against_constant(op, right.name, left.value, swapped=True)
    get_left, get_right = _getter(left), _getter(right)
    return lambda headers: _compare(op, get_left(headers), get_right(headers))


def _header_against_constant(op: str, name: str, constant: object, *, swapped: bool) -> Test:
    """The common case, ``region = 'eu'``: the constant's kind is known before any message."""
    kind = _kind_of(constant)
    if kind is None or (kind != _NUMBER and op in ORDERING_OPERATORS):
        return lambda headers: None
    function = _FUNCTIONS[op]
    classes = _CLASSES_OF_KIND[kind]

    if swapped:

        def test_swapped(headers: Headers) -> bool | None:
            value = headers.get(name)
            if value.__class__ in classes or _kind_of(value) == kind:
                return function(constant, value)
            return None

        return test_swapped

    def test(headers: Headers) -> bool | None:
        value = headers.get(name)
        if value.__class__ in classes or _kind_of(value) == kind:
            return function(value, constant)
        return None

    return test


def _in(condition: In) -> Test:
    name = condition.header.name
    values = frozenset(each.value for each in condition.values)
    kind = _STRING if isinstance(condition.values[0], StringLiteral) else _NUMBER
    classes = _CLASSES_OF_KIND[kind]
    negated = condition.negated

    def test(headers: Headers) -> bool | None:
        value = headers.get(name)
        if value.__class__ in classes or _kind_of(value) == kind:
            return (value in values) is not negated
        return None

    return test


def _between(condition: Between) -> Test:
    negated = condition.negated
    operand, low, high = condition.operand, condition.low, condition.high
    if (
        isinstance(operand, Header)
        and isinstance(low, NumberLiteral)
        and isinstance(high, NumberLiteral)
    ):
        name, low_value, high_value = operand.name, low.value, high.value
        classes = _CLASSES_OF_KIND[_NUMBER]

        def test_constant_bounds(headers: Headers) -> bool | None:
            value = headers.get(name)
            if value.__class__ in classes or _kind_of(value) == _NUMBER:
                number = typing.cast(float, value)
                return (low_value <= number <= high_value) is not negated
            return None

        return test_constant_bounds

    get_operand, get_low, get_high = _getter(operand), _getter(low), _getter(high)

    def test(headers: Headers) -> bool | None:
        value = get_operand(headers)
        result = _and_values(
            _compare(">=", value, get_low(headers)), _compare("<=", value, get_high(headers))
        )
        return None if result is None else result is not negated

    return test


def _and_values(left: bool | None, right: bool | None) -> bool | None:
    if left is False or right is False:
        return False
    if left is None or right is None:
        return None
    return True


def _like(condition: Like) -> Test:
    name = condition.header.name
    negated = condition.negated
    matches = _like_matcher(condition.pattern, condition.escape)

    def test(headers: Headers) -> bool | None:
        value = headers.get(name)
        if isinstance(value, str):
            return matches(value) is not negated
        return None

    return test


def _like_matcher(pattern: str, escape: str | None) -> Callable[[str], bool]:
    """A matcher for a LIKE pattern that takes time linear in the value times the pattern.

    The pattern is split at its ``%`` into fixed-length pieces (``_`` matches any one
    character). The first piece must match at the start, the last at the end, and each
    piece between is found leftmost after the one before: taking the leftmost place never
    loses a match, so there is no backtracking, unlike a translated regular expression
    whose ``.*`` runs can take polynomial time.
    """
    pieces: list[list[str]] = [[]]
    position = 0
    while position < len(pattern):
        char = pattern[position]
        if char == escape:
            pieces[-1].append(re.escape(pattern[position + 1]))
            position += 2
            continue
        if char == "%":
            pieces.append([])
        else:
            pieces[-1].append("." if char == "_" else re.escape(char))
        position += 1
    widths = [len(piece) for piece in pieces]
    compiled = [re.compile("".join(piece), re.DOTALL) for piece in pieces]
    if len(compiled) == 1:
        whole = compiled[0]
        return lambda value: whole.fullmatch(value) is not None
    first, *middle, last = compiled
    first_width, last_width = widths[0], widths[-1]

    def matches(value: str) -> bool:
        end = len(value) - last_width
        if end < first_width or first.match(value) is None:
            return False
        if last.fullmatch(value, end) is None:
            return False
        position = first_width
        for piece in middle:
            found = piece.search(value, position, end)
            if found is None:
                return False
            position = found.end()
        return True

    return matches


def _not(inner: Test) -> Test:
    def test(headers: Headers) -> bool | None:
        result = inner(headers)
        return None if result is None else not result

    return test


def _and(tests: tuple[Test, ...]) -> Test:
    def test(headers: Headers) -> bool | None:
        unknown = False
        for each in tests:
            result = each(headers)
            if result is False:
                return False
            if result is None:
                unknown = True
        return None if unknown else True

    return test


def _or(tests: tuple[Test, ...]) -> Test:
    def test(headers: Headers) -> bool | None:
        unknown = False
        for each in tests:
            result = each(headers)
            if result is True:
                return True
            if result is None:
                unknown = True
        return None if unknown else False

    return test
