"""The core protocol's packet codec, sans-IO: a packet to (frame type, payload) and back.

Every packet's payload is its fields in declaration order, big-endian, each in one of a few
wire forms (``_Wire`` below); docs/protocol.md lists them per packet. One table, ``LAYOUTS``,
describes every packet, and one generic encoder and decoder walk it: that is the format's
single definition, and where every precise error comes from.

The hot-path packets (SEND, SEND_CONFIRMED, DELIVER, CONSUMER_CREDITS, ACK) also have
hand-written codecs that do the whole fixed part with one precompiled ``struct.Struct``
call and decode the nested message from a ``memoryview`` slice (the body is copied once,
into the decoded message; encoding copies it once, joining the packet's fields and the
parts of ``encode_message_parts`` into the payload). They handle only well-formed input:
on anything else they hand the packet to the generic codec, which finds what is wrong and
raises. Tests check that the two agree on every input.

Decoding checks every length against the bytes that remain before it slices, so a hostile
payload costs at most its own size, and the payload must end exactly after the last field.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Callable
from enum import IntEnum
from typing import Any

import attrs

from bridge.message import (
    Message,
    MessageFormatError,
    decode_message,
    encode_message,
    encode_message_parts,
)
from bridge.protocol.packets import (
    PACKET_CLASSES,
    Ack,
    AddressFullPolicy,
    AddressInfo,
    ClaimedDelivery,
    CloseConsumer,
    ClusterConnect,
    Connect,
    Connected,
    ConsumerCredits,
    CreateConsumer,
    CreateQueue,
    DeleteQueue,
    Deliver,
    DeliverLargeBegin,
    DeliverLargeChunk,
    DeliverMany,
    ErrorCode,
    Failed,
    Nack,
    NodeAnnounce,
    Ok,
    Packet,
    PacketType,
    ProducerCredits,
    QueryAddress,
    ReattachConsumer,
    Reattached,
    Redirect,
    ReplicaAck,
    ReplicaAnnounce,
    ReplicaBatch,
    ReplicaBody,
    ReplicaDiscard,
    ReplicaSyncBegin,
    ReplicaSynced,
    ReplicaSyncEnd,
    ReplicaSyncFile,
    Routing,
    Send,
    SendConfirmed,
    SendFailed,
    SendLargeBegin,
    SendLargeChunk,
    SendMany,
    Topology,
    TopologyMember,
    TxBegin,
    TxCommit,
    TxRollback,
    VoteReply,
    VoteRequest,
)


class PacketFormatError(ValueError):
    """A packet cannot be encoded, or a payload is not a well-formed packet.

    ``packet`` names the packet type (or the unknown frame type), ``field`` the field at
    fault (None when the fault is not in one field, such as trailing bytes), ``offset`` the
    payload offset where that field starts (None when encoding).
    """

    def __init__(self, packet: str, field: str | None, offset: int | None, reason: str) -> None:
        where = packet if field is None else f"{packet}.{field}"
        if offset is not None:
            where += f" at offset {offset}"
        super().__init__(f"{where}: {reason}")
        self.packet = packet
        self.field = field
        self.offset = offset
        self.reason = reason


class _Malformed(Exception):
    """A field's bytes are wrong; the layout adds the packet, field and offset."""


class _Unencodable(Exception):
    """A field's value cannot be encoded; the layout adds the packet and field."""


# Wire forms of fields. Each appends its encoding to a parts list, and decodes from a
# memoryview at an offset, returning (value, offset after it).


class _Wire(ABC):
    """One wire form; ``name`` is how docs/protocol.md writes it."""

    name: str

    @abstractmethod
    def encode(self, value: Any, parts: list[bytes | memoryview]) -> None:
        """Append the encoding of ``value``; raise _Unencodable if it has none."""

    @abstractmethod
    def decode(self, view: memoryview, at: int) -> tuple[Any, int]:
        """The value encoded at ``at`` and the offset after it; _Malformed if none is."""


def _unpack(view: memoryview, at: int, layout: struct.Struct) -> Any:
    if at + layout.size > len(view):
        raise _Malformed(f"truncated: {layout.size} bytes needed, {len(view) - at} remain")
    return layout.unpack_from(view, at)[0]


_BE_U8 = struct.Struct(">B")
_BE_U16 = struct.Struct(">H")
_BE_U32 = struct.Struct(">I")
_BE_I32 = struct.Struct(">i")
_BE_U64 = struct.Struct(">Q")
_BE_I64 = struct.Struct(">q")


class _Int(_Wire):
    """A fixed-width integer, refused outside ``minimum..maximum``."""

    def __init__(self, name: str, layout: struct.Struct, minimum: int, maximum: int) -> None:
        self.name = name
        self._layout = layout
        self._minimum = minimum
        self._maximum = maximum

    def encode(self, value: Any, parts: list[bytes | memoryview]) -> None:
        if type(value) is not int or not self._minimum <= value <= self._maximum:
            raise _Unencodable(f"{value!r} is not an integer in {self._range()}")
        parts.append(self._layout.pack(value))

    def decode(self, view: memoryview, at: int) -> tuple[int, int]:
        value: int = _unpack(view, at, self._layout)
        if value < self._minimum:
            raise _Malformed(f"{value} is not in {self._range()}")
        return value, at + self._layout.size

    def _range(self) -> str:
        return f"{self._minimum}..{self._maximum}"


class _Bool(_Wire):
    """One byte, 0 or 1."""

    name = "bool"

    def encode(self, value: Any, parts: list[bytes | memoryview]) -> None:
        if type(value) is not bool:
            raise _Unencodable(f"{value!r} is not a bool")
        parts.append(b"\x01" if value else b"\x00")

    def decode(self, view: memoryview, at: int) -> tuple[bool, int]:
        flag = _flag(view, at)
        return flag == 1, at + 1


def _flag(view: memoryview, at: int) -> int:
    if at >= len(view):
        raise _Malformed("truncated: 1 byte needed, 0 remain")
    flag = view[at]
    if flag > 1:
        raise _Malformed(f"flag byte is {flag}, not 0 or 1")
    return flag


class _Enum(_Wire):
    """An IntEnum member (of ``only``, if given) as a fixed-width integer; other values
    are refused."""

    def __init__(
        self,
        name: str,
        layout: struct.Struct,
        enum: type[IntEnum],
        only: tuple[IntEnum, ...] = (),
    ) -> None:
        self.name = name
        self._layout = layout
        self._enum = enum
        self._members = {member.value: member for member in (only or tuple(enum))}

    def encode(self, value: Any, parts: list[bytes | memoryview]) -> None:
        if not isinstance(value, self._enum) or value.value not in self._members:
            raise _Unencodable(f"{value!r} is not a {self._enum.__name__} of {self.name}")
        parts.append(self._layout.pack(value))

    def decode(self, view: memoryview, at: int) -> tuple[IntEnum, int]:
        value = _unpack(view, at, self._layout)
        member = self._members.get(value)
        if member is None:
            raise _Malformed(f"{value} is not a valid {self._enum.__name__}")
        return member, at + self._layout.size


class _Optional(_Wire):
    """A presence byte (0 or 1), then the value if 1."""

    def __init__(self, inner: _Wire) -> None:
        self.name = f"optional {inner.name}"
        self._inner = inner

    def encode(self, value: Any, parts: list[bytes | memoryview]) -> None:
        if value is None:
            parts.append(b"\x00")
        else:
            parts.append(b"\x01")
            self._inner.encode(value, parts)

    def decode(self, view: memoryview, at: int) -> tuple[Any, int]:
        if _flag(view, at):
            return self._inner.decode(view, at + 1)
        return None, at + 1


class _Sized(_Wire):
    """A length prefix, then that many bytes; subclasses say what the bytes hold."""

    def __init__(self, name: str, prefix: struct.Struct) -> None:
        self.name = name
        self._prefix = prefix
        self._limit = (1 << (8 * prefix.size)) - 1

    def _append(self, data: bytes | memoryview, parts: list[bytes | memoryview]) -> None:
        if len(data) > self._limit:
            raise _Unencodable(f"{len(data)} bytes, at most {self._limit} fit")
        parts += (self._prefix.pack(len(data)), data)

    def _slice(self, view: memoryview, at: int) -> tuple[memoryview, int]:
        length: int = _unpack(view, at, self._prefix)
        start = at + self._prefix.size
        end = start + length
        if end > len(view):
            raise _Malformed(f"truncated: {length} bytes declared, {len(view) - start} remain")
        return view[start:end], end


class _Text(_Sized):
    """A length-prefixed UTF-8 string."""

    def encode(self, value: Any, parts: list[bytes | memoryview]) -> None:
        if not isinstance(value, str):
            raise _Unencodable(f"{value!r} is not a str")
        try:
            data = value.encode()
        except UnicodeEncodeError as error:
            raise _Unencodable(f"cannot be encoded as UTF-8: {error}") from None
        self._append(data, parts)

    def decode(self, view: memoryview, at: int) -> tuple[str, int]:
        data, end = self._slice(view, at)
        try:
            return str(data, "utf-8"), end
        except UnicodeDecodeError as error:
            raise _Malformed(f"not UTF-8: {error}") from None


class _Data(_Sized):
    """Length-prefixed bytes."""

    def encode(self, value: Any, parts: list[bytes | memoryview]) -> None:
        if not isinstance(value, bytes):
            raise _Unencodable(f"{type(value).__name__} is not bytes")
        self._append(value, parts)

    def decode(self, view: memoryview, at: int) -> tuple[bytes, int]:
        data, end = self._slice(view, at)
        return data.tobytes(), end


class _Chunk(_Sized):
    """Length-prefixed bytes decoded as a view of the payload, not a copy: a large body's
    chunk (up to 1 MiB), which its receiver writes to a file at once. Copying it out
    cost a bridge's target about 7% of its CPU on 10 MiB bodies (docs/benchmarks.md)."""

    def encode(self, value: Any, parts: list[bytes | memoryview]) -> None:
        if not isinstance(value, bytes | memoryview):
            raise _Unencodable(f"{type(value).__name__} is not bytes")
        self._append(value, parts)

    def decode(self, view: memoryview, at: int) -> tuple[memoryview, int]:
        return self._slice(view, at)


class _MessageWire(_Sized):
    """A length-prefixed message in ``bridge.message``'s encoding; with ``header_only``
    its body must be empty (a large message's body travels in chunks)."""

    def __init__(self, name: str, *, header_only: bool) -> None:
        super().__init__(name, _BE_U32)
        self._header_only = header_only

    def encode(self, value: Any, parts: list[bytes | memoryview]) -> None:
        if not isinstance(value, Message):
            raise _Unencodable(f"{type(value).__name__} is not a Message")
        if self._header_only and value.body:
            raise _Unencodable(_BODY_NOT_EMPTY)
        try:
            data = encode_message(value)
        except MessageFormatError as error:
            raise _Unencodable(f"cannot encode the message: {error}") from None
        self._append(data, parts)

    def decode(self, view: memoryview, at: int) -> tuple[Message, int]:
        data, end = self._slice(view, at)
        try:
            message = decode_message(data)
        except MessageFormatError as error:
            raise _Malformed(f"malformed message (offsets within it): {error}") from None
        if self._header_only and message.body:
            raise _Malformed(_BODY_NOT_EMPTY)
        return message, end


_BODY_NOT_EMPTY = "a large message's body must be empty here: it follows in chunks"


class _Messages(_Wire):
    """A u32 count, at least 1, then that many ``message`` fields: a batch's messages, as
    a tuple. The count is checked against the bytes left (each message takes at least its
    4-byte length), so a hostile count allocates nothing."""

    name = "u32 count, then count x message"

    def encode(self, value: Any, parts: list[bytes | memoryview]) -> None:
        if not isinstance(value, tuple) or not value:
            raise _Unencodable("expected a non-empty tuple of messages")
        if len(value) > 0xFFFF_FFFF:
            raise _Unencodable(f"{len(value)} messages, at most {0xFFFF_FFFF} fit")
        parts.append(_BE_U32.pack(len(value)))
        for message in value:
            MESSAGE.encode(message, parts)

    def decode(self, view: memoryview, at: int) -> tuple[tuple[Message, ...], int]:
        count: int = _unpack(view, at, _BE_U32)
        at += _BE_U32.size
        if count == 0:
            raise _Malformed("a batch holds at least one message")
        if count * _BE_U32.size > len(view) - at:
            raise _Malformed(f"truncated: {count} messages declared, {len(view) - at} bytes remain")
        messages = []
        size = len(view)
        unpack = _BE_U32.unpack_from
        for _ in range(count):
            # ``MESSAGE.decode`` written out for a well-formed message (three calls fewer
            # per message of a batch); anything else goes to it, which names the fault.
            start = at + 4
            if start <= size:
                end = start + unpack(view, at)[0]
                if end <= size:
                    try:
                        message = decode_message(view[start:end])
                    except MessageFormatError:
                        pass
                    else:
                        messages.append(message)
                        at = end
                        continue
            message, at = MESSAGE.decode(view, at)
            messages.append(message)
        return tuple(messages), at


class _List(_Wire):
    """A u16 count, then that many ``inner`` fields, as a tuple. The count is checked
    against the bytes left (each item takes at least ``least`` bytes), so a hostile count
    allocates nothing."""

    def __init__(self, inner: _Wire, least: int) -> None:
        self.name = f"u16 count, then count x {inner.name}"
        self._inner = inner
        self._least = least

    def encode(self, value: Any, parts: list[bytes | memoryview]) -> None:
        if not isinstance(value, tuple):
            raise _Unencodable(f"{type(value).__name__} is not a tuple")
        if len(value) > 0xFFFF:
            raise _Unencodable(f"{len(value)} items, at most {0xFFFF} fit")
        parts.append(_BE_U16.pack(len(value)))
        for item in value:
            self._inner.encode(item, parts)

    def decode(self, view: memoryview, at: int) -> tuple[tuple[Any, ...], int]:
        count: int = _unpack(view, at, _BE_U16)
        at += _BE_U16.size
        if count * self._least > len(view) - at:
            raise _Malformed(f"truncated: {count} items declared, {len(view) - at} bytes remain")
        items = []
        for _ in range(count):
            item, at = self._inner.decode(view, at)
            items.append(item)
        return tuple(items), at


class _Record(_Wire):
    """A nested attrs value: its fields in order, each in its own wire form."""

    def __init__(self, name: str, cls: type[Any], fields: tuple[tuple[str, _Wire], ...]) -> None:
        self.name = name
        self._cls = cls
        self._fields = fields

    def encode(self, value: Any, parts: list[bytes | memoryview]) -> None:
        if not isinstance(value, self._cls):
            raise _Unencodable(f"{type(value).__name__} is not a {self._cls.__name__}")
        for name, wire in self._fields:
            try:
                wire.encode(getattr(value, name), parts)
            except _Unencodable as error:
                raise _Unencodable(f"{name}: {error}") from None

    def decode(self, view: memoryview, at: int) -> tuple[Any, int]:
        values = []
        for name, wire in self._fields:
            try:
                value, at = wire.decode(view, at)
            except _Malformed as error:
                raise _Malformed(f"{name}: {error}") from None
            values.append(value)
        return self._cls(*values), at


U16 = _Int("u16", _BE_U16, 0, 0xFFFF)
U32 = _Int("u32", _BE_U32, 0, 0xFFFF_FFFF)
U64 = _Int("u64", _BE_U64, 0, 0xFFFF_FFFF_FFFF_FFFF)
WINDOW = _Int("i32 window", _BE_I32, -1, 0x7FFF_FFFF)
SIZE = _Int("i64 size", _BE_I64, -1, 0x7FFF_FFFF_FFFF_FFFF)
BOOL = _Bool()
STR = _Text("str16", _BE_U16)
TEXT = _Text("str32", _BE_U32)
DATA = _Data("bytes32", _BE_U32)
CHUNK = _Chunk("bytes32", _BE_U32)
MESSAGE = _MessageWire("message", header_only=False)
MESSAGE_HEADER = _MessageWire("message header", header_only=True)
CODE = _Enum("error code u16", _BE_U16, ErrorCode)
ROUTING = _Enum("routing u8", _BE_U8, Routing)
QUEUE_ROUTING = _Enum("queue routing u8", _BE_U8, Routing, (Routing.ANYCAST, Routing.MULTICAST))
POLICY = _Enum("policy u8", _BE_U8, AddressFullPolicy)
MESSAGES = _Messages()
NAME_LIST = _List(STR, _BE_U16.size)
MEMBER = _Record(
    "member",
    TopologyMember,
    (
        ("node_id", STR),
        ("host_id", STR),
        ("urls", NAME_LIST),
        ("serves", NAME_LIST),
        ("failover", NAME_LIST),
    ),
)
MEMBERS = _List(MEMBER, 5 * _BE_U16.size)
IDS = _List(U64, _BE_U64.size)
CLAIMED = _List(
    _Record("claimed", ClaimedDelivery, (("message_id", U64), ("delivery_id", U64))),
    2 * _BE_U64.size,
)

CONNECT_FIELDS: tuple[tuple[str, _Wire], ...] = (
    ("protocol_version", U16),
    ("client_id", STR),
    ("user", _Optional(STR)),
    ("password", _Optional(STR)),
    ("confirmation_window_size", U32),
    ("max_frame_size", U32),
)
"""CONNECT's fields, which CLUSTER_CONNECT begins with."""

CREATE_CONSUMER_FIELDS: tuple[tuple[str, _Wire], ...] = (
    ("request_id", U64),
    ("consumer_id", U32),
    ("queue", STR),
    ("filter", _Optional(STR)),
    ("browse_only", BOOL),
    ("window_size", WINDOW),
)
"""CREATE_CONSUMER's fields, which REATTACH_CONSUMER begins with."""


@attrs.frozen
class Layout:
    """A packet class and its fields in wire order: the generic codec for that packet."""

    cls: type[Packet]
    fields: tuple[tuple[str, _Wire], ...]

    def encode(self, packet: Packet) -> bytes:
        """The payload of ``packet``; PacketFormatError names a field that cannot be encoded."""
        parts: list[bytes | memoryview] = []
        for name, wire in self.fields:
            try:
                wire.encode(getattr(packet, name), parts)
            except _Unencodable as error:
                raise PacketFormatError(self.cls.TYPE.name, name, None, str(error)) from None
        return b"".join(parts)

    def decode(self, payload: bytes) -> Packet:
        """The packet ``payload`` holds; PacketFormatError says which field is malformed."""
        view = memoryview(payload)
        values = []
        at = 0
        for name, wire in self.fields:
            try:
                value, end = wire.decode(view, at)
            except _Malformed as error:
                raise PacketFormatError(self.cls.TYPE.name, name, at, str(error)) from None
            values.append(value)
            at = end
        if at != len(view):
            raise PacketFormatError(
                self.cls.TYPE.name,
                None,
                at,
                f"{len(view) - at} trailing byte(s) after the last field",
            )
        return self.cls(*values)


def _layout(cls: type[Packet], *fields: tuple[str, _Wire]) -> Layout:
    return Layout(cls, fields)


LAYOUTS: dict[type[Packet], Layout] = {
    layout.cls: layout
    for layout in (
        _layout(Connect, *CONNECT_FIELDS),
        _layout(
            Connected,
            ("node_name", STR),
            ("node_id", STR),
            ("protocol_version", U16),
            ("producer_window_size", WINDOW),
            ("max_frame_size", U32),
        ),
        _layout(Ok, ("request_id", U64)),
        _layout(Failed, ("request_id", U64), ("code", CODE), ("message", TEXT)),
        _layout(
            CreateQueue,
            ("request_id", U64),
            ("name", STR),
            ("address", STR),
            ("routing", QUEUE_ROUTING),
            ("durable", BOOL),
            ("filter", _Optional(STR)),
        ),
        _layout(DeleteQueue, ("request_id", U64), ("name", STR)),
        _layout(Send, ("sequence", U64), ("tx_id", _Optional(U64)), ("message", MESSAGE)),
        _layout(SendConfirmed, ("up_to_sequence", U64)),
        _layout(SendFailed, ("sequence", U64), ("code", CODE), ("message", TEXT)),
        _layout(ProducerCredits, ("address", STR), ("credits", U32)),
        _layout(
            SendLargeBegin,
            ("sequence", U64),
            ("tx_id", _Optional(U64)),
            ("message", MESSAGE_HEADER),
            ("total_size", U64),
        ),
        _layout(SendLargeChunk, ("sequence", U64), ("data", CHUNK), ("last", BOOL)),
        _layout(
            SendMany, ("first_sequence", U64), ("tx_id", _Optional(U64)), ("messages", MESSAGES)
        ),
        _layout(CreateConsumer, *CREATE_CONSUMER_FIELDS),
        _layout(CloseConsumer, ("request_id", U64), ("consumer_id", U32)),
        _layout(
            Deliver,
            ("consumer_id", U32),
            ("delivery_id", U64),
            ("delivery_count", U32),
            ("message", MESSAGE),
        ),
        _layout(ConsumerCredits, ("consumer_id", U32), ("credits", U32)),
        _layout(
            Ack,
            ("consumer_id", U32),
            ("delivery_id", U64),
            ("cumulative", BOOL),
            ("tx_id", _Optional(U64)),
            ("request_id", _Optional(U64)),
        ),
        _layout(Nack, ("consumer_id", U32), ("delivery_id", U64), ("requeue", BOOL)),
        _layout(
            DeliverLargeBegin,
            ("consumer_id", U32),
            ("delivery_id", U64),
            ("delivery_count", U32),
            ("message", MESSAGE_HEADER),
            ("total_size", U64),
        ),
        _layout(
            DeliverLargeChunk,
            ("consumer_id", U32),
            ("delivery_id", U64),
            ("data", CHUNK),
            ("last", BOOL),
        ),
        _layout(
            DeliverMany,
            ("consumer_id", U32),
            ("first_delivery_id", U64),
            ("delivery_count", U32),
            ("messages", MESSAGES),
        ),
        _layout(TxBegin, ("request_id", U64), ("tx_id", U64)),
        _layout(TxCommit, ("request_id", U64), ("tx_id", U64)),
        _layout(TxRollback, ("request_id", U64), ("tx_id", U64)),
        _layout(QueryAddress, ("request_id", U64), ("address", STR)),
        _layout(
            AddressInfo,
            ("request_id", U64),
            ("exists", BOOL),
            ("auto_create", BOOL),
            ("routing", _Optional(ROUTING)),
            ("max_size_bytes", SIZE),
            ("address_full_policy", POLICY),
            ("id_cache_size", U64),
        ),
        _layout(
            ReplicaAnnounce,
            ("node_name", STR),
            ("holder", STR),
            ("schema_version", U16),
            ("failback", BOOL),
            ("sequence", U64),
        ),
        _layout(ReplicaSyncBegin, ("node_name", STR), ("epoch", U64), ("schema_version", U16)),
        _layout(ReplicaSyncFile, ("data", DATA)),
        _layout(ReplicaBody, ("message_id", U64), ("data", CHUNK), ("last", BOOL)),
        _layout(ReplicaSyncEnd, ("sequence", U64)),
        _layout(ReplicaSynced, ("sequence", U64)),
        _layout(ReplicaBatch, ("sequence", U64), ("operations", DATA)),
        _layout(ReplicaAck, ("sequence", U64)),
        _layout(ReplicaDiscard, ("message_id", U64)),
        _layout(
            VoteRequest,
            ("node_name", STR),
            ("holder", STR),
            ("about", STR),
            ("sequence", U64),
            ("timeout_ms", U32),
        ),
        _layout(VoteReply, ("granted", BOOL), ("reason", TEXT), ("seen", U64)),
        _layout(Topology, ("members", MEMBERS)),
        _layout(Redirect, ("store", STR), ("urls", NAME_LIST)),
        _layout(ClusterConnect, *CONNECT_FIELDS, ("store", STR)),
        _layout(
            NodeAnnounce,
            ("node_id", STR),
            ("host_id", STR),
            ("urls", NAME_LIST),
            ("serves", NAME_LIST),
        ),
        _layout(ReattachConsumer, *CREATE_CONSUMER_FIELDS, ("claim", IDS)),
        _layout(Reattached, ("request_id", U64), ("claimed", CLAIMED), ("unclaimed", IDS)),
    )
}
"""Every packet's generic codec, by packet class."""


# The hot path. Each fast encoder/decoder does the well-formed case with precompiled
# structs and falls back to the packet's Layout, which raises the precise error.

_SEND = struct.Struct(">QBI")  # sequence, 0 (no tx), message length
_SEND_TX = struct.Struct(">QBQI")  # sequence, 1, tx_id, message length
_DELIVER = struct.Struct(">IQII")  # consumer, delivery, count, message length
_CREDITS = struct.Struct(">II")  # consumer, credits
_ACK = struct.Struct(">IQBBB")  # consumer, delivery, cumulative, 0 (no tx), 0 (no request)
_ACK_TX = struct.Struct(">IQBBQB")  # ..., 1, tx_id, 0
_ACK_REQUEST = struct.Struct(">IQBBBQ")  # ..., 0, 1, request_id
_ACK_TX_REQUEST = struct.Struct(">IQBBQBQ")  # ..., 1, tx_id, 1, request_id
_ACK_TX_FLAG = 13  # offset of the tx presence byte
_MESSAGE_ERRORS = (struct.error, MessageFormatError)


def _encode_send(packet: Send) -> bytes:
    message = packet.message
    try:
        parts = encode_message_parts(message)
        tx_id = packet.tx_id
        if tx_id is None:
            head = _SEND.pack(packet.sequence, 0, message.size)
        else:
            head = _SEND_TX.pack(packet.sequence, 1, tx_id, message.size)
    except _MESSAGE_ERRORS:
        return LAYOUTS[Send].encode(packet)
    return b"".join([head, *parts])


def _decode_send(payload: bytes) -> Packet:
    size = len(payload)
    if size >= _SEND.size:
        flag = payload[8]
        tx_id: int | None = None
        if flag == 0:
            sequence, _, length = _SEND.unpack_from(payload)
            at = _SEND.size
        elif flag == 1 and size >= _SEND_TX.size:
            sequence, _, tx_id, length = _SEND_TX.unpack_from(payload)
            at = _SEND_TX.size
        else:
            return LAYOUTS[Send].decode(payload)
        if at + length == size:
            try:
                message = decode_message(memoryview(payload)[at:])
            except MessageFormatError:
                pass
            else:
                return Send(sequence, tx_id, message)
    return LAYOUTS[Send].decode(payload)


def _encode_send_confirmed(packet: SendConfirmed) -> bytes:
    try:
        return _BE_U64.pack(packet.up_to_sequence)
    except struct.error:
        return LAYOUTS[SendConfirmed].encode(packet)


def _decode_send_confirmed(payload: bytes) -> Packet:
    if len(payload) == _BE_U64.size:
        return SendConfirmed(_BE_U64.unpack(payload)[0])
    return LAYOUTS[SendConfirmed].decode(payload)


def _encode_deliver(packet: Deliver) -> bytes:
    message = packet.message
    try:
        parts = encode_message_parts(message)
        head = _DELIVER.pack(
            packet.consumer_id, packet.delivery_id, packet.delivery_count, message.size
        )
    except _MESSAGE_ERRORS:
        return LAYOUTS[Deliver].encode(packet)
    return b"".join([head, *parts])


def _decode_deliver(payload: bytes) -> Packet:
    if len(payload) >= _DELIVER.size:
        consumer_id, delivery_id, count, length = _DELIVER.unpack_from(payload)
        if _DELIVER.size + length == len(payload):
            try:
                message = decode_message(memoryview(payload)[_DELIVER.size :])
            except MessageFormatError:
                pass
            else:
                return Deliver(consumer_id, delivery_id, count, message)
    return LAYOUTS[Deliver].decode(payload)


def _encode_consumer_credits(packet: ConsumerCredits) -> bytes:
    try:
        return _CREDITS.pack(packet.consumer_id, packet.credits)
    except struct.error:
        return LAYOUTS[ConsumerCredits].encode(packet)


def _decode_consumer_credits(payload: bytes) -> Packet:
    if len(payload) == _CREDITS.size:
        return ConsumerCredits(*_CREDITS.unpack(payload))
    return LAYOUTS[ConsumerCredits].decode(payload)


def _encode_ack(packet: Ack) -> bytes:
    consumer_id, delivery_id, cumulative = packet.consumer_id, packet.delivery_id, packet.cumulative
    tx_id, request_id = packet.tx_id, packet.request_id
    try:
        if type(cumulative) is bool:
            if tx_id is None:
                if request_id is None:
                    return _ACK.pack(consumer_id, delivery_id, cumulative, 0, 0)
                return _ACK_REQUEST.pack(consumer_id, delivery_id, cumulative, 0, 1, request_id)
            if request_id is None:
                return _ACK_TX.pack(consumer_id, delivery_id, cumulative, 1, tx_id, 0)
            return _ACK_TX_REQUEST.pack(
                consumer_id, delivery_id, cumulative, 1, tx_id, 1, request_id
            )
    except struct.error:
        pass
    return LAYOUTS[Ack].encode(packet)


def _decode_ack(payload: bytes) -> Packet:
    size = len(payload)
    if size == _ACK.size:
        consumer_id, delivery_id, cumulative, has_tx, has_request = _ACK.unpack(payload)
        if cumulative <= 1 and has_tx == 0 and has_request == 0:
            return Ack(consumer_id, delivery_id, cumulative == 1, None, None)
    elif size == _ACK_TX.size:  # the same size as _ACK_REQUEST
        if payload[_ACK_TX_FLAG] == 1:
            consumer_id, delivery_id, cumulative, _, tx_id, has_request = _ACK_TX.unpack(payload)
            if cumulative <= 1 and has_request == 0:
                return Ack(consumer_id, delivery_id, cumulative == 1, tx_id, None)
        else:
            consumer_id, delivery_id, cumulative, has_tx, has_request, request_id = (
                _ACK_REQUEST.unpack(payload)
            )
            if cumulative <= 1 and has_tx == 0 and has_request == 1:
                return Ack(consumer_id, delivery_id, cumulative == 1, None, request_id)
    elif size == _ACK_TX_REQUEST.size:
        consumer_id, delivery_id, cumulative, has_tx, tx_id, has_request, request_id = (
            _ACK_TX_REQUEST.unpack(payload)
        )
        if cumulative <= 1 and has_tx == 1 and has_request == 1:
            return Ack(consumer_id, delivery_id, cumulative == 1, tx_id, request_id)
    return LAYOUTS[Ack].decode(payload)


_ENCODERS: dict[type[Packet], Callable[[Any], bytes]] = {
    cls: LAYOUTS[cls].encode for cls in PACKET_CLASSES
}
_ENCODERS.update(
    {
        Send: _encode_send,
        SendConfirmed: _encode_send_confirmed,
        Deliver: _encode_deliver,
        ConsumerCredits: _encode_consumer_credits,
        Ack: _encode_ack,
    }
)
_DECODERS: dict[int, Callable[[bytes], Packet]] = {
    cls.TYPE: LAYOUTS[cls].decode for cls in PACKET_CLASSES
}
_DECODERS.update(
    {
        PacketType.SEND: _decode_send,
        PacketType.SEND_CONFIRMED: _decode_send_confirmed,
        PacketType.DELIVER: _decode_deliver,
        PacketType.CONSUMER_CREDITS: _decode_consumer_credits,
        PacketType.ACK: _decode_ack,
    }
)


_SEND_MANY = struct.Struct(">QBI")  # first sequence, 0 (no tx), count
_SEND_MANY_TX = struct.Struct(">QBQI")  # first sequence, 1, tx_id, count
_pack_u32 = _BE_U32.pack


def encode_sends(first_sequence: int, tx_id: int | None, encoded: list[bytes]) -> tuple[int, bytes]:
    """A SEND (one message) or a SEND_MANY (several) of messages encoded already
    (``bridge.message.encode_message``), numbered from ``first_sequence``: what
    ``encode_packet`` gives for the same packet, without encoding a message twice. The
    client encodes each message as it is sent, so that a bad one is refused at once."""
    if len(encoded) == 1:
        data = encoded[0]
        if tx_id is None:
            head = _SEND.pack(first_sequence, 0, len(data))
        else:
            head = _SEND_TX.pack(first_sequence, 1, tx_id, len(data))
        return PacketType.SEND, head + data
    if tx_id is None:
        parts = [_SEND_MANY.pack(first_sequence, 0, len(encoded))]
    else:
        parts = [_SEND_MANY_TX.pack(first_sequence, 1, tx_id, len(encoded))]
    for data in encoded:
        parts += (_pack_u32(len(data)), data)
    return PacketType.SEND_MANY, b"".join(parts)


def encode_packet(packet: Packet) -> tuple[int, bytes]:
    """The frame type and payload of ``packet``, for ``transport.frames.encode``.

    Raises PacketFormatError naming the packet and field when a value does not fit its
    wire form (an id over 64 bits, a name over 65535 bytes, a message that cannot be
    encoded).
    """
    encoder = _ENCODERS.get(type(packet))
    if encoder is None:
        raise PacketFormatError(type(packet).__name__, None, None, "not a core protocol packet")
    return packet.TYPE, encoder(packet)


def decode_packet(frame_type: int, payload: bytes) -> Packet:
    """The packet a frame of ``frame_type`` with ``payload`` carries.

    Raises PacketFormatError naming the packet, the field and its offset when the payload
    is malformed, and for a frame type that is not a core protocol packet.
    """
    decoder = _DECODERS.get(frame_type)
    if decoder is None:
        raise PacketFormatError(
            f"frame type {frame_type}", None, None, "not a core protocol packet type"
        )
    return decoder(payload)
