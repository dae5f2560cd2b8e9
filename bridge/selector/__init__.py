"""Message selectors: the filter language of consumers and bridges (``region = 'eu'``).

A subset of JMS/Artemis selectors over message headers, with SQL's three-valued logic;
docs/selectors.md is the reference. ``compile_selector`` parses the text once and returns a
``Selector`` whose ``matches`` is cheap enough for the delivery hot path. Sans-IO: text in,
a function of headers out.
"""

from __future__ import annotations

import attrs

from bridge.selector.errors import SelectorError
from bridge.selector.evaluate import Headers, Test, compile_condition
from bridge.selector.lexer import MAX_LENGTH
from bridge.selector.parser import MAX_DEPTH, parse_selector
from bridge.selector.syntax import Condition


@attrs.frozen
class Selector:
    """A compiled selector: its text, its syntax tree and its matching function.

    Two selectors are equal when their texts and trees are; the compiled function is not
    compared.
    """

    text: str
    condition: Condition
    _test: Test = attrs.field(eq=False, repr=False)

    def matches(self, headers: Headers) -> bool:
        """Whether a message with these headers is selected: only when the result is TRUE
        (a FALSE or UNKNOWN result, such as a comparison with a missing header, is not)."""
        return self._test(headers) is True


def compile_selector(text: str) -> Selector:
    """Parse and compile ``text``; raise ``SelectorError`` naming the column if it is bad."""
    condition = parse_selector(text)
    return Selector(text, condition, compile_condition(condition))


__all__ = [
    "MAX_DEPTH",
    "MAX_LENGTH",
    "Selector",
    "SelectorError",
    "compile_selector",
    "parse_selector",
]
