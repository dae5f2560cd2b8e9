"""Tokens to a syntax tree: a small recursive-descent parser.

Grammar (keywords in any case; precedence from loosest to tightest: OR, AND, NOT, then the
predicates)::

    selector  := or END
    or        := and ("OR" and)*
    and       := not ("AND" not)*
    not       := "NOT" not | "(" or ")" | predicate
    predicate := operand ( comparison-operator operand
                         | ["NOT"] "IN" "(" constant ("," constant)* ")"
                         | ["NOT"] "BETWEEN" operand "AND" operand
                         | ["NOT"] "LIKE" string ["ESCAPE" string]
                         | "IS" ["NOT"] "NULL" )?
    operand   := name | string | ["-"] number | "TRUE" | "FALSE"

A predicate with no operator is a bare header name or TRUE/FALSE, tested for truth.
Each ``(`` and each ``NOT`` is one level of nesting; more than ``MAX_DEPTH`` is refused, so
the recursion here and in the evaluator is bounded whatever the text.
"""

from __future__ import annotations

from bridge.selector.errors import SelectorError
from bridge.selector.lexer import Kind, Token, tokenize
from bridge.selector.syntax import (
    ORDERING_OPERATORS,
    And,
    Between,
    BooleanLiteral,
    Comparison,
    ComparisonOperator,
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
    ends_with_lone_escape,
)

MAX_DEPTH = 64
"""The deepest nesting of parentheses and NOTs accepted."""

_OPERATORS: dict[str | int | float, ComparisonOperator] = {
    "=": "=",
    "<>": "<>",
    "<": "<",
    ">": ">",
    "<=": "<=",
    ">=": ">=",
}


def parse_selector(text: str) -> Condition:
    """Parse ``text`` into its syntax tree, or raise ``SelectorError`` naming the column."""
    return _Parser(text).parse()


class _Parser:
    """One parse: the token list, the read position and the current nesting depth."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.position = 0
        self.depth = 0

    def parse(self) -> Condition:
        if self.peek().kind is Kind.END:
            raise self.error(self.peek(), "the selector is empty; expected a condition")
        condition = self.or_()
        token = self.peek()
        if token.kind is Kind.RIGHT:
            raise self.error(token, "unbalanced ')': there is no '(' for it to close")
        if token.kind is not Kind.END:
            raise self.error(
                token, f"expected AND, OR or the end of the selector, found {token.describe()}"
            )
        return condition

    # Helpers -----------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.position + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.peek()
        if token.kind is not Kind.END:
            self.position += 1
        return token

    def at_keyword(self, *words: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.kind is Kind.KEYWORD and token.value in words

    def error(self, token: Token, reason: str) -> SelectorError:
        return SelectorError(self.text, token.column, reason)

    def expected(self, what: str, after: Token, found: Token) -> SelectorError:
        """'expected <what> after <previous token>', naming what was found unless the end."""
        reason = f"expected {what} after {after.describe()}"
        if found.kind is not Kind.END:
            reason += f", found {found.describe()}"
        return self.error(found, reason)

    def enter(self, token: Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(
                token, f"nested too deeply: at most {MAX_DEPTH} levels of parentheses and NOT"
            )

    # Conditions --------------------------------------------------------------------------

    def or_(self) -> Condition:
        operands = [self.and_()]
        while self.at_keyword("OR"):
            self.advance()
            operands.append(self.and_())
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def and_(self) -> Condition:
        operands = [self.not_()]
        while self.at_keyword("AND"):
            self.advance()
            operands.append(self.not_())
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def not_(self) -> Condition:
        token = self.peek()
        if self.at_keyword("NOT"):
            self.advance()
            self.enter(token)
            operand = self.not_()
            self.depth -= 1
            return Not(operand)
        if token.kind is Kind.LEFT:
            self.advance()
            self.enter(token)
            inner = self.or_()
            closing = self.peek()
            if closing.kind is not Kind.RIGHT:
                raise self.error(
                    closing,
                    f"expected AND, OR or ')' to close the '(' at column {token.column},"
                    f" found {closing.describe()}",
                )
            self.advance()
            self.depth -= 1
            return inner
        return self.predicate()

    def predicate(self) -> Condition:
        left_token = self.peek()
        left = self.operand("a condition")
        token = self.peek()
        if token.kind is Kind.OPERATOR:
            self.advance()
            operator = _OPERATORS[token.value]
            right_token = self.peek()
            right = self.operand("a value")
            if operator in ORDERING_OPERATORS:
                self.check_orderable(left, left_token, f"{operator!r}")
                self.check_orderable(right, right_token, f"{operator!r}")
            return Comparison(operator, left, right)
        negated = False
        if self.at_keyword("NOT"):
            if not self.at_keyword("IN", "BETWEEN", "LIKE", ahead=1):
                raise self.expected("IN, BETWEEN or LIKE", token, self.peek(1))
            self.advance()
            negated = True
        if self.at_keyword("IN"):
            return self.in_(self.header(left, left_token, "IN"), negated)
        if self.at_keyword("BETWEEN"):
            return self.between(left, left_token, negated)
        if self.at_keyword("LIKE"):
            return self.like(self.header(left, left_token, "LIKE"), negated)
        if self.at_keyword("IS"):
            return self.is_null(self.header(left, left_token, "IS NULL"))
        if isinstance(left, Header | BooleanLiteral):
            return Truth(left)
        raise self.expected(
            "a comparison (=, <>, <, >, <=, >=, IN, BETWEEN, LIKE)", left_token, token
        )

    def in_(self, header: Header, negated: bool) -> In:
        keyword = self.advance()
        opening = self.peek()
        if opening.kind is not Kind.LEFT:
            raise self.expected("'(' and a list of values", keyword, opening)
        self.advance()
        if self.peek().kind is Kind.RIGHT:
            raise self.error(
                self.peek(), "expected at least one string or number in IN (...), found ')'"
            )
        strings: list[StringLiteral] = []
        numbers: list[NumberLiteral] = []
        while True:
            token = self.peek()
            value = self.operand("a string or number in the IN list")
            if isinstance(value, Header | BooleanLiteral):
                raise self.error(
                    token, f"expected a string or number in the IN list, found {token.describe()}"
                )
            if isinstance(value, StringLiteral):
                strings.append(value)
            else:
                numbers.append(value)
            if strings and numbers:
                raise self.error(token, "the values of IN must be all strings or all numbers")
            separator = self.advance()
            if separator.kind is Kind.RIGHT:
                break
            if separator.kind is not Kind.COMMA:
                raise self.error(
                    separator, f"expected ',' or ')' in the IN list, found {separator.describe()}"
                )
        return In(header, tuple(strings) if strings else tuple(numbers), negated)

    def between(self, left: Operand, left_token: Token, negated: bool) -> Between:
        keyword = self.advance()
        operand = self.numeric(left, left_token)
        low_token = self.peek()
        low = self.numeric(self.operand("a value"), low_token)
        and_token = self.peek()
        if not self.at_keyword("AND"):
            raise self.error(
                and_token,
                f"expected AND between the bounds of the BETWEEN at column {keyword.column},"
                f" found {and_token.describe()}",
            )
        self.advance()
        high_token = self.peek()
        high = self.numeric(self.operand("a value"), high_token)
        return Between(operand, low, high, negated)

    def like(self, header: Header, negated: bool) -> Like:
        keyword = self.advance()
        pattern = self.advance()
        if pattern.kind is not Kind.STRING:
            raise self.expected("a pattern in quotes", keyword, pattern)
        escape: str | None = None
        if self.at_keyword("ESCAPE"):
            escape_keyword = self.advance()
            escape_token = self.advance()
            if escape_token.kind is not Kind.STRING:
                raise self.expected("an escape character in quotes", escape_keyword, escape_token)
            escape = str(escape_token.value)
            if len(escape) != 1:
                raise self.error(
                    escape_token, f"ESCAPE takes one character, found {escape_token.text}"
                )
        text = str(pattern.value)
        if escape is not None and ends_with_lone_escape(text, escape):
            raise self.error(
                pattern,
                f"the pattern ends with the escape character {escape!r}; expected a character"
                " after it",
            )
        return Like(header, text, escape, negated)

    def is_null(self, header: Header) -> IsNull:
        keyword = self.advance()
        negated = self.at_keyword("NOT")
        if negated:
            self.advance()
        token = self.advance()
        if not (token.kind is Kind.KEYWORD and token.value == "NULL"):
            raise self.expected("NULL or NOT NULL", keyword, token)
        return IsNull(header, negated)

    # Operands ----------------------------------------------------------------------------

    def operand(self, what: str) -> Operand:
        """Read a header name or a constant; ``what`` names the expectation in an error."""
        token = self.peek()
        if token.kind is Kind.NAME:
            self.advance()
            return Header(str(token.value))
        if token.kind is Kind.STRING:
            self.advance()
            return StringLiteral(str(token.value))
        if token.kind is Kind.NUMBER:
            self.advance()
            return NumberLiteral(_number(token))
        if token.kind is Kind.MINUS:
            self.advance()
            number = self.peek()
            if number.kind is not Kind.NUMBER:
                raise self.expected("a number", token, number)
            self.advance()
            return NumberLiteral(-_number(number))
        if self.at_keyword("TRUE", "FALSE"):
            self.advance()
            return BooleanLiteral(token.value == "TRUE")
        if self.at_keyword("NULL"):
            raise self.error(token, "NULL is not a value; test for a missing header with IS NULL")
        if self.position == 0:
            raise self.error(token, f"expected {what}, found {token.describe()}")
        raise self.expected(what, self.peek(-1), token)

    def header(self, operand: Operand, token: Token, construct: str) -> Header:
        if not isinstance(operand, Header):
            raise self.error(
                token, f"{construct} needs a header name on its left, found {token.describe()}"
            )
        return operand

    def numeric(self, operand: Operand, token: Token) -> Header | NumberLiteral:
        if isinstance(operand, StringLiteral | BooleanLiteral):
            raise self.error(
                token,
                f"BETWEEN compares numbers; {token.describe()} is not one"
                " (strings and booleans take '=' and '<>')",
            )
        return operand

    def check_orderable(self, operand: Operand, token: Token, operator: str) -> None:
        if isinstance(operand, StringLiteral | BooleanLiteral):
            raise self.error(
                token,
                f"{operator} compares numbers; {token.describe()} is not one"
                " (strings and booleans take '=' and '<>')",
            )


def _number(token: Token) -> int | float:
    value = token.value
    assert not isinstance(value, str)  # the lexer gives NUMBER tokens a number
    return value
