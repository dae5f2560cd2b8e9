"""A bounded cache whose entries expire, on an injected clock."""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Hashable
from typing import Final, Generic, Literal, TypeVar

import attrs

from security.clock import Clock

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Missing(enum.Enum):
    """The type of :data:`MISSING` (an enum member, so type checkers narrow ``is``)."""

    MISSING = "MISSING"


MISSING: Final = _Missing.MISSING
"""What :meth:`ExpiringCache.get` returns for a key it does not hold (None is a value)."""


@attrs.define
class ExpiringCache(Generic[K, V]):
    """At most ``size`` entries, each forgotten ``ttl`` seconds after it was put.

    The least recently used entry goes first when the cache is full. ``size`` 0 or
    ``ttl`` 0 turns caching off (every ``get`` misses). Not thread-safe: the
    :class:`~security.store.SecurityStore` calls it under its lock.
    """

    size: int = attrs.field(validator=attrs.validators.ge(0))
    ttl: float = attrs.field(validator=attrs.validators.ge(0))
    clock: Clock
    _entries: OrderedDict[K, tuple[float, V]] = attrs.field(init=False, factory=OrderedDict)

    @property
    def enabled(self) -> bool:
        """Whether anything is kept at all (size and ttl both above 0)."""
        return self.size > 0 and self.ttl > 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | Literal[_Missing.MISSING]:
        """The value put for ``key`` if it has not expired (and mark it recently used),
        else :data:`MISSING`; an expired entry is dropped on the way."""
        entry = self._entries.get(key)
        if entry is None:
            return MISSING
        if self.clock() >= entry[0]:
            del self._entries[key]
            return MISSING
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` for ``ttl`` seconds, evicting the least recently used entries
        beyond ``size``; does nothing when the cache is off."""
        if not self.enabled:
            return
        entries = self._entries
        entries[key] = (self.clock() + self.ttl, value)
        entries.move_to_end(key)
        while len(entries) > self.size:
            entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every entry (settings or files changed)."""
        self._entries.clear()
