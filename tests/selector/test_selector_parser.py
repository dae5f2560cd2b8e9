"""The trees the parser builds: precedence, grouping, flattening, each construct."""

from __future__ import annotations

import pytest

from bridge.selector import parse_selector
from bridge.selector.syntax import (
    And,
    Between,
    BooleanLiteral,
    Comparison,
    Header,
    In,
    IsNull,
    Like,
    Not,
    NumberLiteral,
    Or,
    StringLiteral,
    Truth,
)

A, B, C = Header("a"), Header("b"), Header("c")
A1 = Comparison("=", A, NumberLiteral(1))
B2 = Comparison("=", B, NumberLiteral(2))
C3 = Comparison("=", C, NumberLiteral(3))

TREES = [
    ("a = 1", A1),
    ("a = 1 AND b = 2 OR c = 3", Or((And((A1, B2)), C3))),
    ("a = 1 OR b = 2 AND c = 3", Or((A1, And((B2, C3))))),
    ("(a = 1 OR b = 2) AND c = 3", And((Or((A1, B2)), C3))),
    ("a = 1 AND b = 2 AND c = 3", And((A1, B2, C3))),
    ("a = 1 OR b = 2 OR c = 3", Or((A1, B2, C3))),
    ("(a = 1 AND b = 2) AND c = 3", And((And((A1, B2)), C3))),
    ("a = 1 AND (b = 2 AND c = 3)", And((A1, And((B2, C3))))),
    ("NOT a = 1 AND b = 2", And((Not(A1), B2))),
    ("NOT (a = 1 AND b = 2)", Not(And((A1, B2)))),
    ("NOT NOT a = 1", Not(Not(A1))),
    ("NOT a = 1 OR NOT b = 2", Or((Not(A1), Not(B2)))),
    ("((a = 1))", A1),
    ("a", Truth(A)),
    ("NOT a", Not(Truth(A))),
    ("TRUE", Truth(BooleanLiteral(True))),
    ("false OR a", Or((Truth(BooleanLiteral(False)), Truth(A)))),
    ("a <> 'x'", Comparison("<>", A, StringLiteral("x"))),
    ("a < -1.5", Comparison("<", A, NumberLiteral(-1.5))),
    ("-1 >= a", Comparison(">=", NumberLiteral(-1), A)),
    ("a <= b", Comparison("<=", A, B)),
    ("a > 2E3", Comparison(">", A, NumberLiteral(2000.0))),
    ("a = TRUE", Comparison("=", A, BooleanLiteral(True))),
    ("a = 'it''s'", Comparison("=", A, StringLiteral("it's"))),
    ("a IN ('x')", In(A, (StringLiteral("x"),))),
    ("a NOT IN (1, -2.5)", In(A, (NumberLiteral(1), NumberLiteral(-2.5)), negated=True)),
    ("a BETWEEN 1 AND b", Between(A, NumberLiteral(1), B)),
    ("2 NOT BETWEEN a AND 3", Between(NumberLiteral(2), A, NumberLiteral(3), negated=True)),
    (
        "a BETWEEN 1 AND 2 AND b = 2",
        And((Between(A, NumberLiteral(1), NumberLiteral(2)), B2)),
    ),
    ("a LIKE 'x%'", Like(A, "x%")),
    ("a NOT LIKE 'x!%' ESCAPE '!'", Like(A, "x!%", "!", negated=True)),
    ("a IS NULL", IsNull(A)),
    ("a IS NOT NULL", IsNull(A, negated=True)),
    ("NOT a IS NULL", Not(IsNull(A))),
]


@pytest.mark.parametrize(("text", "tree"), TREES)
def test_tree(text: str, tree: object):
    assert parse_selector(text) == tree


def test_integers_and_floats_stay_apart():
    integer = parse_selector("a = 10")
    floating = parse_selector("a = 10.0")
    assert isinstance(integer, Comparison)
    assert isinstance(floating, Comparison)
    assert integer.right == NumberLiteral(10)
    assert floating.right == NumberLiteral(10.0)
    assert type(integer.right.value) is int
    assert type(floating.right.value) is float


def test_a_long_chain_is_one_wide_node():
    tree = parse_selector(" AND ".join(f"h{n} = {n}" for n in range(200)))
    assert isinstance(tree, And)
    assert len(tree.operands) == 200


@pytest.mark.parametrize(
    "build",
    [
        lambda: In(A, ()),
        lambda: In(A, (StringLiteral("x"), NumberLiteral(1))),
        lambda: Like(A, "x!", "!"),
        lambda: Like(A, "x", "!!"),
    ],
    ids=["empty IN", "mixed IN", "lone escape", "long escape"],
)
def test_trees_the_parser_would_refuse_cannot_be_built(build):
    with pytest.raises(ValueError):
        build()
