"""The store's operations as bytes, for replication to a backup's store.

A replicating live node sends each batch of operations it writes (``bridge.store.
operations``) to its backup, which applies them to its own store. They travel as one
small tagged-value format: None, integers, floats,
text, bytes and lists, each a one-byte tag and then its value, big-endian; an operation is
a list whose first item names its kind. Decoding checks every length against the bytes
left, and names what is wrong (``OperationFormatError``): the backup trusts its live node,
but a defect there must end the replication, not corrupt the copy.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from bridge.store.operations import (
    Acknowledge,
    AcknowledgeMany,
    AddMessage,
    CommitTransaction,
    CreateQueue,
    DeleteQueue,
    Operation,
    PageMessage,
    ReleasePages,
    ReserveIds,
    StoreDuplicateId,
    UpdateDeliveryCount,
)
from bridge.store.records import QueueRecord

Value = None | int | float | str | bytes | list["Value"]


class OperationFormatError(ValueError):
    """Bytes that are not a well-formed list of operations."""


_NONE, _INT, _FLOAT, _TEXT, _BYTES, _LIST = range(6)
_HEAD = struct.Struct(">BI")
_INT64 = struct.Struct(">Bq")
_FLOAT64 = struct.Struct(">Bd")
_NESTING = 8
"""The deepest list in any operation (a transaction's add with its duplicate id is 4)."""


def _encode(value: Value, parts: list[bytes]) -> None:
    if value is None:
        parts.append(bytes((_NONE,)))
    elif isinstance(value, bool):
        raise TypeError("booleans are written as integers")
    elif isinstance(value, int):
        parts.append(_INT64.pack(_INT, value))
    elif isinstance(value, float):
        parts.append(_FLOAT64.pack(_FLOAT, value))
    elif isinstance(value, str):
        data = value.encode()
        parts += (_HEAD.pack(_TEXT, len(data)), data)
    elif isinstance(value, bytes | bytearray | memoryview):
        parts += (_HEAD.pack(_BYTES, len(value)), bytes(value))
    else:
        parts.append(_HEAD.pack(_LIST, len(value)))
        for item in value:
            _encode(item, parts)


@attrs.define
class _Reader:
    data: memoryview
    at: int = 0

    def need(self, size: int, what: str) -> None:
        if self.at + size > len(self.data):
            raise OperationFormatError(
                f"truncated at byte {self.at}: {what} needs {size} bytes, "
                f"{len(self.data) - self.at} remain"
            )

    def value(self, depth: int = 0) -> Value:
        self.need(1, "a tag")
        tag = self.data[self.at]
        if tag == _NONE:
            self.at += 1
            return None
        if tag == _INT:
            self.need(_INT64.size, "an integer")
            number: int = _INT64.unpack_from(self.data, self.at)[1]
            self.at += _INT64.size
            return number
        if tag == _FLOAT:
            self.need(_FLOAT64.size, "a float")
            real: float = _FLOAT64.unpack_from(self.data, self.at)[1]
            self.at += _FLOAT64.size
            return real
        if tag not in (_TEXT, _BYTES, _LIST):
            raise OperationFormatError(f"unknown tag {tag} at byte {self.at}")
        self.need(_HEAD.size, "a length")
        size = _HEAD.unpack_from(self.data, self.at)[1]
        self.at += _HEAD.size
        if tag == _LIST:
            if depth >= _NESTING:
                raise OperationFormatError(f"lists nested deeper than {_NESTING}")
            if size > len(self.data) - self.at:  # each item takes a byte at least
                raise OperationFormatError(f"a list of {size} items in fewer bytes")
            return [self.value(depth + 1) for _ in range(size)]
        self.need(size, "text" if tag == _TEXT else "bytes")
        raw = self.data[self.at : self.at + size]
        self.at += size
        if tag == _BYTES:
            return bytes(raw)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as error:
            raise OperationFormatError(f"text that is not UTF-8 before byte {self.at}") from error


def _decode_list(data: bytes, what: str) -> list[Value]:
    reader = _Reader(memoryview(data))
    value = reader.value()
    if reader.at != len(data):
        raise OperationFormatError(f"{len(data) - reader.at} bytes after the {what}")
    if not isinstance(value, list):
        raise OperationFormatError(f"the {what} is not a list")
    return value


# -- operations ----------------------------------------------------------------------------
def _duplicate(op: StoreDuplicateId | None) -> Value:
    return None if op is None else [op.address, op.duplicate_id, op.keep]


def _as_list(op: Operation) -> list[Value]:
    if isinstance(op, AddMessage):
        return [
            "add",
            op.message_id,
            list(op.queues),
            op.data,
            op.large_size,
            op.large_path,
            _duplicate(op.duplicate),
        ]
    if isinstance(op, Acknowledge):
        return ["ack", op.queue, op.message_id]
    if isinstance(op, AcknowledgeMany):
        return ["ack-many", op.queue, list(op.message_ids)]
    if isinstance(op, UpdateDeliveryCount):
        return ["count", op.queue, op.message_id, op.count]
    if isinstance(op, StoreDuplicateId):
        return ["duplicate", op.address, op.duplicate_id, op.keep]
    if isinstance(op, CreateQueue):
        record = op.record
        return ["create-queue", record.name, record.address, record.routing, record.filter]
    if isinstance(op, DeleteQueue):
        return ["delete-queue", op.name]
    if isinstance(op, PageMessage):
        return ["page", op.message_id, op.refs, op.data]
    if isinstance(op, ReleasePages):
        return ["release-pages", list(op.message_ids)]
    if isinstance(op, ReserveIds):
        return ["reserve-ids", op.upto]
    return ["commit", [_as_list(each) for each in op.operations]]


def encode_operations(operations: Sequence[Operation]) -> bytes:
    parts: list[bytes] = []
    _encode([_as_list(op) for op in operations], parts)
    return b"".join(parts)


def decode_operations(data: bytes) -> list[Operation]:
    return [_operation(item) for item in _decode_list(data, "operations")]


def _operation(item: Value) -> Operation:
    if not isinstance(item, list) or not item or not isinstance(item[0], str):
        raise OperationFormatError("an operation is not a list that starts with its kind")
    kind, fields = item[0], item[1:]
    build = _BUILDERS.get(kind)
    if build is None:
        raise OperationFormatError(f"unknown operation {kind!r}")
    try:
        return build(*fields)
    except (TypeError, ValueError) as error:
        raise OperationFormatError(f"operation {kind!r} is malformed: {error}") from error


def _typed(value: Value, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"{what} is {type(value).__name__}")
    return value


def _ints(value: Value, what: str) -> tuple[int, ...]:
    return tuple(_typed(each, int, what) for each in _typed(value, list, what))


def _texts(value: Value, what: str) -> tuple[str, ...]:
    return tuple(_typed(each, str, what) for each in _typed(value, list, what))


def _optional(value: Value, kind: type, what: str) -> Any:
    return None if value is None else _typed(value, kind, what)


def _build_duplicate(address: Value, duplicate_id: Value, keep: Value) -> StoreDuplicateId:
    return StoreDuplicateId(
        _typed(address, str, "address"),
        _typed(duplicate_id, bytes, "duplicate id"),
        _typed(keep, int, "keep"),
    )


def _build_add(*fields: Value) -> AddMessage:
    message_id, queues, data, size, path, duplicate = fields
    return AddMessage(
        _typed(message_id, int, "message id"),
        _texts(queues, "queues"),
        _typed(data, bytes, "data"),
        _optional(size, int, "large size"),
        _optional(path, str, "large path"),
        None if duplicate is None else _build_duplicate(*_typed(duplicate, list, "duplicate")),
    )


def _build_commit(operations: Value) -> CommitTransaction:
    return CommitTransaction(
        tuple(_operation(each) for each in _typed(operations, list, "operations"))
    )


_BUILDERS: dict[str, Callable[..., Operation]] = {
    "add": _build_add,
    "ack": lambda queue, message_id: Acknowledge(
        _typed(queue, str, "queue"), _typed(message_id, int, "message id")
    ),
    "ack-many": lambda queue, ids: AcknowledgeMany(
        _typed(queue, str, "queue"), _ints(ids, "message ids")
    ),
    "count": lambda queue, message_id, count: UpdateDeliveryCount(
        _typed(queue, str, "queue"),
        _typed(message_id, int, "message id"),
        _typed(count, int, "count"),
    ),
    "duplicate": _build_duplicate,
    "create-queue": lambda name, address, routing, selector: CreateQueue(
        QueueRecord(
            _typed(name, str, "name"),
            _typed(address, str, "address"),
            _typed(routing, str, "routing"),
            _optional(selector, str, "filter"),
        )
    ),
    "delete-queue": lambda name: DeleteQueue(_typed(name, str, "name")),
    "page": lambda message_id, refs, data: PageMessage(
        _typed(message_id, int, "message id"),
        _typed(refs, int, "refs"),
        _typed(data, bytes, "data"),
    ),
    "release-pages": lambda ids: ReleasePages(_ints(ids, "message ids")),
    "reserve-ids": lambda upto: ReserveIds(_typed(upto, int, "upto")),
    "commit": _build_commit,
}
