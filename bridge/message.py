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
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

HeaderValue = str | int | float | bool | bytes

BRIDGE_DUPLICATE_ID = "_TXB_BRIDGE_DUP_ID"
"""The header (a bytes value) a core bridge puts on each message it forwards: its
duplicate-detection id, checked against the target address's bridge cache rather than its
producers' (Artemis's ``_AMQ_BRIDGE_DUP``)."""

BRIDGE_PATH = "_TXB_BRIDGE_PATH"
"""The header (a str) naming the nodes whose core bridges forwarded a message, in order,
so that no bridge forwards it to a node it has been through (a cycle ends)."""

BRIDGE_HEADERS = frozenset({BRIDGE_DUPLICATE_ID, BRIDGE_PATH})
"""The bridges' bookkeeping: the nodes use it, the applications have no use for it (a
STOMP MESSAGE leaves it out)."""

DELIVERY_COUNT = "_TXB_DELIVERY_COUNT"
"""The header (an int) a drain's bridge puts on a durable message that was delivered on
the node it leaves: how many times. The node it moves to counts its deliveries on from
there, so its consumers see a redelivery as one (docs/ha.md, Graceful drain)."""

ROUTING_TYPE = "_TXB_ROUTING_TYPE"
"""The header (a str, "anycast" or "multicast") by which a send to an address with both
routing types says which of its queues it is for (Artemis's ``_AMQ_ROUTING_TYPE``); an
address with one routing type ignores it."""

VERSION = 1
_DURABLE = 0x01
_HAS_DUPLICATE_ID = 0x02
_KNOWN_FLAGS = _DURABLE | _HAS_DUPLICATE_ID

_STR, _INT, _FLOAT, _FALSE, _TRUE, _BYTES = 1, 2, 3, 4, 5, 6

_FIXED = struct.Struct(">BBqqH")  # version, flags, id, timestamp, address length
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


NO_HEADERS: Mapping[str, HeaderValue] = MappingProxyType({})
"""The headers of a message that has none, shared (a head builds no dict for them)."""


class MessageFormatError(ValueError):
    """A message cannot be encoded, or a buffer is not a well-formed encoded message."""


@attrs.frozen
class LargeBody:
    """A body kept in a file, not in memory: a large message's, on the node."""

    path: str
    size: int


@attrs.define(unsafe_hash=True)
class Message:
    """One message. ``headers`` has string keys; values are str, int (signed 64-bit),
    float, bool or bytes. ``duplicate_id`` is the producer's duplicate-detection id.

    ``large`` is set on a node's large message: its body is that file, ``body`` is empty
    and the codec carries the rest (the header). ``size`` counts the header only.

    A message is never changed once built: queues, deliveries and the store share it.
    The class is not frozen only because a frozen class's ``__init__`` costs three times
    as much, and a node builds one to three per message it passes on (hashing and
    equality are a frozen class's)."""

    id: int
    address: str
    durable: bool
    headers: Mapping[str, HeaderValue] = attrs.field(hash=False)
    body: bytes
    duplicate_id: bytes | None = None
    timestamp_ns: int = 0
    large: LargeBody | None = attrs.field(default=None, eq=False)
    _encoded_fields: bytes | None = attrs.field(default=None, init=False, eq=False, repr=False)
    """The encoding of everything between the id and the body (timestamp, address,
    duplicate id, headers) where known: a decoded message has it for a slice, and the same
    message under another id (``with_id``) keeps it. A node encodes each message it routes
    at least twice (its store row, each delivery); with these only id and body are new."""
    _size: int | None = attrs.field(default=None, init=False, eq=False, repr=False)
    """``size`` once counted (or filled in by whoever encoded or measured the message)."""

    @property
    def bridge_duplicate_id(self) -> bytes | None:
        """The ``BRIDGE_DUPLICATE_ID`` header's value; None if absent or not bytes."""
        value = self.headers.get(BRIDGE_DUPLICATE_ID)
        return value if isinstance(value, bytes) else None

    @property
    def delivered_before(self) -> int:
        """The ``DELIVERY_COUNT`` header's value; 0 if absent or not a positive int."""
        value = self.headers.get(DELIVERY_COUNT)
        return value if type(value) is int and value > 0 else 0

    @property
    def size(self) -> int:
        """Bytes counted against memory and address limits: the encoded length, counted
        once. (A property over a slot, not ``functools.cached_property``: on a slotted
        class that gives the class a ``__getattr__``, and every attribute read of every
        message then takes the interpreter's slow path.)"""
        size = self._size
        if size is None:
            size = self._size = encoded_size(self)
        return size

    def with_id(self, id: int) -> Message:
        """This message under another id (the node numbers every message it routes);
        cheaper than ``attrs.evolve`` on the hot path, and its size (the id has a fixed
        width) is known without counting again.

        A durable message whose fields are not encoded yet (a head's fresh send) has them
        encoded here, once: its size is their length plus the id's and the body's, and
        its store row (``encode_message``) then only packs the id and the body around
        them, where counting its size and then encoding it would walk its headers twice."""
        fields = self._encoded_fields
        if fields is None and self.durable:
            fields = _fields_or_none(self)
        message = Message(
            id,
            self.address,
            self.durable,
            self.headers,
            self.body,
            self.duplicate_id,
            self.timestamp_ns,
            self.large,
        )
        if fields is None:
            _set_size(message, self.size)
        else:
            _set_fields(message, fields)
            _set_size(message, _AROUND_FIELDS + len(fields) + len(self.body))
        return message

    def forwarded(
        self,
        address: str,
        added: Mapping[str, HeaderValue],
        encoded_added: bytes | None = None,
    ) -> Message:
        """This message as a bridge sends it on: to ``address``, with ``added`` headers
        (none of which it has) after its own, id and timestamp 0 as a client sends.
        ``encoded_added``, where the caller has it: ``encode_headers(added)``. ``added``
        must be the caller's own dict: it may become the forward's headers as it is.

        A durable message's fields are encoded (and kept, for its store row) if they are
        not already, and the forward's are made from them, the address and the header
        count changed and the added headers appended, so that the send does not encode
        all its headers again."""
        headers = {**self.headers, **added} if self.headers else added  # (a fresh dict)
        message = Message(
            0, address, self.durable, headers, self.body, self.duplicate_id, 0, self.large
        )
        fields = self._encoded_fields
        if fields is None and self.durable:
            # Not encoded yet (a bridge takes most messages before their store write):
            # encoded now and kept, the write then uses them, and the forward is spliced.
            fields = _fields_or_none(self)
            if fields is not None:
                _set_fields(self, fields)
        if fields is not None and len(headers) == len(self.headers) + len(added):
            if encoded_added is None:
                encoded_added = _headers_or_none(added)
            spliced = (
                None
                if encoded_added is None
                else _spliced(fields, self.duplicate_id, address, encoded_added, len(headers))
            )
            if spliced is not None:
                _set_fields(message, spliced)
                _set_size(message, _AROUND_FIELDS + len(spliced) + len(self.body))
        return message

    def stub(self) -> Message:
        """This message without headers or body: what a queue keeps of a paged message
        (its id and flags), the rest staying in the store."""
        return Message(self.id, self.address, self.durable, NO_HEADERS, b"")


_set_size = Message._size.__set__  # type: ignore[misc,union-attr]
"""Fill in a message's ``size`` where it is known already (its encoded length after
encoding or decoding it), so that it is not counted again: ``_size`` is a slot."""
_set_fields = Message._encoded_fields.__set__  # type: ignore[misc,union-attr]
"""Fill in a message's ``_encoded_fields`` (a slot: the one thing, with ``size``, that
is filled in after a message is built, and only while it is known to the code doing so
alone)."""


def measured(message: Message) -> Message:
    """``message``, built by a head just now, with its ``size`` filled in (and, if it is
    durable and has headers, its encoded fields, as ``encode_message`` keeps them): the
    node reads its size as soon as it routes it, and its store row is then packed
    without walking its headers again. Without headers, counting walks nothing: the
    fields are encoded when first needed, and most such sends are consumed before their
    store write, which is then never made. A message that cannot be encoded is returned
    as it is: reading its size names why."""
    fields = _fields_or_none(message) if message.durable and message.headers else None
    if fields is None:
        try:  # noqa: SIM105 (``contextlib.suppress`` costs three calls more per message)
            _set_size(message, encoded_size(message))
        except MessageFormatError:
            pass
    else:
        _set_fields(message, fields)
        _set_size(message, _AROUND_FIELDS + len(fields) + len(message.body))
    return message


def encoded_size(message: Message) -> int:
    """The length ``encode_message(message)`` returns, computed without encoding the body;
    ``MessageFormatError`` names a field that cannot be encoded (the checking encoder's)."""
    try:
        size = _FIXED_SIZE + len(message.address.encode()) + len(message.body)
        if message.duplicate_id is not None:
            size += _U16.size + len(message.duplicate_id)
        headers: Mapping[str, object] = message.headers  # as built, maybe not as typed
        for key, value in headers.items():
            size += _U16.size + len(key.encode()) + 1  # key length, key, type tag
            if isinstance(value, bool):
                continue
            if isinstance(value, str):
                size += _U32.size + len(value.encode())
            elif isinstance(value, bytes):
                size += _U32.size + len(value)
            elif isinstance(value, int | float):
                size += 8
            else:
                return len(_encode_checked(message))
    except (UnicodeEncodeError, AttributeError):
        return len(_encode_checked(message))
    return size


_START = struct.Struct(">BBq")  # version, flags, id: before the kept _encoded_fields
_AROUND_FIELDS = _START.size + _U32.size  # and the body length, after them
_FIELDS_START = struct.Struct(">qH")  # timestamp, address length
_pack_fields_start = _FIELDS_START.pack
_pack_start = _START.pack
_pack_fixed = _FIXED.pack
_pack_u32 = _U32.pack


def encode_message(message: Message) -> bytes:
    """The message as one byte string; ``MessageFormatError`` names what cannot be encoded."""
    return b"".join(encode_message_parts(message))


def encode_message_parts(message: Message) -> list[bytes]:
    """The parts ``encode_message`` joins, for a codec that joins them behind its own
    fields (one copy of the body, not two); the message's ``size`` is their length.

    The fields are packed without checking them first: a value that does not fit makes
    ``struct`` fail, and the checking encoder then says which it is. A durable message's
    fields are kept once encoded: its store row and each delivery to a core consumer (a
    bridge) then pack only the id and the body around them."""
    fields = message._encoded_fields
    if fields is None:
        if not message.durable:
            return _encode_parts(message)
        fields = _fields_or_none(message)
        if fields is None:
            return _encode_parts(message)
        _set_fields(message, fields)
    body = message.body
    flags = _DURABLE if message.durable else 0
    if message.duplicate_id is not None:
        flags |= _HAS_DUPLICATE_ID
    try:
        parts = [_pack_start(VERSION, flags, message.id), fields, _pack_u32(len(body)), body]
    except struct.error:
        parts = [_encode_checked(message)]
    _set_size(message, sum(map(len, parts)))
    return parts


def _encode_parts(message: Message) -> list[bytes]:
    """``encode_message_parts`` of a message whose fields are not encoded yet."""
    try:
        address = message.address.encode()
        flags = _DURABLE if message.durable else 0
        duplicate_id = message.duplicate_id
        if duplicate_id is None:
            parts = [
                _pack_fixed(VERSION, flags, message.id, message.timestamp_ns, len(address)),
                address,
            ]
        else:
            parts = [
                _pack_fixed(
                    VERSION,
                    flags | _HAS_DUPLICATE_ID,
                    message.id,
                    message.timestamp_ns,
                    len(address),
                ),
                address,
                _pack_u16(len(duplicate_id)),
                duplicate_id,
            ]
        headers = message.headers
        parts.append(_pack_u16(len(headers)))
        _encode_headers(parts, headers)
        body = message.body
        parts += (_pack_u32(len(body)), body)
    except (struct.error, UnicodeEncodeError):
        parts = [_encode_checked(message)]
    _set_size(message, sum(map(len, parts)))
    return parts


def _fields_or_none(message: Message) -> bytes | None:
    """The encoding of a message's fields (``_encoded_fields``: timestamp, address,
    duplicate id, headers); None where one does not fit, for the checking encoder to name
    when the message is encoded."""
    try:
        address = message.address.encode()
        parts = [_pack_fields_start(message.timestamp_ns, len(address)), address]
        duplicate_id = message.duplicate_id
        if duplicate_id is not None:
            parts += (_pack_u16(len(duplicate_id)), duplicate_id)
        headers = message.headers
        parts.append(_pack_u16(len(headers)))
        _encode_headers(parts, headers)
    except (struct.error, UnicodeEncodeError, MessageFormatError):
        return None
    return b"".join(parts)


def _spliced(
    fields: bytes, duplicate_id: bytes | None, address: str, added: bytes, count: int
) -> bytes | None:
    """``fields`` (see ``_fields_or_none``) with timestamp 0, ``address``, ``count``
    headers and the encoded headers ``added`` appended; None where the address does not
    fit, for the checking encoder to name."""
    try:
        encoded_address = address.encode()
        start = _FIELDS_START.size + _unpack_u16(fields, 8)[0]  # after the old address
        end = start if duplicate_id is None else start + _U16.size + len(duplicate_id)
        return b"".join(
            (
                _pack_fields_start(0, len(encoded_address)),
                encoded_address,
                fields[start:end],
                _pack_u16(count),
                fields[end + _U16.size :],
                added,
            )
        )
    except (struct.error, UnicodeEncodeError):
        return None


def encode_headers(headers: Mapping[str, HeaderValue]) -> bytes:
    """The encoding of ``headers`` as a message's fields carry them after their count:
    what ``Message.forwarded`` appends for its added headers, for a caller that adds the
    same ones to many messages to work out once. ``MessageFormatError`` names one that
    cannot be encoded."""
    encoded = _headers_or_none(headers)
    if encoded is not None:
        return encoded
    parts: list[bytes] = []
    for key, value in headers.items():
        _encode_header(parts, key, value)  # the checking encoder: names what does not fit
    raise MessageFormatError(f"headers {sorted(headers)!r} cannot be encoded")


def _headers_or_none(headers: Mapping[str, HeaderValue]) -> bytes | None:
    parts: list[bytes] = []
    try:
        _encode_headers(parts, headers)
    except (struct.error, UnicodeEncodeError, MessageFormatError):
        return None
    return b"".join(parts)


def bytes_header_encoder(key: str) -> Callable[[bytes], bytes]:
    """``encode_headers({key: value})`` for a bytes ``value``, as a function of the value,
    its key encoded once: for a header added to many messages, each with its own value.
    ``MessageFormatError`` names a key that cannot be encoded."""
    head = encode_headers({key: b""})[: -_U32.size]
    pack = _U32.pack

    def encode(value: bytes) -> bytes:
        return b"".join((head, pack(len(value)), value))

    return encode


def _encode_checked(message: Message) -> bytes:
    """``encode_message`` checking every field first: the precise ``MessageFormatError``."""
    address = _utf8(message.address, "address")
    if len(address) > _MAX_U16:
        raise _too_long("address", address, _MAX_U16)
    flags = _DURABLE if message.durable else 0
    if message.duplicate_id is not None:
        flags |= _HAS_DUPLICATE_ID
    if not _MIN_I64 <= message.id <= _MAX_I64:
        raise MessageFormatError(f"message id {message.id} does not fit in 64 bits")
    if not _MIN_I64 <= message.timestamp_ns <= _MAX_I64:
        raise MessageFormatError(f"timestamp {message.timestamp_ns} does not fit in 64 bits")
    parts = [_FIXED.pack(VERSION, flags, message.id, message.timestamp_ns, len(address)), address]
    duplicate_id = message.duplicate_id
    if duplicate_id is not None:
        if len(duplicate_id) > _MAX_U16:
            raise _too_long("duplicate id", duplicate_id, _MAX_U16)
        parts += (_U16.pack(len(duplicate_id)), duplicate_id)
    headers = message.headers
    if len(headers) > _MAX_U16:
        raise MessageFormatError(f"{len(headers)} headers, at most {_MAX_U16} fit")
    parts.append(_U16.pack(len(headers)))
    for key, value in headers.items():
        _encode_header(parts, key, value)
    body = message.body
    if len(body) > _MAX_U32:
        raise _too_long("body", body, _MAX_U32)
    parts += (_U32.pack(len(body)), body)
    data = b"".join(parts)
    _set_size(message, len(data))
    return data


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError as error:
        raise MessageFormatError(f"{what} cannot be encoded as UTF-8: {error}") from None


def _too_long(what: str, data: bytes, limit: int) -> MessageFormatError:
    return MessageFormatError(f"{what} is {len(data)} bytes, at most {limit} fit")


_pack_u16 = _U16.pack
_pack_tag_u32 = struct.Struct(">BI").pack
_pack_tag_i64 = struct.Struct(">Bq").pack
_pack_tag_f64 = struct.Struct(">Bd").pack


def _encode_headers(parts: list[bytes], headers: Mapping[str, HeaderValue]) -> None:
    """Append the encoding of ``headers`` to ``parts``: a text header (nearly every one a
    STOMP client sends) or a bytes one inline, at under half the cost, any other by
    ``_encode_header``. A key or value too long makes ``struct`` fail, for the checking
    encoder to name."""
    for key, value in headers.items():
        if type(value) is str and type(key) is str:
            encoded, tag = value.encode(), _STR
        elif type(value) is bytes and type(key) is str:
            encoded, tag = value, _BYTES
        else:
            _encode_header(parts, key, value)
            continue
        encoded_key = key.encode()
        parts += (
            _pack_u16(len(encoded_key)),
            encoded_key,
            _pack_tag_u32(tag, len(encoded)),
            encoded,
        )


def _encode_header(parts: list[bytes], key: object, value: object) -> None:
    if not isinstance(key, str):
        raise MessageFormatError(f"header key {key!r} is not a string")
    encoded_key = _utf8(key, f"header key {key!r}")
    if len(encoded_key) > _MAX_U16:
        raise _too_long(f"header key {key!r}", encoded_key, _MAX_U16)
    parts += (_pack_u16(len(encoded_key)), encoded_key)
    if isinstance(value, bool):
        parts.append(b"\x05" if value else b"\x04")
    elif isinstance(value, str):
        encoded = _utf8(value, f"header {key!r}")
        if len(encoded) > _MAX_U32:
            raise _too_long(f"header {key!r}", encoded, _MAX_U32)
        parts += (_pack_tag_u32(_STR, len(encoded)), encoded)
    elif isinstance(value, int):
        if not _MIN_I64 <= value <= _MAX_I64:
            raise MessageFormatError(f"header {key!r}: int {value} does not fit in 64 bits")
        parts.append(_pack_tag_i64(_INT, value))
    elif isinstance(value, float):
        parts.append(_pack_tag_f64(_FLOAT, value))
    elif isinstance(value, bytes):
        if len(value) > _MAX_U32:
            raise _too_long(f"header {key!r}", value, _MAX_U32)
        parts += (_pack_tag_u32(_BYTES, len(value)), value)
    else:
        raise MessageFormatError(
            f"header {key!r}: {type(value).__name__} is not one of str, int, float, bool, bytes"
        )


_unpack_fixed = _FIXED.unpack_from
_unpack_u16 = _U16.unpack_from
_unpack_u32 = _U32.unpack_from
_unpack_i64 = _I64.unpack_from
_unpack_f64 = _F64.unpack_from
_DECODE_ERRORS = (struct.error, UnicodeDecodeError)


def decode_message(data: bytes | bytearray | memoryview) -> Message:
    """The message ``data`` encodes; ``MessageFormatError`` says what is malformed.

    A well-formed buffer is decoded by one straight pass; anything the pass does not
    accept goes to the checking decoder, which finds what is wrong and raises."""
    view = memoryview(data)
    size = len(view)
    try:
        version, flags, message_id, timestamp_ns, at = _unpack_fixed(view, 0)
        at += 20  # _FIXED.size
        if version != VERSION or flags & ~_KNOWN_FLAGS or at > size:
            return _decode_checked(view)
        address = str(view[20:at], "utf-8")
        duplicate_id = None
        if flags & _HAS_DUPLICATE_ID:
            end = at + 2 + _unpack_u16(view, at)[0]
            if end > size:
                return _decode_checked(view)
            duplicate_id = view[at + 2 : end].tobytes()
            at = end
        count = _unpack_u16(view, at)[0]
        at += 2
        headers: dict[str, HeaderValue] = {}
        for _ in range(count):
            end = at + 2 + _unpack_u16(view, at)[0]
            if end >= size:
                return _decode_checked(view)
            key = str(view[at + 2 : end], "utf-8")
            tag = view[end]
            at = end + 1
            if tag in (_STR, _BYTES):
                end = at + 4 + _unpack_u32(view, at)[0]
                if end > size:
                    return _decode_checked(view)
                value: HeaderValue = (
                    str(view[at + 4 : end], "utf-8")
                    if tag == _STR
                    else view[at + 4 : end].tobytes()
                )
                at = end
            elif tag == _INT:
                value = _unpack_i64(view, at)[0]
                at += 8
            elif tag == _FLOAT:
                value = _unpack_f64(view, at)[0]
                at += 8
            elif tag in (_TRUE, _FALSE):
                value = tag == _TRUE
            else:
                return _decode_checked(view)
            if key in headers:
                return _decode_checked(view)
            headers[key] = value
        end = at + 4 + _unpack_u32(view, at)[0]
        if end != size:
            return _decode_checked(view)
        body = view[at + 4 : end].tobytes()
    except _DECODE_ERRORS:
        return _decode_checked(view)
    message = Message(
        message_id,
        address,
        bool(flags & _DURABLE),
        headers,
        body,
        duplicate_id,
        timestamp_ns,
    )
    _set_size(message, size)
    _set_fields(message, view[_START.size : at].tobytes())
    return message


def _decode_checked(view: memoryview) -> Message:
    """``decode_message`` checking every field: the precise ``MessageFormatError``."""
    if len(view) < _FIXED.size:
        raise _truncated(view, 0, "the fixed fields")
    version, flags, message_id, timestamp_ns, length = _FIXED.unpack_from(view, 0)
    if version != VERSION:
        raise MessageFormatError(f"unknown message format version {version}")
    if flags & ~_KNOWN_FLAGS:
        raise MessageFormatError(f"unknown flags 0x{flags:02x}")
    address, at = _text(view, _FIXED.size, length, "address")
    duplicate_id = None
    if flags & _HAS_DUPLICATE_ID:
        length, at = _number(view, at, _U16, "duplicate id length")
        duplicate_id, at = _bytes(view, at, length, "duplicate id")
    count, at = _number(view, at, _U16, "header count")
    headers: dict[str, HeaderValue] = {}
    for _ in range(count):
        length, at = _number(view, at, _U16, "header key length")
        key, at = _text(view, at, length, "header key")
        if key in headers:
            raise MessageFormatError(f"header {key!r} appears twice")
        headers[key], at = _value(view, at, key)
    length, at = _number(view, at, _U32, "body length")
    body, at = _bytes(view, at, length, "body")
    if at != len(view):
        raise MessageFormatError(f"{len(view) - at} bytes follow the end of the message")
    return Message(
        id=message_id,
        address=address,
        durable=bool(flags & _DURABLE),
        headers=headers,
        body=body,
        duplicate_id=duplicate_id,
        timestamp_ns=timestamp_ns,
    )


# The decoding helpers take the offset and return (value, next offset); they check every
# length against what remains before slicing, and build an error message only on failure.


def _value(view: memoryview, at: int, key: str) -> tuple[HeaderValue, int]:
    if at >= len(view):
        raise _truncated(view, at, f"header {key!r} type")
    tag = view[at]
    at += 1
    if tag == _STR:
        length, at = _number(view, at, _U32, "length of header", key)
        return _text(view, at, length, "header", key)
    if tag in (_INT, _FLOAT):
        return _number(view, at, _I64 if tag == _INT else _F64, "header", key)
    if tag in (_TRUE, _FALSE):
        return tag == _TRUE, at
    if tag == _BYTES:
        length, at = _number(view, at, _U32, "length of header", key)
        return _bytes(view, at, length, "header", key)
    raise MessageFormatError(f"header {key!r} has unknown type tag {tag}")


def _number(
    view: memoryview, at: int, layout: struct.Struct, what: str, key: str | None = None
) -> tuple[Any, int]:
    end = at + layout.size
    if end > len(view):
        raise _truncated(view, at, _name(what, key))
    return layout.unpack_from(view, at)[0], end


def _bytes(
    view: memoryview, at: int, length: int, what: str, key: str | None = None
) -> tuple[bytes, int]:
    end = at + length
    if end > len(view):
        raise _truncated(view, at, f"{_name(what, key)} of {length} bytes")
    return view[at:end].tobytes(), end


def _text(
    view: memoryview, at: int, length: int, what: str, key: str | None = None
) -> tuple[str, int]:
    end = at + length
    if end > len(view):
        raise _truncated(view, at, f"{_name(what, key)} of {length} bytes")
    try:
        return str(view[at:end], "utf-8"), end
    except UnicodeDecodeError as error:
        raise MessageFormatError(
            f"{_name(what, key)} at offset {at} is not UTF-8: {error}"
        ) from None


def _name(what: str, key: str | None) -> str:
    return what if key is None else f"{what} {key!r}"


def _truncated(view: memoryview, at: int, what: str) -> MessageFormatError:
    return MessageFormatError(
        f"truncated at offset {at}: {what} missing, {len(view) - at} bytes remain"
    )
