"""Large-message bookkeeping: bodies written and read through the store, and how many
queues still hold each large message, so that its body goes when the last one lets go."""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO

from twisted.internet.defer import Deferred, succeed

from bridge.message import LargeBody, Message
from bridge.node.queue import Entry
from bridge.node.writes import join
from bridge.store.interfaces import IBodyWriter, IMessageStore


class LargeMessages:
    """The bodies of large messages, and the queues holding each."""

    def __init__(self, store: IMessageStore) -> None:
        self._store = store
        self.refs: dict[int, int] = {}
        """Queues still holding each large message (its body goes at zero)."""

    def new_body(self, message_id: int) -> IBodyWriter:
        """A large message's body, written chunk by chunk before it is published."""
        return self._store.new_body(message_id)

    def open_body(self, body: LargeBody) -> IO[bytes]:
        """A large message's stored body, to read chunk by chunk (``OSError`` if it
        cannot be read)."""
        return self._store.open_body(body)

    def close_body(self, file: IO[bytes]) -> None:
        """A body ``open_body`` gave is read: closed, and, if it was discarded meanwhile,
        deleted now (see ``IMessageStore.close_body``)."""
        self._store.close_body(file)

    def discard(self, message: Message) -> Deferred[None]:
        """A large message that will not be published after all, or is gone for good: its
        body file goes, off the reactor thread (see ``IMessageStore.discard_body``)."""
        if message.large is None:
            return succeed(None)
        return self._store.discard_body(message.large.path)

    def held(self, message_id: int, queues: int) -> None:
        """``queues`` more queues hold the large message ``message_id``."""
        self.refs[message_id] = self.refs.get(message_id, 0) + queues

    def release(self, entries: Iterable[Entry]) -> Deferred[None]:
        """``entries`` left their queue for good: a large message held by no other queue
        loses its body file; fires once the files are gone."""
        refs = self.refs
        discards: list[Deferred[None]] = []
        for entry in entries:
            message = entry.message
            if message.large is None:
                continue
            left = refs.get(message.id, 1) - 1
            if left > 0:
                refs[message.id] = left
            else:
                refs.pop(message.id, None)
                discards.append(self.discard(message))
        return join(discards)
