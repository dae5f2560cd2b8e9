"""The one error a selector's text can raise: what is wrong, and at which column.

A selector comes from a consumer's request or a bridge's configuration file, so the person
who wrote it must be told exactly where it goes wrong and what would have been accepted
there; the node then refuses that one consumer or bridge and serves everyone else.
"""

from __future__ import annotations

# A selector longer than this is not repeated in full in the message; the column says where.
_SHOWN_IN_FULL = 120


class SelectorError(ValueError):
    """A selector that cannot be compiled.

    ``column`` is 1-based and counts characters (the end of the text is ``len(text) + 1``);
    ``reason`` says what was expected there. The message reads, for example,
    ``selector "region = " at column 10: expected a value after '='``. A ``ValueError``,
    so configuration loading reports it like any other bad value.
    """

    def __init__(self, text: str, column: int, reason: str) -> None:
        self.text = text
        self.column = column
        self.reason = reason
        if len(text) <= _SHOWN_IN_FULL:
            shown = f'selector "{text}"'
        else:
            shown = f"selector of {len(text)} characters"
        super().__init__(f"{shown} at column {column}: {reason}")
