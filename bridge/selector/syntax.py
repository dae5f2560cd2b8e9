"""The selector's syntax tree: frozen attrs classes, one per construct of the language.

The parser builds these and the evaluator compiles them; they are plain values (hashable,
comparable) so tests can build them, compare a parse with the expected tree, and generate
them at random. ``AND`` and ``OR`` hold all their operands in one node (``a AND b AND c`` is
one ``And`` of three), so a long chain is a wide node, never a deep one.
"""

from __future__ import annotations

import typing

import attrs

ComparisonOperator: typing.TypeAlias = typing.Literal["=", "<>", "<", ">", "<=", ">="]

# The operators that order their operands; they compare numbers only.
ORDERING_OPERATORS: frozenset[str] = frozenset({"<", ">", "<=", ">="})


@attrs.frozen
class Header:
    """A header named in the selector; its value comes from the message being matched."""

    name: str


@attrs.frozen
class StringLiteral:
    """A string constant, written ``'...'`` with ``''`` for a quote inside."""

    value: str


@attrs.frozen
class NumberLiteral:
    """A number constant: an ``int`` (``42``, ``-7``) or a finite ``float`` (``1.5``, ``2e3``)."""

    value: int | float


@attrs.frozen
class BooleanLiteral:
    """``TRUE`` or ``FALSE``."""

    value: bool


Constant: typing.TypeAlias = StringLiteral | NumberLiteral | BooleanLiteral
Operand: typing.TypeAlias = Header | Constant


@attrs.frozen
class Comparison:
    """``left <op> right``: equality for any kind of value, ordering for numbers only."""

    operator: ComparisonOperator
    left: Operand
    right: Operand


@attrs.frozen
class In:
    """``header [NOT] IN (v1, v2, ...)``: all values strings, or all numbers; at least one."""

    header: Header
    values: tuple[StringLiteral, ...] | tuple[NumberLiteral, ...] = attrs.field()
    negated: bool = False

    @values.validator
    def _check_values(self, _: object, values: tuple[object, ...]) -> None:
        if not values or len({type(value) for value in values}) != 1:
            raise ValueError(f"IN needs one or more values of one kind, not {values!r}")


@attrs.frozen
class Between:
    """``operand [NOT] BETWEEN low AND high``, both bounds included; numbers only."""

    operand: Header | NumberLiteral
    low: Header | NumberLiteral
    high: Header | NumberLiteral
    negated: bool = False


@attrs.frozen
class Like:
    """``header [NOT] LIKE 'pattern' [ESCAPE 'c']``: ``%`` any run, ``_`` any one character."""

    header: Header
    pattern: str
    escape: str | None = attrs.field(default=None)
    negated: bool = False

    @escape.validator
    def _check_escape(self, _: object, escape: str | None) -> None:
        if escape is not None and (len(escape) != 1 or ends_with_lone_escape(self.pattern, escape)):
            raise ValueError(f"bad escape {escape!r} for the LIKE pattern {self.pattern!r}")


@attrs.frozen
class IsNull:
    """``header IS [NOT] NULL``: whether the message lacks the header. Never UNKNOWN."""

    header: Header
    negated: bool = False


@attrs.frozen
class Truth:
    """A bare boolean header or ``TRUE``/``FALSE`` used as a condition (``NOT urgent``)."""

    operand: Header | BooleanLiteral


@attrs.frozen
class Not:
    """``NOT condition``: TRUE and FALSE swap, UNKNOWN stays UNKNOWN."""

    operand: Condition


@attrs.frozen
class And:
    """``c1 AND c2 AND ...`` (two or more): FALSE if any is FALSE, else UNKNOWN if any is."""

    operands: tuple[Condition, ...]


@attrs.frozen
class Or:
    """``c1 OR c2 OR ...`` (two or more): TRUE if any is TRUE, else UNKNOWN if any is."""

    operands: tuple[Condition, ...]


def ends_with_lone_escape(pattern: str, escape: str) -> bool:
    """Whether the last character of ``pattern`` is an escape character escaping nothing."""
    position = 0
    while position < len(pattern):
        position += 2 if pattern[position] == escape else 1
    return position > len(pattern)


Condition: typing.TypeAlias = Comparison | In | Between | Like | IsNull | Truth | Not | And | Or
