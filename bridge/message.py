"""The message as the node, the store and the wire protocol see it, and its binary codec.

The codec is written by hand, sans-IO: a message becomes one compact byte string and back.
Every variable-length part is length-prefixed and every header value is type-tagged, so a
decoder never guesses. Decoding checks each length against the bytes that remain before
it slices, so a malformed or hostile buffer costs at most its own size in memory and ends
in a ``MessageFormatError`` that says what was wrong and where.

Layout (big-endian)::

    u8  version (1)
    u8  flags: bit 0 durable, bit 1 a duplicate id follows
    i64 id
    i64 timestamp_ns
    u16 address length, address (UTF-8)
    [u16 duplicate id length, duplicate id]          if flag bit 1
    u16 header count, then per header:
        u16 key length, key (UTF-8), u8 tag, value:
        1 str: u32 length + UTF-8 | 2 int: i64 | 3 float: f64
        4 false | 5 true (no value) | 6 bytes: u32 length + bytes
    u32 body length, body
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from functools import cached_property
from typing import Any

import attrs

HeaderValue = str | int | float | bool | bytes

VERSION = 1
_DURABLE = 0x01
_HAS_DUPLICATE_ID = 0x02
_KNOWN_FLAGS = _DURABLE | _HAS_DUPLICATE_ID

_STR, _INT, _FLOAT, _FALSE, _TRUE, _BYTES = 1, 2, 3, 4, 5, 6

_FIXED = struct.Struct(">BBqqH")  # version, flags, id, timestamp, address length
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

_MAX_U16 = 0xFFFF
_MAX_U32 = 0xFFFF_FFFF
_MIN_I64 = -(1 << 63)
_MAX_I64 = (1 << 63) - 1
# version, flags, id, timestamp, address length, header count, body length
_FIXED_SIZE = _FIXED.size + _U16.size + _U32.size


class MessageFormatError(ValueError):
    """A message cannot be encoded, or a buffer is not a well-formed encoded message."""


@attrs.frozen
class Message:
    """One message. ``headers`` has string keys; values are str, int (signed 64-bit),
    float, bool or bytes. ``duplicate_id`` is the producer's duplicate-detection id."""

    id: int
    address: str
    durable: bool
    headers: Mapping[str, HeaderValue] = attrs.field(hash=False)
    body: bytes
    duplicate_id: bytes | None = None
    timestamp_ns: int = 0

    @cached_property
    def size(self) -> int:
        """Bytes counted against memory and address limits: the encoded length."""
        return encoded_size(self)


def encoded_size(message: Message) -> int:
    """The length ``encode_message(message)`` returns, computed without encoding the body."""
    size = _FIXED_SIZE + len(message.address.encode()) + len(message.body)
    if message.duplicate_id is not None:
        size += _U16.size + len(message.duplicate_id)
    for key, value in message.headers.items():
        size += _U16.size + len(key.encode()) + _U8.size
        if isinstance(value, bool):
            continue
        if isinstance(value, str):
            size += _U32.size + len(value.encode())
        elif isinstance(value, bytes):
            size += _U32.size + len(value)
        else:
            size += 8
    return size


def encode_message(message: Message) -> bytes:
    """The message as one byte string; ``MessageFormatError`` names what cannot be encoded."""
    address = _utf8(message.address, "address")
    _check_length("address", address, _MAX_U16)
    flags = _DURABLE if message.durable else 0
    if message.duplicate_id is not None:
        flags |= _HAS_DUPLICATE_ID
    if not _MIN_I64 <= message.id <= _MAX_I64:
        raise MessageFormatError(f"message id {message.id} does not fit in 64 bits")
    if not _MIN_I64 <= message.timestamp_ns <= _MAX_I64:
        raise MessageFormatError(f"timestamp {message.timestamp_ns} does not fit in 64 bits")
    parts = [_FIXED.pack(VERSION, flags, message.id, message.timestamp_ns, len(address)), address]
    if message.duplicate_id is not None:
        _check_length("duplicate id", message.duplicate_id, _MAX_U16)
        parts += (_U16.pack(len(message.duplicate_id)), message.duplicate_id)
    headers = message.headers
    if len(headers) > _MAX_U16:
        raise MessageFormatError(f"{len(headers)} headers, at most {_MAX_U16} fit")
    parts.append(_U16.pack(len(headers)))
    for key, value in headers.items():
        _encode_header(parts, key, value)
    _check_length("body", message.body, _MAX_U32)
    parts += (_U32.pack(len(message.body)), message.body)
    return b"".join(parts)


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError as error:
        raise MessageFormatError(f"{what} cannot be encoded as UTF-8: {error}") from None


def _check_length(what: str, data: bytes, limit: int) -> None:
    if len(data) > limit:
        raise MessageFormatError(f"{what} is {len(data)} bytes, at most {limit} fit")


def _encode_header(parts: list[bytes], key: object, value: object) -> None:
    if not isinstance(key, str):
        raise MessageFormatError(f"header key {key!r} is not a string")
    encoded_key = _utf8(key, f"header key {key!r}")
    _check_length(f"header key {key!r}", encoded_key, _MAX_U16)
    parts += (_U16.pack(len(encoded_key)), encoded_key)
    if isinstance(value, bool):
        parts.append(_U8.pack(_TRUE if value else _FALSE))
    elif isinstance(value, str):
        encoded = _utf8(value, f"header {key!r}")
        _check_length(f"header {key!r}", encoded, _MAX_U32)
        parts += (_U8.pack(_STR), _U32.pack(len(encoded)), encoded)
    elif isinstance(value, int):
        if not _MIN_I64 <= value <= _MAX_I64:
            raise MessageFormatError(f"header {key!r}: int {value} does not fit in 64 bits")
        parts += (_U8.pack(_INT), _I64.pack(value))
    elif isinstance(value, float):
        parts += (_U8.pack(_FLOAT), _F64.pack(value))
    elif isinstance(value, bytes):
        _check_length(f"header {key!r}", value, _MAX_U32)
        parts += (_U8.pack(_BYTES), _U32.pack(len(value)), value)
    else:
        raise MessageFormatError(
            f"header {key!r}: {type(value).__name__} is not one of str, int, float, bool, bytes"
        )


def decode_message(data: bytes | bytearray | memoryview) -> Message:
    """The message ``data`` encodes; ``MessageFormatError`` says what is malformed."""
    return _Reader(memoryview(data)).message()


class _Reader:
    """A cursor over one encoded message that checks every length before it slices."""

    def __init__(self, view: memoryview) -> None:
        self._view = view
        self._at = 0

    def message(self) -> Message:
        version, flags, message_id, timestamp_ns, address_length = self._unpack(
            _FIXED, "the fixed fields"
        )
        if version != VERSION:
            raise MessageFormatError(f"unknown message format version {version}")
        if flags & ~_KNOWN_FLAGS:
            raise MessageFormatError(f"unknown flags 0x{flags:02x}")
        address = self._text(address_length, "address")
        duplicate_id = None
        if flags & _HAS_DUPLICATE_ID:
            duplicate_id = self._bytes(self._unpack(_U16, "duplicate id length")[0], "duplicate id")
        (count,) = self._unpack(_U16, "header count")
        headers: dict[str, HeaderValue] = {}
        for index in range(count):
            key = self._text(self._unpack(_U16, f"header {index} key length")[0], "header key")
            if key in headers:
                raise MessageFormatError(f"header {key!r} appears twice")
            headers[key] = self._value(key)
        body = self._bytes(self._unpack(_U32, "body length")[0], "body")
        if self._at != len(self._view):
            raise MessageFormatError(
                f"{len(self._view) - self._at} bytes follow the end of the message"
            )
        return Message(
            id=message_id,
            address=address,
            durable=bool(flags & _DURABLE),
            headers=headers,
            body=body,
            duplicate_id=duplicate_id,
            timestamp_ns=timestamp_ns,
        )

    def _value(self, key: str) -> HeaderValue:
        tag: int = self._unpack(_U8, f"header {key!r} type")[0]
        if tag == _STR:
            return self._text(self._unpack(_U32, f"header {key!r} length")[0], f"header {key!r}")
        if tag == _INT:
            value: int = self._unpack(_I64, f"header {key!r}")[0]
            return value
        if tag == _FLOAT:
            number: float = self._unpack(_F64, f"header {key!r}")[0]
            return number
        if tag in (_FALSE, _TRUE):
            return tag == _TRUE
        if tag == _BYTES:
            return self._bytes(self._unpack(_U32, f"header {key!r} length")[0], f"header {key!r}")
        raise MessageFormatError(f"header {key!r} has unknown type tag {tag}")

    def _unpack(self, layout: struct.Struct, what: str) -> tuple[Any, ...]:
        end = self._at + layout.size
        if end > len(self._view):
            raise MessageFormatError(f"truncated at offset {self._at}: {what} missing")
        values: tuple[Any, ...] = layout.unpack_from(self._view, self._at)
        self._at = end
        return values

    def _slice(self, length: int, what: str) -> memoryview:
        end = self._at + length
        if end > len(self._view):
            raise MessageFormatError(
                f"truncated at offset {self._at}: {what} of {length} bytes, "
                f"{len(self._view) - self._at} remain"
            )
        part = self._view[self._at : end]
        self._at = end
        return part

    def _bytes(self, length: int, what: str) -> bytes:
        return self._slice(length, what).tobytes()

    def _text(self, length: int, what: str) -> str:
        start = self._at
        try:
            return str(self._slice(length, what), "utf-8")
        except UnicodeDecodeError as error:
            raise MessageFormatError(f"{what} at offset {start} is not UTF-8: {error}") from None
