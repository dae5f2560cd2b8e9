"""Lease tables on a fresh PostgreSQL schema per test (tests.postgresql), each closed when
the test ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bridge.ha.lease import LeaseTable
from tests.postgresql import schema_url

QUERY_TIMEOUT = 5.0
"""Generous: a loaded CI box must not fail a statement the test expects to succeed."""


@pytest.fixture
def lease_url(pg_schema: str) -> str:
    return schema_url(pg_schema)


@pytest.fixture
def tables(lease_url: str) -> Iterator[Callable[..., LeaseTable]]:
    """Makes lease tables (one connection each, as one node has) on the test's schema."""
    made: list[LeaseTable] = []

    def make(url: str | None = None, **options: Any) -> LeaseTable:
        """A table on ``url`` (default: the test's schema), with ``LeaseTable``'s options."""
        table = LeaseTable(url or lease_url, QUERY_TIMEOUT, **options)
        made.append(table)
        return table

    yield make
    for table in made:
        table.close()
