"""Duplicate detection: the newest ids an address has seen (Artemis's id cache).

A message that carries a duplicate-detection id already in its address's cache is
acknowledged to its sender and dropped, so a resend after a crash or a reconnect is
delivered once. The cache keeps the newest ``size`` ids; size 0 keeps none. The node
persists each id through the store and refills the cache from it on start.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class DuplicateIdCache:
    """The newest ``size`` distinct ids, oldest evicted first."""

    def __init__(self, size: int, recovered: Iterable[bytes] = ()) -> None:
        if size < 0:
            raise ValueError(f"id cache size must not be negative, got {size}")
        self.size = size
        self._ids: OrderedDict[bytes, None] = OrderedDict()
        for duplicate_id in recovered:
            self.add(duplicate_id)

    def __contains__(self, duplicate_id: bytes) -> bool:
        return duplicate_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def discard(self, duplicate_id: bytes) -> None:
        """Forget an id (its send was rolled back, so a resend must get through)."""
        self._ids.pop(duplicate_id, None)

    def add(self, duplicate_id: bytes) -> None:
        """Remember an id as the newest, evicting the oldest beyond the size."""
        if not self.size:
            return
        self._ids[duplicate_id] = None
        self._ids.move_to_end(duplicate_id)
        while len(self._ids) > self.size:
            self._ids.popitem(last=False)
