"""Wildcard address patterns: parsing, matching, and choosing the most specific match.

A pattern is words separated by ``.``; the word ``#`` matches zero or more words and the
word ``*`` exactly one. ``address::queue`` patterns (fully qualified queue names) match a
queue on an address; each side may use wildcards (an extension: Artemis matches fully
qualified names literally).

Most specific, as Artemis's ``HierarchicalObjectRepository.MatchComparator`` orders
security settings (docs/security.md has worked examples):

1. A pattern without ``#`` beats one with ``#``.
2. Between two patterns with ``#``, the longer text wins (nothing else is compared).
3. Between two patterns without ``#``: one without ``*`` beats one with ``*``; between
   two with ``*``, the words are compared from the left and at the first position where
   one has ``*`` and the other a literal word, the literal wins.
4. Ours, not Artemis's: any matching ``address::queue`` pattern beats every address-only
   pattern; between two of them the address parts are compared by rules 1 to 3, then the
   queue parts.
5. Ours: where Artemis leaves two patterns equal (``#.a`` and ``a.#`` on ``a.a`` have the
   same length, and Artemis's order then depends on a hash map), the text first in
   code-point order wins, so the choice never depends on the order of declaration.

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

V = TypeVar("V")


class InvalidPattern(ValueError):
    """A match pattern that is not words separated by dots."""


# Smaller sorts first, that is more specific: (has '#', minus the length if it has '#',
# has '*', whether each word is '*', the length). The lengths are of the text.
PartKey = tuple[bool, int, bool, tuple[bool, ...], int]
SpecificityKey = tuple[bool, PartKey, PartKey | None, str]


def _java_length(text: str) -> int:
    # Artemis compares String.length(), which counts UTF-16 code units.
    return len(text.encode("utf-16-le")) // 2


def _part_key(words: tuple[str, ...]) -> PartKey:
    """Artemis's order for one pattern (or one side of ``address::queue``)."""
    length = _java_length(DELIMITER.join(words))
    if ANY_WORDS in words:
        return (True, -length, False, (), length)  # rules 1 and 2: longer first
    stars = tuple(word == SINGLE_WORD for word in words)
    return (False, 0, any(stars), stars, length)  # rule 3: a literal before '*'


def specificity_key(
    address: tuple[str, ...], queue: tuple[str, ...] | None, text: str
) -> SpecificityKey:
    """The sort key of a pattern: of two patterns matching one name, the one with the
    smaller key is the more specific (the module documentation has the rules)."""
    return (
        queue is None,
        _part_key(address),
        _part_key(queue) if queue is not None else None,
        text,
    )


@attrs.frozen
class MatchPattern:
    """A parsed pattern: address words, queue words (for ``address::queue``) and the
    key that orders patterns from the most specific."""

    text: str
    address: tuple[str, ...]
    queue: tuple[str, ...] | None
    key: SpecificityKey = attrs.field(eq=False, repr=False)

    def matches(self, address: str, queue: str | None = None) -> bool:
        """Whether this pattern covers ``address`` (and ``queue``)."""
        if not words_match(self.address, split_words(address)):
            return False
        if self.queue is None:
            return True
        return queue is not None and words_match(self.queue, split_words(queue))


def split_words(name: str) -> tuple[str, ...]:
    """The words of an address, queue or pattern: its parts between dots."""
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
    return MatchPattern(text, address, queue, specificity_key(address, queue, text))


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


def _specificity(entry: tuple[MatchPattern, object]) -> SpecificityKey:
    return entry[0].key


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
        """Add ``value`` under ``pattern``; InvalidPattern if the pattern is already in."""
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
        found.sort(key=_specificity)
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
            found = self._queue_matches(words, queue)
            if found:
                return min(found, key=_specificity)
        found = _collect(self._addresses, words)
        return min(found, key=_specificity) if found else None
