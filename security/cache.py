"""A bounded cache whose entries expire, on an injected clock."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Final, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Clock = Callable[[], float]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


class ExpiringCache(Generic[K, V]):
    """At most ``size`` entries, each forgotten ``ttl`` seconds after it was put.

    The least recently used entry goes first when the cache is full. ``size`` 0 or
    ``ttl`` 0 turns caching off (every ``get`` misses).
    """

    def __init__(self, size: int, ttl: float, clock: Clock) -> None:
        if size < 0 or ttl < 0:
            raise ValueError("cache size and ttl must not be negative")
        self.size = size
        self.ttl = ttl
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.size > 0 and self.ttl > 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | _Missing:
        entry = self._entries.get(key)
        if entry is None:
            return MISSING
        if self._clock() >= entry[0]:
            del self._entries[key]
            return MISSING
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: K, value: V) -> None:
        if not self.enabled:
            return
        entries = self._entries
        entries[key] = (self._clock() + self.ttl, value)
        entries.move_to_end(key)
        while len(entries) > self.size:
            entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()
