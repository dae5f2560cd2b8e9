"""Wildcard address patterns: parsing, matching, and choosing the most specific match.

A pattern is words separated by ``.``; the word ``#`` matches zero or more words and the
word ``*`` exactly one. ``address::queue`` patterns (fully qualified queue names) match a
queue on an address; each side may use wildcards.

Most specific, precisely (docs/security.md has worked examples):

1. Any matching ``address::queue`` pattern beats every address-only pattern.
2. Patterns are compared word by word from the left: a literal word beats ``*``, ``*``
   beats the end of the pattern, and the end of the pattern beats ``#``. The first
   position where two patterns differ decides. So ``orders.eu`` beats ``orders.*``,
   ``orders.*`` beats ``orders.#``, ``orders`` beats ``orders.#`` and ``#.eu`` beats
   ``#``: at equal prefixes the longer pattern wins unless what it adds is ``#``.
3. For ``address::queue`` patterns the address parts are compared first, then the queues.
4. Two different patterns can still rank equal (``#.a.#`` and ``#.b.#`` both match
   ``a.b``); the one first in alphabetical order wins, so the choice never depends on the
   order in which settings were declared.

The winner is used alone: it is not merged with broader matches.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

import attrs

DELIMITER = "."
ANY_WORDS = "#"
SINGLE_WORD = "*"
FQQN_SEPARATOR = "::"

# Ranks of one position of a pattern, higher is more specific.
_LITERAL = 3
_SINGLE = 2
_END = 1
_ANY = 0

V = TypeVar("V")


class InvalidPattern(ValueError):
    """A match pattern that is not words separated by dots."""


Rank = tuple[int, tuple[int, ...], tuple[int, ...]]


def _word_rank(word: str) -> int:
    if word == ANY_WORDS:
        return _ANY
    if word == SINGLE_WORD:
        return _SINGLE
    return _LITERAL


def _ranks(words: tuple[str, ...]) -> tuple[int, ...]:
    # Every rank tuple ends with _END, which is below every literal and ``*`` and above
    # ``#``: comparing two tuples then compares word by word, the end included.
    return (*(_word_rank(word) for word in words), _END)


@attrs.frozen
class MatchPattern:
    """A parsed pattern: address words, queue words (for ``address::queue``) and rank."""

    text: str
    address: tuple[str, ...]
    queue: tuple[str, ...] | None
    rank: Rank = attrs.field(eq=False, repr=False)

    @property
    def is_fully_qualified(self) -> bool:
        return self.queue is not None

    @property
    def has_wildcards(self) -> bool:
        words = self.address + (self.queue or ())
        return any(word in (ANY_WORDS, SINGLE_WORD) for word in words)

    def matches(self, address: str, queue: str | None = None) -> bool:
        """Whether this pattern covers ``address`` (and ``queue``)."""
        if not words_match(self.address, split_words(address)):
            return False
        if self.queue is None:
            return True
        return queue is not None and words_match(self.queue, split_words(queue))


def split_words(name: str) -> tuple[str, ...]:
    return tuple(name.split(DELIMITER))


def _parse_words(part: str, what: str) -> tuple[str, ...]:
    if not part:
        raise InvalidPattern(f"the {what} part is empty")
    words = split_words(part)
    for word in words:
        if not word:
            raise InvalidPattern(
                f"the {what} part {part!r} has an empty word (two dots in a row, "
                "or a dot at an end)"
            )
        if word not in (ANY_WORDS, SINGLE_WORD) and (ANY_WORDS in word or SINGLE_WORD in word):
            raise InvalidPattern(
                f"the {what} part {part!r} has {word!r}: '#' and '*' must be whole words "
                "between dots"
            )
    return words


def parse_pattern(text: str) -> MatchPattern:
    """Parse ``text`` or raise :class:`InvalidPattern` saying what is wrong."""
    if not text:
        raise InvalidPattern("a match pattern must not be empty")
    if text != text.strip():
        raise InvalidPattern(f"{text!r} has leading or trailing spaces")
    if FQQN_SEPARATOR in text:
        address_part, _, queue_part = text.partition(FQQN_SEPARATOR)
        if FQQN_SEPARATOR in queue_part:
            raise InvalidPattern(f"{text!r} has more than one '::'")
        address = _parse_words(address_part, "address")
        queue: tuple[str, ...] | None = _parse_words(queue_part, "queue")
    else:
        address = _parse_words(text, "address")
        queue = None
    rank: Rank = (
        1 if queue is not None else 0,
        _ranks(address),
        _ranks(queue) if queue is not None else (),
    )
    return MatchPattern(text, address, queue, rank)


def words_match(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    """Whether pattern words (with ``#`` and ``*``) match ``words``, all of them."""
    count = len(words)
    positions = {0}
    for token in pattern:
        if token == ANY_WORDS:
            positions = set(range(min(positions), count + 1))
        elif token == SINGLE_WORD:
            positions = {j + 1 for j in positions if j < count}
        else:
            positions = {j + 1 for j in positions if j < count and words[j] == token}
        if not positions:
            return False
    return count in positions


def most_specific(patterns: Iterable[MatchPattern]) -> MatchPattern | None:
    """The most specific of ``patterns`` (see the module documentation), or None."""
    best: MatchPattern | None = None
    for pattern in patterns:
        if (
            best is None
            or pattern.rank > best.rank
            or (pattern.rank == best.rank and pattern.text < best.text)
        ):
            best = pattern
    return best


def by_specificity(patterns: Iterable[MatchPattern]) -> list[MatchPattern]:
    """``patterns`` from the most specific to the least."""
    ordered = sorted(patterns, key=lambda p: p.text)
    ordered.sort(key=lambda p: p.rank, reverse=True)
    return ordered


class _Node(Generic[V]):
    """One word position of the pattern trie."""

    __slots__ = ("any", "literal", "single", "terminal")

    def __init__(self) -> None:
        self.literal: dict[str, _Node[V]] = {}
        self.single: _Node[V] | None = None
        self.any: _Node[V] | None = None
        self.terminal: list[tuple[MatchPattern, V]] = []

    def child(self, word: str) -> _Node[V]:
        if word == ANY_WORDS:
            if self.any is None:
                self.any = _Node()
            return self.any
        if word == SINGLE_WORD:
            if self.single is None:
                self.single = _Node()
            return self.single
        node = self.literal.get(word)
        if node is None:
            node = self.literal[word] = _Node()
        return node


def _collect(root: _Node[V], words: tuple[str, ...]) -> list[tuple[MatchPattern, V]]:
    """Every entry whose address words match ``words``, each once."""
    count = len(words)
    found: list[tuple[MatchPattern, V]] = []
    # Below a ``#`` the same node can be reached at the same word by several paths (the
    # ``#`` taking more or fewer words): only there are states remembered, so each
    # terminal is reported once and the walk stays linear.
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[_Node[V], int, bool]] = [(root, 0, False)]
    while stack:
        node, i, below_any = stack.pop()
        if below_any:
            state = (id(node), i)
            if state in seen:
                continue
            seen.add(state)
        if i == count:
            if node.terminal:
                found.extend(node.terminal)
        else:
            child = node.literal.get(words[i])
            if child is not None:
                stack.append((child, i + 1, below_any))
            if node.single is not None:
                stack.append((node.single, i + 1, below_any))
        if node.any is not None:
            stack.extend((node.any, j, True) for j in range(i, count + 1))
    return found


class MatchTable(Generic[V]):
    """Values keyed by patterns; finds the value of the most specific match.

    Lookups walk a trie of pattern words, so their cost grows with the address's words
    and the wildcards on its path, not with the number of patterns.
    """

    def __init__(self, entries: Iterable[tuple[MatchPattern, V]] = ()) -> None:
        self._addresses: _Node[V] = _Node()
        self._queues: _Node[V] = _Node()
        self._has_queues = False
        self._patterns: dict[str, MatchPattern] = {}
        for pattern, value in entries:
            self.add(pattern, value)

    def __len__(self) -> int:
        return len(self._patterns)

    def add(self, pattern: MatchPattern, value: V) -> None:
        if pattern.text in self._patterns:
            raise InvalidPattern(f"{pattern.text!r} is already in the table")
        self._patterns[pattern.text] = pattern
        node = self._queues if pattern.queue is not None else self._addresses
        self._has_queues = self._has_queues or pattern.queue is not None
        for word in pattern.address:
            node = node.child(word)
        node.terminal.append((pattern, value))

    def matching(self, address: str, queue: str | None = None) -> list[tuple[MatchPattern, V]]:
        """Every entry matching, the most specific first."""
        words = split_words(address)
        found = _collect(self._addresses, words)
        if queue is not None and self._has_queues:
            found.extend(self._queue_matches(words, queue))
        order = {p.text: n for n, p in enumerate(by_specificity(p for p, _ in found))}
        found.sort(key=lambda entry: order[entry[0].text])
        return found

    def _queue_matches(self, words: tuple[str, ...], queue: str) -> list[tuple[MatchPattern, V]]:
        queue_words = split_words(queue)
        return [
            (pattern, value)
            for pattern, value in _collect(self._queues, words)
            if pattern.queue is not None and words_match(pattern.queue, queue_words)
        ]

    def lookup(self, address: str, queue: str | None = None) -> tuple[MatchPattern, V] | None:
        """The most specific entry matching ``address`` (and ``queue``), or None."""
        words = split_words(address)
        if queue is not None and self._has_queues:
            found = self._best(self._queue_matches(words, queue))
            if found is not None:
                return found
        return self._best(_collect(self._addresses, words))

    @staticmethod
    def _best(entries: Iterable[tuple[MatchPattern, V]]) -> tuple[MatchPattern, V] | None:
        best: tuple[MatchPattern, V] | None = None
        for entry in entries:
            pattern = entry[0]
            if best is None:
                best = entry
                continue
            top = best[0]
            if pattern.rank > top.rank or (pattern.rank == top.rank and pattern.text < top.text):
                best = entry
        return best
