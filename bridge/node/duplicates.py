"""Duplicate detection: the newest ids an address has seen (Artemis's id cache).

A message that carries a duplicate-detection id already in its address's cache is
acknowledged to its sender and dropped, so a resend after a crash or a reconnect is
delivered once. The cache keeps the newest ``size`` ids; size 0 keeps none. The node
persists each id through the store and refills the cache from it on start.

An id whose first send is still being written is *held*: a repeat that arrives then must
not be confirmed at once, because the write may fail and the first send be lost with it.
The repeat waits (``when_settled``) for the outcome the broker reports (``settle``): a
duplicate once the first send committed, a new send if it failed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from twisted.internet.defer import Deferred

from bridge.message import Message

DUPLICATE_ID_HEADER = "_TXB_DUP_ID"
"""The header a producer may set instead of the message's duplicate id (Artemis's
``_AMQ_DUPL_ID``), whatever protocol it speaks."""


def duplicate_id(message: Message) -> bytes | None:
    """The message's duplicate-detection id: its own, else its ``DUPLICATE_ID_HEADER``
    (a string, UTF-8 encoded, or bytes)."""
    if message.duplicate_id is not None:
        return message.duplicate_id
    header = message.headers.get(DUPLICATE_ID_HEADER)
    if isinstance(header, str):
        return header.encode("utf-8")
    if isinstance(header, bytes):
        return header
    return None


class DuplicateIdCache:
    """The newest ``size`` distinct ids, oldest evicted first."""

    def __init__(self, size: int, recovered: Iterable[bytes] = ()) -> None:
        if size < 0:
            raise ValueError(f"id cache size must not be negative, got {size}")
        self.size = size
        self._ids: OrderedDict[bytes, None] = OrderedDict()
        self._held: dict[bytes, list[Deferred[bool]] | None] = {}
        """Ids whose first send's write is pending, with the repeats waiting on it."""
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

    def hold(self, duplicate_id: bytes) -> None:
        """The id's first send is being written: repeats wait until it is ``settle``d."""
        if self.size:
            self._held[duplicate_id] = None

    def when_settled(self, duplicate_id: bytes) -> Deferred[bool] | None:
        """For a held id, a Deferred of its first send's outcome (True: committed, False:
        failed, and the id is free again); None when nothing is pending for it."""
        if duplicate_id not in self._held:
            return None
        waiting: Deferred[bool] = Deferred()
        waiters = self._held[duplicate_id]
        if waiters is None:
            self._held[duplicate_id] = [waiting]
        else:
            waiters.append(waiting)
        return waiting

    def settle(self, duplicate_id: bytes, committed: bool) -> None:
        """The held id's first send committed, or failed (then the id is forgotten, so its
        repeat is a new send); the repeats waiting on it learn which."""
        waiters = self._held.pop(duplicate_id, None)
        if not committed:
            self.discard(duplicate_id)
        for waiting in waiters or ():
            waiting.callback(committed)
