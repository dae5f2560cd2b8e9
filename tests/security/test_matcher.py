"""The wildcard matcher: Artemis's documented examples, properties, and specificity."""

from __future__ import annotations

import itertools
from random import Random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from security.matcher import InvalidPattern, MatchTable, parse_pattern

# From Artemis's wildcard-syntax documentation: pattern, address, matches?
ARTEMIS_EXAMPLES = [
    ("news.europe.#", "news.europe", True),
    ("news.europe.#", "news.europe.sport", True),
    ("news.europe.#", "news.europe.politics", True),
    ("news.europe.#", "news.europe.politics.regional", True),
    ("news.europe.#", "news.usa", False),
    ("news.europe.#", "news.usa.sport", False),
    ("news.europe.#", "entertainment", False),
    ("news.*", "news.europe", True),
    ("news.*", "news.usa", True),
    ("news.*", "news.europe.sport", False),
    ("news.*", "news.usa.sport", False),
    ("news.*", "news.europe.politics.regional", False),
    ("news.*.sport", "news.europe.sport", True),
    ("news.*.sport", "news.usa.sport", True),
    ("news.*.sport", "news.europe.politics", False),
    ("#", "anything.at.all", True),
    ("my", "myqueue", False),  # words, not characters
]


@pytest.mark.parametrize(("pattern", "address", "expected"), ARTEMIS_EXAMPLES)
def test_artemis_documented_examples(pattern: str, address: str, expected: bool) -> None:
    assert parse_pattern(pattern).matches(address) is expected
    table = MatchTable([(parse_pattern(pattern), pattern)])
    assert (table.lookup(address) is not None) is expected


# Which of several patterns decides, as Artemis's MatchComparator orders them: the worked
# examples of docs/security.md.
SPECIFICITY_EXAMPLES = [
    (["#", "orders.#", "orders.*", "orders.eu"], "orders.eu", "orders.eu"),
    (["#", "orders.#", "orders.*"], "orders.eu", "orders.*"),  # no '#' beats '#'
    (["#", "orders.#"], "orders.eu.retail", "orders.#"),  # both '#': the longer
    (["orders", "orders.#"], "orders", "orders"),
    (["#", "#.eu"], "orders.eu", "#.eu"),
    (["*.eu", "orders.#"], "orders.eu", "*.eu"),  # no '#' beats '#', whatever the words
    (["*.*", "a.#"], "a.b", "*.*"),
    (["#.b.c.d", "a.#"], "a.b.c.d", "#.b.c.d"),  # both '#': the longer
    (["a.#.b.c", "a.b.#"], "a.b.b.c", "a.#.b.c"),  # both '#': the longer
    (["orders.*.retail", "orders.eu.*"], "orders.eu.retail", "orders.eu.*"),  # literal first
    (["*.eu.retail", "orders.*.*"], "orders.eu.retail", "orders.*.*"),
    (["a.#", "a.#.b"], "a.x.b", "a.#.b"),
    (["#.a.#", "#.b.#"], "a.b", "#.a.#"),  # equal length: code-point order decides (ours)
    (["a.#", "#.a"], "a.a", "#.a"),  # equal length: code-point order decides (ours)
    (
        ["globalqueues.europe.#", "globalqueues.europe.orders.#"],
        "globalqueues.europe.orders.x",
        "globalqueues.europe.orders.#",
    ),
]


@pytest.mark.parametrize(("patterns", "address", "winner"), SPECIFICITY_EXAMPLES)
def test_most_specific_examples(patterns: list[str], address: str, winner: str) -> None:
    for order in (patterns, list(reversed(patterns))):
        table = MatchTable([(parse_pattern(p), p) for p in order])
        found = table.lookup(address)
        assert found is not None
        assert found[1] == winner


def test_fully_qualified_queue_beats_address_match() -> None:
    patterns = ["orders.eu", "orders.#::audit", "orders.eu::*"]
    table = MatchTable([(parse_pattern(p), p) for p in patterns])
    assert table.lookup("orders.eu", "audit") == (parse_pattern("orders.eu::*"), "orders.eu::*")
    assert table.lookup("orders.us", "audit")[1] == "orders.#::audit"  # type: ignore[index]
    assert table.lookup("orders.eu", "billing")[1] == "orders.eu::*"  # type: ignore[index]
    assert table.lookup("orders.eu")[1] == "orders.eu"  # type: ignore[index]
    assert table.lookup("orders.us") is None
    assert [p.text for p, _ in table.matching("orders.eu", "audit")] == [
        "orders.eu::*",
        "orders.#::audit",
        "orders.eu",
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("orders..eu", "empty word"),
        (".orders", "empty word"),
        ("orders.", "empty word"),
        ("orders#", "whole words"),
        ("ord*.eu", "whole words"),
        ("orders::", "queue part is empty"),
        ("::q", "address part is empty"),
        ("a::b::c", "more than one"),
        (" orders", "spaces"),
    ],
)
def test_invalid_patterns(text: str, problem: str) -> None:
    with pytest.raises(InvalidPattern, match=problem):
        parse_pattern(text)


def test_duplicate_pattern_refused() -> None:
    table = MatchTable([(parse_pattern("a.#"), 1)])
    with pytest.raises(InvalidPattern, match="already"):
        table.add(parse_pattern("a.#"), 2)


# -- properties ----------------------------------------------------------------------

WORDS = st.sampled_from(["a", "b", "c", "orders", "eu"])
TOKENS = st.one_of(WORDS, st.sampled_from(["*", "#"]))
ADDRESSES = st.lists(WORDS, min_size=1, max_size=5).map(".".join)
LITERALS = st.lists(WORDS, min_size=1, max_size=4).map(".".join)
PATTERNS = st.lists(TOKENS, min_size=1, max_size=4).map(".".join)


def reference_match(pattern: list[str], words: list[str]) -> bool:
    """A plain recursive definition of ``#`` and ``*``, to check the trie against."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(reference_match(rest, words[k:]) for k in range(len(words) + 1))
    if not words:
        return False
    return (head in ("*", words[0])) and reference_match(rest, words[1:])


@given(LITERALS, ADDRESSES)
def test_pattern_without_wildcards_matches_only_itself(pattern: str, address: str) -> None:
    table = MatchTable([(parse_pattern(pattern), pattern)])
    assert parse_pattern(pattern).matches(address) is (address == pattern)
    assert (table.lookup(address) is not None) is (address == pattern)
    assert table.lookup(pattern) is not None


@given(ADDRESSES, st.none() | LITERALS)
def test_hash_matches_everything(address: str, queue: str | None) -> None:
    assert parse_pattern("#").matches(address, queue)
    table = MatchTable([(parse_pattern("#"), "all")])
    assert table.lookup(address, queue) == (parse_pattern("#"), "all")


@given(st.lists(PATTERNS, min_size=1, max_size=8, unique=True), ADDRESSES)
def test_trie_finds_exactly_the_matching_patterns(patterns: list[str], address: str) -> None:
    table = MatchTable([(parse_pattern(p), p) for p in patterns])
    expected = {p for p in patterns if reference_match(p.split("."), address.split("."))}
    assert {value for _, value in table.matching(address)} == expected
    assert {p for p in patterns if parse_pattern(p).matches(address)} == expected


@given(st.lists(PATTERNS, min_size=1, max_size=8, unique=True), ADDRESSES, st.randoms())
def test_most_specific_is_independent_of_declaration_order(
    patterns: list[str], address: str, random: Random
) -> None:
    shuffled = list(patterns)
    random.shuffle(shuffled)
    first = MatchTable([(parse_pattern(p), p) for p in patterns]).lookup(address)
    second = MatchTable([(parse_pattern(p), p) for p in shuffled]).lookup(address)
    assert first == second


@given(st.lists(PATTERNS, min_size=1, max_size=8, unique=True), ADDRESSES)
def test_winner_is_at_least_as_specific_as_every_match(patterns: list[str], address: str) -> None:
    table = MatchTable([(parse_pattern(p), p) for p in patterns])
    found = table.lookup(address)
    matching = [p for p, _ in table.matching(address)]
    if found is None:
        assert not matching
        return
    winner = found[0]
    assert winner == min(matching, key=lambda p: p.key)
    assert matching[0] == winner
    assert all(artemis_compare(winner.text, other.text) <= 0 for other in matching)


def artemis_compare(o1: str, o2: str) -> int:
    """Artemis's HierarchicalObjectRepository.MatchComparator.compare, line for line:
    negative if ``o1`` is more specific (Java's String.length is UTF-16 units; the
    patterns here are ASCII)."""
    if "#" in o1 and "#" not in o2:
        return +1
    if "#" not in o1 and "#" in o2:
        return -1
    if "#" in o1 and "#" in o2:
        return len(o2) - len(o1)
    if "*" in o1 and "*" not in o2:
        return +1
    if "*" not in o1 and "*" in o2:
        return -1
    if "*" in o1 and "*" in o2:
        left_splits, right_splits = o1.split("."), o2.split(".")
        for i, left in enumerate(left_splits):
            if i >= len(right_splits):
                return -1
            right = right_splits[i]
            if left == "*" and right != "*":
                return +1
            if left != "*" and right == "*":
                return -1
    return len(o1) - len(o2)


@given(st.lists(PATTERNS, min_size=2, max_size=8, unique=True), ADDRESSES)
def test_order_agrees_with_artemis_comparator(patterns: list[str], address: str) -> None:
    # Every pair of patterns matching one address is ordered as Artemis orders it; where
    # Artemis says equal, code-point order decides.
    matching = [
        p for p, _ in MatchTable([(parse_pattern(p), p) for p in patterns]).matching(address)
    ]
    for earlier, later in itertools.pairwise(matching):
        artemis = artemis_compare(earlier.text, later.text)
        assert artemis < 0 or (artemis == 0 and earlier.text < later.text)


def test_lengths_count_utf16_units_as_java_does() -> None:
    # An astral character is one str character but two UTF-16 units: Artemis finds
    # "#.\U0001f600\U0001f600" (6 units) longer than "#.#.#" (5), though len() says 4.
    astral = "#.\U0001f600\U0001f600"
    table = MatchTable([(parse_pattern(p), p) for p in ("#.#.#", astral)])
    assert table.lookup("x.\U0001f600\U0001f600") == (parse_pattern(astral), astral)


@given(st.lists(PATTERNS, max_size=6, unique=True), ADDRESSES)
def test_exact_pattern_always_wins(patterns: list[str], address: str) -> None:
    entries = {p: p for p in patterns} | {address: address}
    table = MatchTable([(parse_pattern(p), v) for p, v in entries.items()])
    assert table.lookup(address) == (parse_pattern(address), address)


QUEUE_PATTERNS = st.tuples(PATTERNS, st.none() | PATTERNS).map(
    lambda parts: parts[0] if parts[1] is None else f"{parts[0]}::{parts[1]}"
)


@given(st.lists(QUEUE_PATTERNS, min_size=1, max_size=8, unique=True), ADDRESSES, LITERALS)
def test_queue_patterns_match_like_the_reference(
    patterns: list[str], address: str, queue: str
) -> None:
    table = MatchTable([(parse_pattern(p), p) for p in patterns])

    def reference(pattern: str) -> bool:
        address_part, _, queue_part = pattern.partition("::")
        if not reference_match(address_part.split("."), address.split(".")):
            return False
        return not queue_part or reference_match(queue_part.split("."), queue.split("."))

    expected = {p for p in patterns if reference(p)}
    assert {value for _, value in table.matching(address, queue)} == expected
    found = table.lookup(address, queue)
    fully_qualified = {p for p in expected if "::" in p}
    if found is None:
        assert not expected
    elif fully_qualified:
        assert found[1] in fully_qualified
    reversed_table = MatchTable([(parse_pattern(p), p) for p in reversed(patterns)])
    assert reversed_table.lookup(address, queue) == found
