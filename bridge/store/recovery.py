"""What a store gives back on open, assembled from its rows, whatever the backend."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from bridge.message import Message, MessageFormatError, decode_message
from bridge.store.errors import StoreError
from bridge.store.records import QueueRecord, Recovered, RecoveredMessage

RefRow = tuple[str, int, int, int]
"""A message reference as stored: queue, message id, delivery count, encoded size."""


def assemble(
    queues: Sequence[QueueRecord],
    refs: Sequence[RefRow],
    read: Callable[[list[int]], dict[int, Message]],
    duplicate_ids: Iterable[tuple[str, bytes]],
    *,
    load_limit: int,
    highest_message_id: int,
    after_crash: bool,
) -> Recovered:
    """``Recovered`` from the stored queues (in creation order), references (ordered by
    queue and message id), and duplicate ids (by address, oldest first): messages read in
    full (``read``) up to ``load_limit`` bytes in all (-1: no limit), the rest as stubs."""
    addresses = {queue.name: queue.address for queue in queues}
    loaded, budget = set(), load_limit
    for _, message_id, _, size in refs:
        if load_limit == -1 or size <= budget:
            loaded.add(message_id)
            budget -= size
    decoded = read(sorted(loaded))
    messages: dict[str, list[RecoveredMessage]] = {}
    for queue, message_id, delivery_count, size in refs:
        message = decoded.get(message_id)
        if message is None:
            stub = Message(message_id, addresses[queue], True, {}, b"")
            entry = RecoveredMessage(stub, delivery_count, paged_size=size)
        else:
            entry = RecoveredMessage(message, delivery_count)
        messages.setdefault(queue, []).append(entry)
    by_address: dict[str, list[bytes]] = {}
    for address, duplicate_id in duplicate_ids:
        by_address.setdefault(address, []).append(duplicate_id)
    return Recovered(
        queues=list(queues),
        messages=messages,
        duplicate_ids=by_address,
        highest_message_id=highest_message_id,
        after_crash=after_crash,
    )


def load(
    fetch_all: Callable[[str], list[Any]],
    queue_order: str,
    read: Callable[[list[int]], dict[int, Message]],
    *,
    load_limit: int,
    highest_message_id: int,
    after_crash: bool,
) -> Recovered:
    """``Recovered`` read with ``fetch_all`` (a statement's rows, on either backend): the
    queues in creation order (``queue_order`` names the column that keeps it), the message
    references and the duplicate ids, then :func:`assemble`."""
    queues = [
        QueueRecord(name=name, address=address, routing=routing, filter=filter_)
        for name, address, routing, filter_ in fetch_all(
            f"SELECT name, address, routing, filter FROM queues ORDER BY {queue_order}"
        )
    ]
    refs: list[RefRow] = fetch_all(
        "SELECT r.queue, r.message_id, r.delivery_count, length(m.data)"
        " FROM message_refs AS r JOIN messages AS m ON m.id = r.message_id"
        " ORDER BY r.queue, r.message_id"
    )
    duplicate_ids = fetch_all(
        "SELECT address, duplicate_id FROM duplicate_ids GROUP BY address, duplicate_id"
        " ORDER BY address, max(seq)"  # (an id stored twice, at its newest place)
    )
    return assemble(
        queues,
        refs,
        read,
        duplicate_ids,
        load_limit=load_limit,
        highest_message_id=highest_message_id,
        after_crash=after_crash,
    )


Attach = Callable[[str, Message, int, int], Message]
"""A large message's header with its body attached (``BodyFiles.attach``)."""


def stored_message(
    store: str, attach: Attach, message_id: int, data: bytes, large: int | None
) -> Message:
    """A stored message from its encoded ``data`` and (a large one's) body size."""
    try:
        message = decode_message(data)
    except MessageFormatError as error:
        raise StoreError(f"{store}: stored message {message_id} is corrupt: {error}") from None
    if large is None:
        return message
    return attach(store, message, message_id, large)


def missing(store: str, wanted: Iterable[int], found: dict[int, Message]) -> None:
    """``StoreError`` if a wanted message was not found."""
    absent = [i for i in wanted if i not in found]
    if absent:
        raise StoreError(f"{store}: paged messages {absent[:5]} are not stored")
